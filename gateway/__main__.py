"""`python -m gateway`: the same command line as `acp-gateway`."""

import sys

from .cli import main

sys.exit(main())
