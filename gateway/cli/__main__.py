"""`python -m gateway.cli`: the same command line as `acp-gateway`."""

import sys

from . import main

sys.exit(main())
