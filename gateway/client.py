"""A Python client of the gateway's JSON-RPC-over-WebSocket API (`task.session.*`).

`GatewayClient` is one connection: calls with ids, answers matched to futures, notifications
(`task.session.event`) queued in arrival order. The resilient owner-session client of DESIGN §6
(reconciliation, health, reconnects) is built on top of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed


class RpcCallError(Exception):
    """The gateway answered a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data


class GatewayClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.notifications: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.malformed = 0
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url: str, token: str | None = None, **kwargs: Any) -> GatewayClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        ws = await connect(url, additional_headers=headers, max_size=None, **kwargs)
        return cls(ws)

    async def _read(self) -> None:
        try:
            async for frame in self.ws:
                try:
                    message = orjson.loads(frame)
                except orjson.JSONDecodeError:
                    self.malformed += 1
                    continue
                for item in message if isinstance(message, list) else [message]:
                    self._dispatch(item)
        except ConnectionClosed:
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection to the gateway closed"))
            self._pending.clear()

    def _dispatch(self, item: Any) -> None:
        if not isinstance(item, dict):
            self.malformed += 1
            return
        if "method" in item and "id" not in item:
            self.notifications.put_nowait(item)
            return
        item_id = item.get("id")
        fut = self._pending.pop(item_id, None) if isinstance(item_id, int) else None
        if fut is None or fut.done():
            return
        if "error" in item:
            err = item["error"] if isinstance(item["error"], dict) else {}
            fut.set_exception(RpcCallError(err.get("code", -32603), err.get("message", ""), err.get("data")))
        else:
            fut.set_result(item.get("result"))

    async def call(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        frame = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}}
        try:
            await self.ws.send(orjson.dumps(frame).decode())
        except ConnectionClosed as exc:
            self._pending.pop(req_id, None)
            raise ConnectionError("connection to the gateway closed") from exc
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)

    async def send_raw(self, frame: str | bytes) -> None:
        await self.ws.send(frame)

    async def next_notification(self, timeout: float = 10.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.notifications.get(), timeout)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()
