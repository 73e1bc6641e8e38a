"""The replay agent's command line (`acp-gateway replay`, `python -m agents.replay`): its flags alone, so the
gateway's command line lists them without loading the replay (its rules, its scripts) for every other verb."""

from __future__ import annotations

import argparse
from pathlib import Path

PACE = 0.25  # the longest gap kept between two frames of the agent, without --realtime (`--pace`)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("fixture", type=Path, nargs="+",
                        help="recordings written by `acp-gateway record`, or a directory of them (a corpus)")
    parser.add_argument("--realtime", action="store_true", help="reproduce the recorded pacing")
    parser.add_argument("--strict", action="store_true",
                        help="match only what no two runs can avoid: request ids, paths, secrets (rules RM1, RM3, RM8)")
    parser.add_argument("--pace", type=float, default=PACE, metavar="S",
                        help=f"keep the recorded gaps between the agent's frames up to S seconds (default {PACE})")
    parser.add_argument("--forget-sessions", action="store_true",
                        help="play the agent after it lost the sessions it handed out before this process")
