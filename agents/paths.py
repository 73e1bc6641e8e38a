"""Where the gateway keeps its state by default: a module of its own, so that a command that needs only the path
(the frontend verbs, which speak the wire) imports nothing else."""

from __future__ import annotations

import os
from pathlib import Path


def default_state_dir() -> Path:
    """The per-user state directory (XDG): SQLite file, token, the reference agent's sessions."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "acp-gateway"
