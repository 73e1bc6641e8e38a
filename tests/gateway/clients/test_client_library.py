"""The owner-session client (docs/architecture.md: The clients): its rules by table, its behaviour against a real
gateway, fake time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.server import ServerConnection, serve

from gateway.clients.client import GatewayClient, OwnerSessionClient
from gateway.clients.policy import (
    LINK_TRANSITIONS,
    AutoResumeGuard,
    IllegalLinkTransition,
    Link,
    LinkEvent,
    MalformedCounter,
    StreamHealth,
    backoff_delay,
    is_valid_event,
    next_link,
    next_reconcile_delay,
    silence_deadline,
)
from tests.blackhole_proxy import BlackholeProxy
from tests.gateway_harness import FakeClock, GatewayProcess, free_port, reference_profile


@pytest.mark.parametrize(("rand", "expected"), [(0.0, 60.0), (0.5, 67.5), (0.999, 74.985)])
def test_reconcile_every_60s_plus_up_to_15s(rand: float, expected: float) -> None:
    assert next_reconcile_delay(rand) == pytest.approx(expected)


@pytest.mark.parametrize(("attempt", "rand", "expected"), [
    (0, 0.0, 0.25), (0, 1.0, 0.5), (1, 0.0, 0.5), (3, 1.0, 4.0), (6, 1.0, 30.0), (50, 0.0, 15.0), (-1, 1.0, 0.5)])
def test_backoff_is_exponential_with_jitter_and_capped(attempt: int, rand: float, expected: float) -> None:
    assert backoff_delay(attempt, rand) == pytest.approx(expected)


@pytest.mark.parametrize(("state", "event", "expected"), [
    (Link.CONNECTING, LinkEvent.CONNECTED, Link.LIVE), (Link.LIVE, LinkEvent.SILENT, Link.DEGRADED),
    (Link.DEGRADED, LinkEvent.LOST, Link.RECONNECTING), (Link.DEGRADED, LinkEvent.HEARD, Link.LIVE),
    (Link.RECONNECTING, LinkEvent.RETRY, Link.CONNECTING), (Link.LIVE, LinkEvent.CLOSE, Link.CLOSED),
    (Link.RECONNECTING, LinkEvent.SILENT, None), (Link.CONNECTING, LinkEvent.SILENT, None),
    (Link.CLOSED, LinkEvent.RETRY, None)])
def test_link_moves_by_its_table_and_refuses_the_rest(state: Link, event: LinkEvent, expected: Link | None) -> None:
    if expected is None:
        assert (state, event) not in LINK_TRANSITIONS
        with pytest.raises(IllegalLinkTransition):
            next_link(state, event)
    else:
        assert next_link(state, event) is expected


def test_a_link_is_silent_two_heartbeats_after_the_last_frame() -> None:
    assert silence_deadline(100.0, 5.0) == 110.0


def test_health_degrades_after_nine_samples_without_a_stream() -> None:
    health = StreamHealth()
    assert [health.sample(False) for _ in range(9)] == [False] * 8 + [True]
    assert health.sample(True) is False and health.misses == 0


def test_five_malformed_events_trigger_reconciliation() -> None:
    counter = MalformedCounter()
    assert [counter.note() for _ in range(10)] == [False] * 4 + [True] + [False] * 4 + [True]


def test_auto_resume_at_most_once_per_view() -> None:
    guard = AutoResumeGuard()
    stale = {"needs_resume": True, "is_resumable": True}
    assert guard.should_resume("a", stale) is False  # not viewed
    guard.open_view("a")
    assert guard.should_resume("a", {"needs_resume": True, "is_resumable": False}) is False
    assert guard.should_resume("a", stale) is True
    assert guard.should_resume("a", stale) is False
    guard.open_view("a")  # the same view again: still once
    assert guard.should_resume("a", stale) is False
    guard.open_view("b")
    guard.open_view("a")  # a new view of a
    assert guard.should_resume("a", stale) is True


@pytest.mark.parametrize(("params", "ok"), [
    ({"id": 1, "type": "x", "data": {}}, True), ({"id": None, "type": "caught_up", "data": {}}, True),
    ({"id": "1", "type": "x", "data": {}}, False), ({"id": True, "type": "x", "data": {}}, False),
    ({"id": 1, "type": 5, "data": {}}, False), ({"id": 1, "type": "x", "data": []}, False), (None, False)])
def test_event_shape(params: Any, ok: bool) -> None:
    assert is_valid_event(params) is ok


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    gw = GatewayProcess(tmp_path / "state", agents, "--default-agent", "ref", port=free_port())
    await gw.start()
    yield gw
    await gw.stop()


async def until(predicate: Callable[[], bool], clock: FakeClock | None = None, step: float = 0.0,
                timeout: float = 20.0) -> None:
    """Wait for a client-side condition, letting fake time pass by `step` while waiting."""
    async def loop() -> None:
        while not predicate():
            if clock is not None and step:
                await clock.advance(step)
            await asyncio.sleep(0.01)

    await asyncio.wait_for(loop(), timeout)


async def test_stream_reconnects_and_replays_without_loss(gateway: GatewayProcess, tmp_path: Path) -> None:
    clock = FakeClock()
    osc = OwnerSessionClient(gateway.url, gateway.token, clock=clock, rand=lambda: 0.5,
                             heartbeat=None)  # fake time jumps: no pong could arrive in between
    seen: list[int] = []
    osc.on_event.append(lambda e: seen.append(e["id"]) if e["id"] is not None else None)
    osc.start()
    await asyncio.wait_for(osc.connected.wait(), 20)
    assert osc.reconciliations == 1 and osc.cursor is not None
    view = await osc.call("task.session.start", {"cwd": str(tmp_path / "work"), "wait_ready": True})
    await until(lambda: view["session_id"] in osc.sessions)
    assert osc.conn is not None
    await osc.conn.ws.close()  # the network drops
    await until(lambda: not osc.connected.is_set())
    other = await gateway.client()
    await other.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "while away"})
    await other.close()
    await until(lambda: osc.connected.is_set(), clock, step=0.5)
    assert osc.reconciliations == 2  # at once on reconnect
    await osc.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "back"})
    await until(lambda: osc.sessions[view["session_id"]]["state"] == "WAITING_FOR_INPUT" and len(seen) >= 10)
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    assert seen == list(range(seen[0], seen[-1] + 1))
    await osc.close()


async def test_degraded_after_nine_samples_then_recovers(gateway: GatewayProcess) -> None:
    clock = FakeClock()
    osc = OwnerSessionClient(gateway.url, gateway.token, clock=clock, rand=lambda: 0.0,
                             heartbeat=None)  # fake time jumps: no pong could arrive in between
    osc.start()
    await asyncio.wait_for(osc.connected.wait(), 20)
    await clock.advance(5.0)
    assert osc.degraded is False
    await gateway.kill9()
    await until(lambda: not osc.connected.is_set())
    for _ in range(8):
        await clock.advance(5.0)
    assert osc.degraded is False
    await clock.advance(5.0)
    assert osc.degraded is True
    await gateway.start()
    await until(lambda: osc.connected.is_set(), clock, step=1.0)
    await clock.advance(5.0)
    assert osc.degraded is False
    await osc.close()


async def test_reconciliation_every_60_to_75_seconds(gateway: GatewayProcess) -> None:
    clock = FakeClock()
    osc = OwnerSessionClient(gateway.url, gateway.token, clock=clock, rand=lambda: 1.0,
                             heartbeat=None)  # fake time jumps: no pong could arrive in between
    osc.start()
    await asyncio.wait_for(osc.connected.wait(), 20)
    await clock.advance(74.0)
    assert osc.reconciliations == 1
    await clock.advance(1.0)
    await until(lambda: osc.reconciliations == 2)
    await osc.close()


async def test_cancel_treats_already_terminal_as_success(gateway: GatewayProcess, tmp_path: Path) -> None:
    osc = OwnerSessionClient(gateway.url, gateway.token)
    osc.start()
    await asyncio.wait_for(osc.connected.wait(), 20)
    view = await osc.call("task.session.start", {"cwd": str(tmp_path / "work"), "wait_ready": True})
    first = await osc.cancel(view["session_id"])
    second = await osc.cancel(view["session_id"])
    assert first["state"] == second["state"] == "CANCELLED"
    await osc.close()


async def test_auto_resume_once_per_view(gateway: GatewayProcess, tmp_path: Path) -> None:
    clock = FakeClock()
    osc = OwnerSessionClient(gateway.url, gateway.token, clock=clock, rand=lambda: 0.0,
                             heartbeat=None)  # fake time jumps: no pong could arrive in between
    osc.start()
    await asyncio.wait_for(osc.connected.wait(), 20)
    view = await osc.call("task.session.start", {"cwd": str(tmp_path / "work"), "wait_ready": True})
    await gateway.kill9()
    await gateway.start()
    await until(lambda: osc.connected.is_set() and osc.reconciliations >= 2, clock, step=1.0)
    status = await osc.open_view(view["session_id"])
    assert status["resume_reason"] == "agent_running" and status["is_agent_running"] is True
    assert osc.auto_resume.attempted == {view["session_id"]}
    await osc.close()


@pytest.mark.fake_gateway
async def test_malformed_events_force_a_reconciliation() -> None:
    """A gateway cannot be made to send malformed events, so a minimal real peer does."""
    lists = 0

    async def peer(ws: ServerConnection) -> None:
        nonlocal lists
        async for frame in ws:
            msg = orjson.loads(frame)
            if msg["method"] == "task.session.list":
                lists += 1
                await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "sessions": [], "next_cursor": None, "event_cursor": 0}}).decode())
            elif msg["method"] == "task.session.subscribe":
                await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "subscription_id": "s", "cursor": 0}}).decode())
                for i in range(5):
                    await ws.send(orjson.dumps({"jsonrpc": "2.0", "method": "task.session.event",
                                                "params": {"id": "bad", "type": i}}).decode())

    async with serve(peer, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        osc = OwnerSessionClient(f"ws://127.0.0.1:{port}/rpc", None, clock=FakeClock(), heartbeat=None)
        osc.start()
        await until(lambda: lists == 2)
        assert osc.reconciliations == 2 and osc.events_seen == 0
        await osc.close()


async def test_plain_client_survives_garbage_frames() -> None:
    async def peer(ws: ServerConnection) -> None:
        async for frame in ws:
            msg = orjson.loads(frame)
            await ws.send("garbage")
            await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": 42}).decode())

    async with serve(peer, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        client = await GatewayClient.connect(f"ws://127.0.0.1:{port}/rpc")
        assert await client.call("x") == 42 and client.malformed == 1
        await client.close()


async def test_blackholed_link_is_degraded_within_two_heartbeats_and_loses_nothing(
        gateway: GatewayProcess, tmp_path: Path) -> None:
    """A link that stops delivering (no close, no RST): degraded within 2 heartbeats, then reconnecting; when the
    link is back, every event of the turn that went on meanwhile arrives once."""
    heartbeat = 1.0
    proxy = await BlackholeProxy(gateway.port).start()
    osc = OwnerSessionClient(proxy.url(), gateway.token, heartbeat=heartbeat, rand=lambda: 0.0)
    links: list[tuple[Link, float]] = []
    osc.on_link_state.append(lambda state: links.append((state, time.monotonic())))
    events: list[dict[str, Any]] = []
    osc.on_event.append(events.append)
    osc.start()
    await asyncio.wait_for(osc.connected.wait(), 20)
    work = tmp_path / "work"
    view = await osc.call("task.session.start", {"cwd": str(work), "wait_ready": True})
    sid, go = view["session_id"], work / "go"
    prompter = await gateway.client()  # the turn goes on while this client's link is dead
    turn = asyncio.ensure_future(prompter.call("task.session.prompt", {
        "session_id": sid, "prompt": f"/sh echo before; while [ ! -f {go} ]; do sleep 0.05; done; echo after"}))
    await until(lambda: any("before" in orjson.dumps(e["data"]).decode() for e in events))
    holed_at = time.monotonic()
    proxy.blackhole()
    go.touch()
    assert (await turn)["stop_reason"] == "end_turn"
    await until(lambda: any(state is Link.DEGRADED for state, _ in links))
    degraded_at = next(at for state, at in links if state is Link.DEGRADED)
    assert degraded_at - holed_at <= 2 * heartbeat + 0.25  # two intervals after the last frame heard, before the hole
    await until(lambda: Link.RECONNECTING in [state for state, at in links if at >= degraded_at])
    proxy.restore()
    await until(lambda: any(e["type"] == "turn_ended" and e["session_id"] == sid for e in events))
    ids = [e["id"] for e in events if e["id"] is not None]
    assert ids == sorted(set(ids)) and ids == list(range(ids[0], ids[-1] + 1))
    text = "".join(e["data"]["update"]["content"]["text"] for e in events if e["type"] == "session_update"
                   and e["data"]["update"]["sessionUpdate"] == "agent_message_chunk")
    assert "before" in text and "after" in text
    await prompter.close()
    await osc.close()
    await proxy.close()


async def test_gateway_closes_a_connection_that_stops_its_promised_heartbeats(gateway: GatewayProcess) -> None:
    """The server side: a client that promised a ping every 0.2 s and then sends nothing is closed with 4408 (its
    subscription ended), while one that promised nothing is kept."""
    silent, quiet = await gateway.client(), await gateway.client()
    pong = await silent.call("gateway.ping", {"heartbeat": 0.2})
    assert pong["heartbeat"] == 0.2 and isinstance(pong["cursor"], int)
    assert (await quiet.call("gateway.ping"))["heartbeat"] is None
    await silent.call("task.session.subscribe", {})
    await asyncio.wait_for(silent.ws.wait_closed(), 10)
    assert silent.ws.close_code == 4408 and "no heartbeat" in (silent.ws.close_reason or "")
    assert (await quiet.call("gateway.ping"))["heartbeat"] is None  # still served
    await quiet.close()
