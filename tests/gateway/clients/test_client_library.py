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

from gateway.clients.client import GatewayClient, HandshakeRefused, NotConnected, OwnerSessionClient
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
    refusal_message,
    refused_for_good,
    silence_deadline,
)
from tests.blackhole_proxy import BlackholeProxy
from tests.gateway_harness import FakeClock, GatewayProcess, free_port, reference_profile

WRONG_TOKEN = "wrong-token-zzzzzzzzzzzzzzzz"  # a dummy secret: no message may show it


@pytest.mark.parametrize(("rand", "expected"), [(0.0, 60.0), (0.5, 67.5), (0.999, 74.985)])
def test_reconcile_every_60s_plus_up_to_15s(rand: float, expected: float) -> None:
    assert next_reconcile_delay(rand) == pytest.approx(expected)


@pytest.mark.parametrize(("attempt", "rand", "expected"), [
    (0, 0.0, 0.25), (0, 1.0, 0.5), (1, 0.0, 0.5), (3, 1.0, 4.0), (6, 1.0, 30.0), (50, 0.0, 15.0), (-1, 1.0, 0.5)])
def test_backoff_is_exponential_with_jitter_and_capped(attempt: int, rand: float, expected: float) -> None:
    assert backoff_delay(attempt, rand) == pytest.approx(expected)


@pytest.mark.parametrize(("attempt", "rand", "expected"), [(0, 0.0, 0.25), (1, 1.0, 1.0), (2, 1.0, 2.0), (9, 0.0, 1.0)])
def test_a_backoff_capped_lower_stays_under_its_cap(attempt: int, rand: float, expected: float) -> None:
    """`prompt` following its turn: a restarted gateway found within 2 s of listening."""
    assert backoff_delay(attempt, rand, cap=2.0) == pytest.approx(expected)


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


@pytest.mark.parametrize(("status", "final"), [(401, True), (403, True), (429, False), (500, False), (502, False),
                                               (404, False)])
def test_only_a_refused_token_or_origin_is_final(status: int, final: bool) -> None:
    assert refused_for_good(status) is final


@pytest.mark.parametrize(("url", "status", "token_given", "says"), [
    ("ws://127.0.0.1:8765/rpc", 401, True, "refused the token (HTTP 401): it is not one of the gateway's tokens"),
    ("ws://127.0.0.1:8765/rpc", 401, False, "refused the connection (HTTP 401): no token was given"),
    (f"ws://127.0.0.1:8765/rpc?token={WRONG_TOKEN}", 401, False, "refused the token (HTTP 401)"),
    (f"wss://me:{WRONG_TOKEN}@gw.example/x/rpc", 401, True, "the gateway at wss://gw.example/x/rpc refused"),
    ("ws://127.0.0.1:8765/rpc", 403, True, "the page's Origin is not allowed")])
def test_a_refusal_says_what_to_fix_and_never_the_token(url: str, status: int, token_given: bool, says: str) -> None:
    message = refusal_message(url, status, token_given)
    assert says in message and WRONG_TOKEN not in message and "does not retry" in message
    if status == 401:
        assert "ACP_GATEWAY_TOKEN" in message and "`token` file" in message


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
    # After the hole, by the silence rule (its two-interval deadline is the policy's, tested by table in
    # test_a_link_is_silent_two_heartbeats_after_the_last_frame: no wall-clock bound here, which a loaded machine
    # breaks)
    assert degraded_at >= holed_at
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


class CountingProxy(BlackholeProxy):
    """Forwards to the gateway and counts the connections opened through it: each one a handshake."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port)
        self.handshakes = 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        await super()._accept(reader, writer)


@pytest.mark.parametrize("token", [WRONG_TOKEN, None], ids=["wrong token", "no token"])
async def test_a_refused_token_fails_the_client_at_once_and_is_never_retried(
        gateway: GatewayProcess, token: str | None) -> None:
    proxy = CountingProxy(gateway.port)
    await proxy.start()
    clock = FakeClock()
    osc = OwnerSessionClient(proxy.url(), token, clock=clock, rand=lambda: 0.0)
    links: list[Link] = []
    osc.on_link_state.append(links.append)
    osc.start()
    with pytest.raises(HandshakeRefused) as refused:
        await asyncio.wait_for(osc.when_live(), 20)  # without the rule: reconnecting with backoff, forever
    said = str(refused.value)
    assert refused.value.status == 401 and "ACP_GATEWAY_TOKEN" in said and WRONG_TOKEN not in said
    assert ("refused the token" if token else "no token was given") in said
    assert links == [Link.CLOSED] and osc.link is Link.CLOSED and osc.refused is not None
    assert clock.sleeping == 0  # no backoff, no timer left to wake: nothing will ever try again
    await clock.advance(3600.0)
    with pytest.raises(HandshakeRefused):
        await asyncio.wait_for(osc.wait_closed(), 20)  # a watcher waiting for the end hears why too
    with pytest.raises(HandshakeRefused):
        await osc.when_live()  # and so does anyone who asks later
    good = await GatewayClient.connect(proxy.url(), gateway.token)  # the proxy forwards: the count is real
    assert (await good.call("gateway.ping"))["heartbeat"] is None
    await good.close()
    assert proxy.handshakes == 2 and links == [Link.CLOSED]
    await osc.close()
    await proxy.close()


async def test_the_plain_client_names_the_refusal(gateway: GatewayProcess) -> None:
    with pytest.raises(HandshakeRefused) as wrong:
        await GatewayClient.connect(gateway.url, WRONG_TOKEN)
    assert wrong.value.status == 401 and "refused the token" in str(wrong.value)
    assert WRONG_TOKEN not in str(wrong.value) and WRONG_TOKEN not in repr(wrong.value.__cause__)
    with pytest.raises(HandshakeRefused) as foreign:
        await GatewayClient.connect(gateway.url, gateway.token, origin="http://evil.example")
    assert foreign.value.status == 403 and "allowed_origins" in str(foreign.value)


async def test_a_gateway_that_is_down_is_still_retried_until_it_is_up(gateway: GatewayProcess) -> None:
    """Only a refusal is final: connection refused (nothing listening) goes on with backoff, and when_live waits."""
    await gateway.kill9()
    clock = FakeClock()
    osc = OwnerSessionClient(gateway.url, gateway.token, clock=clock, rand=lambda: 0.0, heartbeat=None)
    links: list[Link] = []
    osc.on_link_state.append(links.append)
    osc.start()
    live = asyncio.ensure_future(osc.when_live())
    await until(lambda: links.count(Link.RECONNECTING) >= 2, clock, step=0.5)
    assert not live.done()
    await gateway.start()
    await until(lambda: live.done(), clock, step=0.5)
    assert live.result() is None and osc.link is Link.LIVE and osc.refused is None
    await osc.close()
    with pytest.raises(NotConnected):
        await osc.when_live()


async def test_degraded_property_agrees_with_the_link_state_it_announced(gateway: GatewayProcess) -> None:
    """The moment on_link_state says degraded (a blackholed link), `degraded` is true, and it stays true while the
    client reconnects, until on_link_state says live again."""
    heartbeat = 1.0
    proxy = await BlackholeProxy(gateway.port).start()
    osc = OwnerSessionClient(proxy.url(), gateway.token, heartbeat=heartbeat, rand=lambda: 0.0)
    told: list[tuple[Link, bool]] = []  # each state on_link_state was told, and what `degraded` said then
    announced = asyncio.Event()

    def on_link_state(state: Link) -> None:
        told.append((state, osc.degraded))
        if state is Link.DEGRADED:
            announced.set()

    osc.on_link_state.append(on_link_state)
    osc.start()
    await asyncio.wait_for(osc.when_live(), 20)
    assert osc.degraded is False
    proxy.blackhole()
    await asyncio.wait_for(announced.wait(), 20)
    assert osc.degraded is True
    await until(lambda: told.count((Link.RECONNECTING, True)) >= 1 and osc.link is not Link.DEGRADED)
    assert osc.degraded is True  # reconnecting after a silent link: still degraded (it was false here for 45 s)
    proxy.restore()
    await asyncio.wait_for(osc.when_live(), 30)
    await until(lambda: told[-1][0] is Link.LIVE)
    since = next(i for i, (state, _) in enumerate(told) if state is Link.DEGRADED)
    assert all(degraded for state, degraded in told[since:] if state is not Link.LIVE)
    assert told[-1] == (Link.LIVE, False) and osc.degraded is False
    await osc.close()
    await proxy.close()
