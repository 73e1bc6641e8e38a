"""`python -m agents.replay FILE.jsonl|DIR ...`: the replay agent, kept at this name for the commands that start it
(profiles, tests, docs). It lives in `acp/replay/agent.py`."""

from __future__ import annotations

import sys

from acp.replay.agent import load_script, load_scripts, main, run_replay, serve
from acp.replay.arguments import add_arguments

__all__ = ["add_arguments", "load_script", "load_scripts", "main", "run_replay", "serve"]

if __name__ == "__main__":
    sys.exit(main())
