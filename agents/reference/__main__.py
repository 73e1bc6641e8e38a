"""Entry point: `python -m agents.reference [flags]` (see `--help`)."""

from .agent import main

main()
