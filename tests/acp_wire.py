"""A raw ACP client over WebSocket for the `/acp` tests: every frame it gets is kept in arrival order, so a test can
say what came before what. (The official SDKs' clients are tested separately:
tests/gateway/api/test_acp_sdk_clients.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import orjson
import websockets
from websockets.asyncio.client import ClientConnection


class AcpWireError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = str(error.get("message"))
        self.data = error.get("data")


class AcpWire:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []  # every message received, in order
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._changed = asyncio.Event()
        self._reader = asyncio.ensure_future(self._read())
        self.on_request: Callable[[dict[str, Any]], Any] | None = None  # answers the gateway's requests

    @classmethod
    async def connect(cls, port: int, token: str, initialize: bool = True,
                      capabilities: dict[str, Any] | None = None, **kwargs: Any) -> AcpWire:
        ws = await websockets.connect(f"ws://127.0.0.1:{port}/acp",
                                      additional_headers={"Authorization": f"Bearer {token}"}, **kwargs)
        wire = cls(ws)
        if initialize:
            await wire.call("initialize", {"protocolVersion": 1, "clientCapabilities": capabilities or {},
                                           "clientInfo": {"name": "acp-wire-test", "version": "0"}})
        return wire

    @property
    def connection_id(self) -> str | None:
        assert self.ws.response is not None
        return self.ws.response.headers.get("Acp-Connection-Id")

    async def _read(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for raw in self.ws:
                message = orjson.loads(raw)
                self.frames.append(message)
                self._changed.set()
                msg_id = message.get("id") if isinstance(message, dict) else None
                if isinstance(message, dict) and "method" not in message and msg_id in self._pending:
                    fut = self._pending.pop(msg_id)
                    if not fut.done():
                        fut.set_result(message)
                elif isinstance(message, dict) and "method" in message and "id" in message and self.on_request:
                    answer = self.on_request(message)
                    if answer is not None:
                        await self.send({"jsonrpc": "2.0", "id": message["id"], "result": answer})

    async def send(self, message: Any) -> None:
        await self.ws.send(orjson.dumps(message).decode())

    async def raw(self, frame: str | bytes) -> None:
        await self.ws.send(frame)

    async def request(self, method: str, params: Any = None, timeout: float = 30) -> dict[str, Any]:
        """The whole response message (result or error)."""
        msg_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = fut
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await asyncio.wait_for(fut, timeout)

    async def call(self, method: str, params: Any = None, timeout: float = 30) -> Any:
        response = await self.request(method, params, timeout)
        if "error" in response:
            raise AcpWireError(response["error"])
        return response["result"]

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30,
                       start: int = 0) -> dict[str, Any]:
        """The first frame from index `start` on that matches, waiting for it."""
        async def look() -> dict[str, Any]:
            index = start
            while True:
                while index < len(self.frames):
                    if predicate(self.frames[index]):
                        return self.frames[index]
                    index += 1
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(look(), timeout)

    async def settle(self, done: Callable[[], bool], timeout: float = 30) -> None:
        """Wait until `done()` holds, re-checking as frames arrive."""
        async def look() -> None:
            while not done():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(look(), timeout)

    def updates(self, session_id: str | None = None, start: int = 0) -> list[dict[str, Any]]:
        return [f["params"]["update"] for f in self.frames[start:] if f.get("method") == "session/update"
                and (session_id is None or f["params"]["sessionId"] == session_id)]

    def texts(self, session_id: str | None = None, start: int = 0) -> list[tuple[str, str]]:
        """(kind, text) of the message chunks received."""
        return [(u["sessionUpdate"], u["content"].get("text", "")) for u in self.updates(session_id, start)
                if u.get("sessionUpdate") in ("user_message_chunk", "agent_message_chunk")]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader


def is_update(kind: str, text: str | None = None) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        if frame.get("method") != "session/update":
            return False
        update = frame["params"]["update"]
        return update.get("sessionUpdate") == kind and (text is None or text in str(update.get("content", {})))
    return match


def is_response(msg_id: int) -> Callable[[dict[str, Any]], bool]:
    return lambda frame: frame.get("id") == msg_id and "method" not in frame
