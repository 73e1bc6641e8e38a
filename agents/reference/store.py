"""The reference agent's sessions and where they are kept: one JSON file each in the state directory, so that
`session/load` and `session/resume` work across restarts of the agent."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .options import SessionOptions


@dataclass
class Session:
    """One ACP session: what is stored (id, cwd, title, history, configuration, MCP servers, directories) and what
    lives only while this process serves it (the cancel flag, the running turn, the turn's `_meta`)."""

    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    turn_running: bool = False
    options: SessionOptions = field(default_factory=SessionOptions)
    mcp: list[dict[str, Any]] = field(default_factory=list)  # names, types, env and header names: never values
    directories: list[str] = field(default_factory=list)
    prompt_meta: Any = None  # the `_meta` of the turn's `session/prompt` (`/meta` says it)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class SessionStore:
    """Sessions as files `<id>.json` under `state_dir`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)

    def path(self, session_id: str) -> Path:
        # The id comes from the client: only its safe characters make the file name.
        safe = "".join(c for c in session_id if c.isalnum() or c in "-_")
        return self.state_dir / f"{safe}.json"

    def save(self, session: Session) -> None:
        session.updated_at = _now()
        data = {
            "sessionId": session.session_id,
            "cwd": session.cwd,
            "title": session.title,
            "updatedAt": session.updated_at,
            "history": session.history,
            "config": session.options.values,
            "mcpServers": session.mcp,
            "additionalDirectories": session.directories,
        }
        path = self.path(session.session_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(data))
        os.replace(tmp, path)  # a crash mid-write leaves the previous file whole

    def read(self, session_id: object) -> Session | None:
        """The stored session `session_id`, configuration included; None if there is none (or it is unreadable)."""
        if not isinstance(session_id, str) or not session_id:
            return None
        try:
            data = orjson.loads(self.path(session_id).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        session = Session(
            session_id=data["sessionId"],
            cwd=data["cwd"],
            title=data.get("title"),
            updated_at=data.get("updatedAt", ""),
            history=data.get("history", []),
            mcp=data.get("mcpServers", []),
            directories=data.get("additionalDirectories", []),
        )
        if isinstance(data.get("config"), dict):
            session.options.values.update(data["config"])
        return session

    def stored_ids(self) -> list[str]:
        """The ids of the stored sessions, by file name."""
        return [path.stem for path in sorted(self.state_dir.glob("*.json"))]
