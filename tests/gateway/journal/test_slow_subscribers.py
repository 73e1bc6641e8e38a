"""Subscribers slower than their events, against a real gateway: fed from the journal at their own pace (same ids,
order, no gap), their calls answered ahead of their backlog, memory bounded in bytes; only a reader that takes
nothing for `slow_reader_timeout` is closed (4429)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.conftest import wait_until
from tests.gateway_harness import ALICE, metrics_text, two_owner_gateway

OPERATOR = "the-operators-metrics-token-0123"
LIMIT_BYTES = 256 << 10
FLOOD = 50_000
# What may be queued for a connection beyond its limit: the group that found it full, or one page from the journal.
QUEUED_SLACK = 1 << 20


async def scrape(port: int) -> dict[str, float]:
    _, body = await metrics_text(port, OPERATOR)
    return {s.name: s.value for family in text_string_to_metric_families(body) for s in family.samples
            if not s.labels}


async def test_a_reader_slower_than_a_flood_gets_every_event_in_order_and_its_answer_first(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=f'metrics_token = "{OPERATOR}"\noutbox_limit_bytes = {LIMIT_BYTES}\n')
    await gw.start()
    try:
        starter = await gw.client(ALICE)
        sid = (await starter.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                         "wait_ready": True}))["session_id"]
        # A plain `websockets` client, one event per message (the default framing), as a frontend author writes it.
        async with connect(f"{gw.url}?token={ALICE}", max_size=None) as ws:
            await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "task.session.subscribe",
                                        "params": {"session_id": sid}}))
            cursor = orjson.loads(await ws.recv())["result"]["cursor"]
            while orjson.loads(await ws.recv())["params"]["type"] != "caught_up":
                pass
            await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "task.session.prompt",
                                        "params": {"session_id": sid, "prompt": f"/flood {FLOOD} 100"}}))
            ids: list[int] = []
            chunks = 0
            answer: dict[str, Any] | None = None
            chunks_before_answer = -1
            read = 0
            ended = False
            while not ended:
                message = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
                read += 1
                # One message every 5 ms while the flood runs and for a while after (2,000 messages): far slower
                # than the gateway relays it. Then the rest as fast as it comes.
                if answer is None or read < 2000:
                    await asyncio.sleep(0.005)
                if "id" in message and message.get("method") is None:
                    assert message["id"] == 2, message
                    answer, chunks_before_answer = message["result"], chunks
                    continue
                event = message["params"]
                ids.append(event["id"])
                if event["type"] == "session_update" and event["data"]["update"]["sessionUpdate"] == \
                        "agent_message_chunk":
                    chunks += 1
                ended = event["type"] == "turn_ended"
        assert answer == {"stop_reason": "end_turn"}
        assert chunks == FLOOD
        assert ids == list(range(cursor + 1, cursor + 1 + len(ids)))  # every event once, in order, no gap
        assert chunks_before_answer < FLOOD // 2  # the answer was not held behind the backlog
        metrics = await scrape(gw.port)
        assert metrics["acp_gateway_subscribers_behind_total"] >= 1  # it was fed from the journal, not dropped
        assert metrics["acp_gateway_outbox_peak_bytes"] <= LIMIT_BYTES + QUEUED_SLACK
        assert not [line for line in gw.stderr_lines if "closing a connection" in line]
        await starter.close()
    finally:
        await gw.stop()


async def test_a_reader_that_stops_reading_is_closed_after_the_timeout_and_others_go_on(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=f'metrics_token = "{OPERATOR}"\noutbox_limit_bytes = {LIMIT_BYTES}\n'
                                            'slow_reader_timeout = 2\n')
    await gw.start()
    try:
        client = await gw.client(ALICE)
        sid = (await client.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                        "wait_ready": True}))["session_id"]
        async with connect(f"{gw.url}?token={ALICE}", max_size=None, max_queue=1) as frozen:
            await frozen.send(b'{"jsonrpc":"2.0","id":1,"method":"task.session.subscribe","params":{}}')
            await frozen.recv()
            # Far more than the kernel's socket buffers hold; the frozen tab reads nothing from here on.
            assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "/flood 20000 1000"}) == \
                {"stop_reason": "end_turn"}
            await wait_until(lambda: any("read nothing for 2s" in line for line in gw.stderr_lines), 60,
                             "the frozen reader to be closed")
            with contextlib.suppress(ConnectionClosed):
                while True:  # what it had buffered, then the close
                    await asyncio.wait_for(frozen.recv(), 30)
            assert (frozen.close_code, frozen.close_reason) == (
                4429, "stopped reading for 2s: reconnect and resubscribe")
        assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "ok"}) == \
            {"stop_reason": "end_turn"}
        metrics = await scrape(gw.port)
        assert metrics["acp_gateway_outbox_peak_bytes"] <= LIMIT_BYTES + QUEUED_SLACK
        await client.close()
    finally:
        await gw.stop()


async def test_a_slow_acp_client_gets_every_update_before_its_prompt_answer(tmp_path: Path) -> None:
    """On /acp the journal feeds a slow client too, and ACP's order holds: a prompt's answer after its updates."""
    gw = two_owner_gateway(tmp_path, config=f'default_agent = "ref"\nmetrics_token = "{OPERATOR}"\n'
                           f'outbox_limit_bytes = {LIMIT_BYTES}\n')
    await gw.start()
    try:
        async with connect(f"ws://127.0.0.1:{gw.port}/acp", max_size=None,
                           additional_headers={"Authorization": f"Bearer {ALICE}"}) as ws:
            async def call(msg_id: int, method: str, params: dict[str, Any]) -> Any:
                await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                                            "params": params}).decode())
                while (message := orjson.loads(await asyncio.wait_for(ws.recv(), 60))).get("id") != msg_id:
                    pass
                return message["result"]

            await call(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            sid = (await call(2, "session/new", {"cwd": str(tmp_path / "work"), "mcpServers": []}))["sessionId"]
            await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {
                "sessionId": sid, "prompt": [{"type": "text", "text": "/flood 20000 1000"}]}}).decode())
            # This reader takes nothing until the gateway says it fell behind (20 MB: far more than the kernel's
            # socket buffers hold), so it is fed from the journal however fast the agent runs under load.
            deadline = asyncio.get_running_loop().time() + 60
            while (await scrape(gw.port)).get("acp_gateway_subscribers_behind_total", 0) < 1:
                assert asyncio.get_running_loop().time() < deadline, "the reader never fell behind"
                await asyncio.sleep(0.05)
            chunks = 0
            while True:
                message = orjson.loads(await asyncio.wait_for(ws.recv(), 60))
                if message.get("id") == 3:
                    assert message["result"] == {"stopReason": "end_turn"}
                    break
                if message.get("method") == "session/update" and \
                        message["params"]["update"]["sessionUpdate"] == "agent_message_chunk":
                    chunks += 1
        assert chunks == 20_000  # every update, all of them before the answer
        metrics = await scrape(gw.port)
        assert metrics["acp_gateway_outbox_peak_bytes"] <= LIMIT_BYTES + QUEUED_SLACK
    finally:
        await gw.stop()
