"""The gateway's side of the agent's files on another machine (FS-1, docs/remote-hosts.md): ACP's `fs/read_text_file`
and `fs/write_text_file` asked of the agent's host, which serves them where the files are, by the same rules as the
gateway's own (`acp/fs.py`)."""

from __future__ import annotations

import asyncio
from typing import Any

from acp.errors import INTERNAL_ERROR, RpcError

from .client import HostConnection, HostError


class RemoteFiles:
    """An `acp.client.FileServer` over a host connection."""

    def __init__(self, connection: HostConnection, timeout: float = 30.0) -> None:
        self.connection = connection
        self.timeout = timeout

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str:
        answer = await self._ask("read", path, **{k: v for k, v in (("line", line), ("limit", limit)) if v is not None})
        content = answer.get("content")
        if not isinstance(content, str):
            raise RpcError(INTERNAL_ERROR, f"reading {path}: the agent's host answered no content", {"path": path})
        return content

    async def write_text_file(self, path: str, content: str) -> None:
        await self._ask("write", path, content=content)

    async def _ask(self, op: str, path: str, **more: Any) -> dict[str, Any]:
        verb = "reading" if op == "read" else "writing"
        try:
            answer = await asyncio.wait_for(self.connection.file(op, path, **more), self.timeout)
        except HostError as exc:
            raise RpcError(INTERNAL_ERROR, f"{verb} {path}: the link to the agent's machine dropped ({exc}); ask "
                           "again", {"path": path}) from None
        except TimeoutError:
            raise RpcError(INTERNAL_ERROR, f"{verb} {path}: the agent's machine did not answer within "
                           f"{self.timeout:g} s", {"path": path}) from None
        error = answer.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            raise RpcError(code if isinstance(code, int) else INTERNAL_ERROR, str(error.get("message") or "failed"),
                           error.get("data"))
        return answer
