"""The wire suits a stock JSON-RPC client: `jsonrpc-websocket` (jsonrpc-base), which handles one message per frame
and breaks on a server-sent array, subscribes, calls and receives every event of a turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from jsonrpc_websocket import Server

from tests.gateway_harness import ALICE, two_owner_gateway


async def test_a_stock_client_receives_events_one_per_frame(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path)
    await gw.start()
    server = Server(gw.url, headers={"Authorization": f"Bearer {ALICE}"})
    try:
        events: list[dict[str, Any]] = []
        ended = asyncio.Event()

        def on_event(**params: Any) -> None:
            events.append(params)
            if params["type"] == "turn_ended":
                ended.set()

        setattr(server, "task.session.event", on_event)  # the method name has dots
        reader = await server.ws_connect()
        await server.task.session.subscribe()
        view = await server.task.session.start(agent="ref", cwd=str(tmp_path / "work"), wait_ready=True)
        # 200 updates as fast as the agent writes them: sent as arrays, this library's read loop would fail
        answer = await server.task.session.prompt(session_id=view["session_id"], prompt="/stream 200")
        assert answer == {"stop_reason": "end_turn"}
        await asyncio.wait_for(ended.wait(), 15)
        assert not reader.done(), reader  # its read loop is alive: it never met a frame it could not take
        updates = [e for e in events if e["type"] == "session_update" and e["session_id"] == view["session_id"]]
        assert len(updates) >= 200
        ids = [e["id"] for e in events if e["id"] is not None]
        assert ids == sorted(set(ids))
    finally:
        await server.close()
        await gw.stop()
