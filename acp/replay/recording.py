"""Recording agents' traffic (`record_dir`): each agent process of a session to a file of its own, as
`acp-gateway record` writes it — the session's secrets as `[secret]`, its working directory as `<cwd>` and its
agent home as `<home>` — so `acp-gateway replay <record_dir>/<session id>/` plays the session back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..client import AcpClient

# The recorder is loaded when a session is first recorded (`record_dir`), not by every gateway's launcher.
if TYPE_CHECKING:
    from .record import Redaction

log = logging.getLogger(__name__)

DIRECTIONS = {"out": "client_to_agent", "in": "agent_to_client"}


class ProcessRecording:
    """One agent process's frames, both ways, to `path` (created `0600`; it holds the owner's conversation)."""

    def __init__(self, path: Path, redaction: Redaction) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self.file: IO[bytes] = os.fdopen(fd, "wb")
        from .record import Recorder

        self.recorder = Recorder(self.file, redaction)
        self.path = path
        self._closer: asyncio.Future[Any] | None = None

    def observe(self, direction: str, msg: dict[str, Any]) -> None:
        if self.file.closed:
            return
        try:
            self.recorder.write_message(DIRECTIONS.get(direction, direction), msg)
        except OSError as exc:  # a full disk stops the recording, never the session
            log.warning("recording %s stopped: %s", self.path, exc)
            self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()

    def close_when_exited(self, client: AcpClient) -> None:
        async def wait() -> None:
            try:
                await client.process.wait()
            finally:
                self.close()

        self._closer = asyncio.ensure_future(wait())


def record_process(record_dir: Path, session_id: str, client: AcpClient, secrets: Sequence[str], cwd: str,
                   home: Path | None) -> ProcessRecording | None:
    """Starts recording `client`'s traffic as the next file of the session's directory; None (logged) when the
    directory cannot be written: recording never stops a session from starting."""
    from .record import Redaction

    folder = record_dir / session_id
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        number = 1 + sum(1 for p in folder.glob("*.jsonl"))
        while (folder / f"{number:03d}.jsonl").exists():
            number += 1
        paths = [(cwd, "<cwd>")] + ([(str(home), "<home>")] if home is not None else [])
        real = os.path.realpath(cwd)
        if real != cwd:
            paths.append((real, "<cwd>"))
        recording = ProcessRecording(folder / f"{number:03d}.jsonl", Redaction(secrets, paths))
    except OSError as exc:
        log.warning("session %s: not recorded: %s", session_id, exc, extra={"session_id": session_id})
        return None
    client.conn.observers.append(recording.observe)
    recording.close_when_exited(client)
    return recording
