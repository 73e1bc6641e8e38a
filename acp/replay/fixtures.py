"""`acp-gateway fixtures diff OLD NEW`: reads two recordings of an agent and says what changed, in words or JSON."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from .diff import as_json, diff, report, summarize
from .script import Script


def load(path: Path) -> list[Script]:
    """A corpus directory (each `*.jsonl`, named by its stem, so two versions' scenarios line up) or one recording."""
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise ValueError(f"{path}: no recording (*.jsonl) in this directory")
        return [Script.from_lines(f.stem, f.read_bytes().splitlines()) for f in files]
    return [Script.from_lines("recording", path.read_bytes().splitlines())]


def diff_command(old: Path, new: Path, as_json_output: bool) -> int:
    try:
        changes = diff(summarize(load(old)), summarize(load(new)))
    except (OSError, ValueError) as exc:
        print(f"acp-gateway fixtures diff: {exc}", file=sys.stderr)
        return 2
    if as_json_output:
        sys.stdout.write(orjson.dumps({"old": str(old), "new": str(new), "changes": as_json(changes)},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(report(changes, old.name, new.name))
    return 0
