"""Baseline JSON-RPC server in its own process: `websockets` + orjson, parse, a dict lookup, answer. No auth, no
validation, no state: what any JSON-RPC-over-WebSocket server costs at the least.

It answers `task.session.status` with a fixed result of the same shape as the gateway's. Prints its port.
Usage: python bench/bare_rpc.py
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
from websockets.asyncio.server import ServerConnection, serve

STATUS: dict[str, Any] = {"session_id": "s-0", "task_id": "t-0", "agent": "ref", "cwd": "/tmp", "title": None,
          "state": "WAITING_FOR_INPUT", "task_state": "REVIEW", "error_message": None, "is_agent_running": True,
          "has_resume_token": True, "acp_session_id": "a-0", "created_at": time.time(), "updated_at": time.time(),
          "needs_resume": False, "is_resumable": True, "resume_reason": "agent_running", "pending_permissions": [],
          "pending_elicitations": []}
METHODS: dict[str, Callable[[dict[str, Any]], Any]] = {"task.session.status": lambda params: STATUS}


async def handler(ws: ServerConnection) -> None:
    async for message in ws:
        request = orjson.loads(message)
        result = METHODS[request["method"]](request.get("params") or {})
        await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).decode())


async def main() -> None:
    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        print(next(iter(server.sockets)).getsockname()[1], flush=True)
        await asyncio.Future()


if __name__ == "__main__":
    asyncio.run(main())
