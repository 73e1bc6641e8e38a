"""Issue 6: agent faults, slow consumers, limits and isolation — each against a real gateway process."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from gateway.clients.client import GatewayClient, RpcCallError
from tests.gateway_harness import EventLog, GatewayProcess, frozen_websocket, reference_profile

ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdefgh"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, Path]:
    p = {"state": tmp_path / "state", "agents": tmp_path / "agents", "work": tmp_path / "work",
         "agent_state": tmp_path / "agent-state"}
    p["agents"].mkdir()
    p["work"].mkdir()
    a, s = p["agents"], p["agent_state"]
    reference_profile(a, s, "ref")
    reference_profile(a, s, "hang-resume", "--fault-once", "session/resume=hang")
    reference_profile(a, s, "hang-init", "--fault", "initialize=hang")
    reference_profile(a, s, "noisy", "--noise", "50", "--stderr-flood", str(10 * 1000 * 1000))
    reference_profile(a, s, "load-exit", "--no-resume", "--fault-once", "session/load=exit_mid_replay")
    config = tmp_path / "gw.toml"
    config.write_text(f'request_timeout = 1.0\ninitialize_timeout = 1.0\nmax_live_sessions_per_owner = 3\n'
                      f'max_connections_per_owner = 6\noutbox_limit = 20\nallow_unconfined_agents = true\n'
                      f'[[auth.tokens]]\ntoken = "{ALICE}"\nowner = "alice"\n'
                      f'[[auth.tokens]]\ntoken = "{BOB}"\nowner = "bob"\n')
    p["config"] = config
    return p


@pytest.fixture
async def gateway(env: dict[str, Path]) -> AsyncIterator[GatewayProcess]:
    gw = GatewayProcess(env["state"], env["agents"], token=None, config=env["config"])
    gw.token = ALICE
    await gw.start()
    yield gw
    await gw.stop()


async def start(c: GatewayClient, cwd: Path, agent: str = "ref") -> dict[str, Any]:
    view: dict[str, Any] = await c.call("task.session.start", {"agent": agent, "cwd": str(cwd), "wait_ready": True})
    return view


async def test_agent_hangs_on_resume_then_stops_cleanly(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    c = await gateway.client()
    view = await start(c, env["work"], "hang-resume")
    await gateway.kill9()
    await gateway.start()
    c = await gateway.client()
    resumed = await c.call("task.session.resume", {"session_id": view["session_id"]})
    assert resumed["is_agent_running"] is False and "transport" in resumed["error_message"]
    status = await c.call("task.session.status", {"session_id": view["session_id"]})
    assert (status["resume_reason"], status["has_resume_token"]) == ("error_recovery", True)
    retried = await c.call("task.session.recover", {"session_id": view["session_id"], "action": "retry"})
    assert retried["is_agent_running"] is True and retried["acp_session_id"] == view["acp_session_id"]
    await c.close()


async def test_agent_never_answers_initialize(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    c = await gateway.client()
    view = await start(c, env["work"], "hang-init")
    # it never had an ACP session: nothing to come back to, so it is FAILED with the cause (not waiting for input)
    assert view["state"] == "FAILED" and view["is_agent_running"] is False
    assert "failed to start" in view["error_message"] and "initialize" in view["error_message"]
    status = await c.call("task.session.status", {"session_id": view["session_id"]})
    assert (status["needs_resume"], status["is_resumable"]) == (False, False)
    assert (await c.call("gateway.info"))["owner"] == "alice"  # still serving
    await c.close()


async def test_garbage_huge_lines_and_stderr_flood(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    c = await gateway.client()
    log = EventLog(c)
    await c.call("task.session.subscribe")
    view = await start(c, env["work"], "noisy")
    size = 10 * 1024 * 1024
    assert await c.call("task.session.prompt", {"session_id": view["session_id"], "prompt": f"/huge {size}"}) == \
        {"stop_reason": "end_turn"}
    event = await log.wait(lambda e: e["type"] == "session_update"
                           and e["data"]["update"]["sessionUpdate"] == "agent_message_chunk")
    assert len(event["data"]["update"]["content"]["text"]) == size
    assert await c.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "still fine"}) == \
        {"stop_reason": "end_turn"}
    await c.close()


async def test_exit_during_load_replay(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    c = await gateway.client()
    view = await start(c, env["work"], "load-exit")
    for text in ("one", "two"):
        await c.call("task.session.prompt", {"session_id": view["session_id"], "prompt": text})
    await gateway.kill9()
    await gateway.start()
    c = await gateway.client()
    resumed = await c.call("task.session.resume", {"session_id": view["session_id"]})
    assert resumed["is_agent_running"] is False and "transport" in resumed["error_message"]
    assert resumed["acp_session_id"] == view["acp_session_id"]
    again = await c.call("task.session.recover", {"session_id": view["session_id"], "action": "retry"})
    assert again["is_agent_running"] is True
    history = await c.call("task.session.history", {"session_id": view["session_id"]})
    assert len(history["entries"]) == 4  # the partial replay recorded nothing twice
    await c.close()


def raw_subscriber(port: int, token: str) -> socket.socket:
    """A client that subscribes and then reads nothing at all (a frozen browser tab)."""
    return frozen_websocket(port, token, [b'{"jsonrpc":"2.0","id":1,"method":"task.session.subscribe","params":{}}'])


async def test_slow_consumer_is_cut_off_others_keep_going(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    c = await gateway.client()
    view = await start(c, env["work"])
    frozen = raw_subscriber(gateway.port, ALICE)
    # Far more than the kernel's socket buffers hold for a reader that reads nothing.
    await c.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/flood 300 20000"})
    cut = [line for line in gateway.stderr_lines if "consumer fell 20 frames" in line]
    deadline = asyncio.get_running_loop().time() + 15
    while not cut and asyncio.get_running_loop().time() < deadline:
        await c.call("gateway.info")  # the gateway keeps serving others meanwhile
        cut = [line for line in gateway.stderr_lines if "consumer fell 20 frames" in line]
    assert cut, "the frozen subscriber was never cut off"
    received = await asyncio.to_thread(_read_until_close_frame, frozen)
    assert CLOSE_4429 in received  # close frame: code 4429 and a reason that says what to do
    assert await c.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "ok"}) == \
        {"stop_reason": "end_turn"}
    await c.close()


CLOSE_4429 = b"\x11\x4dtoo slow: reconnect and resubscribe"


def _read_until_close_frame(sock: socket.socket) -> bytes:
    sock.settimeout(15)
    data = b""
    try:
        while CLOSE_4429 not in data:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    return data


async def test_limits_answer_clear_errors(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    c = await gateway.client()
    for _ in range(3):
        await start(c, env["work"])
    with pytest.raises(RpcCallError) as info:
        await start(c, env["work"])
    assert info.value.code == -32014 and "limit 3" in info.value.message
    bob = await gateway.client(BOB)  # limits are per owner
    assert (await start(bob, env["work"]))["is_agent_running"] is True
    for _ in range(16):
        await c.call("task.session.subscribe")
    with pytest.raises(RpcCallError) as subs:
        await c.call("task.session.subscribe")
    assert subs.value.code == -32014
    extra = [await gateway.client() for _ in range(4)]  # 6 per owner: c and these 4 make 5, one more fits
    last = await gateway.client()
    with pytest.raises(InvalidStatus) as refused:
        await gateway.client()
    assert refused.value.response.status_code == 429
    for client in (*extra, last, c, bob):
        await client.close()


async def test_events_never_cross_owners(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    alice = await gateway.client(ALICE)
    bob = await gateway.client(BOB)
    bob_log = EventLog(bob)
    await bob.call("task.session.subscribe", {"since": 0})
    await bob_log.wait(lambda e: e["type"] == "caught_up")
    bobs_cursor = (await bob.call("task.session.list"))["event_cursor"]
    view = await start(alice, env["work"])
    await alice.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "private"})
    # Event ids count per owner: Alice's activity does not move Bob's cursor (it would tell him she was busy).
    assert (await bob.call("task.session.list"))["event_cursor"] == bobs_cursor
    mine = await start(bob, env["work"])
    await bob_log.wait(lambda e: e["type"] == "session_status" and e["session_id"] == mine["session_id"]
                       and e["data"]["state"] == "WAITING_FOR_INPUT")
    assert {e["session_id"] for e in bob_log.events if e["session_id"]} == {mine["session_id"]}
    assert bob_log.ids() == list(range(bobs_cursor + 1, bobs_cursor + 1 + len(bob_log.ids())))  # no gaps
    with pytest.raises(RpcCallError):
        await bob.call("task.session.subscribe", {"session_id": view["session_id"]})
    await alice.close()
    await bob.close()


async def test_tokens_never_reach_logs(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    async with connect(f"{gateway.url}?token={ALICE}") as ws:
        await ws.send('{"jsonrpc":"2.0","id":1,"method":"gateway.info"}')
        await ws.recv()
    c = await gateway.client()
    await start(c, env["work"])
    await c.close()
    await gateway.stop()
    logs = "".join(gateway.stderr_lines)
    assert ALICE not in logs and BOB not in logs


async def test_a_fifo_in_the_workspace_is_refused_at_once(gateway: GatewayProcess, env: dict[str, Path]) -> None:
    """A read of a FIFO nobody writes used to hold a worker thread forever: the turn never ended and SIGTERM hung."""
    os.mkfifo(env["work"] / "trap")
    c = await gateway.client()
    view = await start(c, env["work"])
    result = await asyncio.wait_for(c.call("task.session.prompt", {"session_id": view["session_id"],
                                                                   "prompt": "/read trap"}), 10)
    assert result == {"stop_reason": "end_turn"}
    history = await c.call("task.session.history", {"session_id": view["session_id"]})
    assert "not a regular file" in history["entries"][-1]["content"]
    await c.close()
    assert await gateway.stop() == 0


async def test_a_slow_consumer_is_cut_by_bytes_whatever_the_frame_count(tmp_path: Path) -> None:
    """Counting frames let a non-reader pin hundreds of MB of large frames; the outbox is bounded in bytes."""
    agents, work = tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    config = tmp_path / "gw.toml"
    config.write_text(f'outbox_limit = 100000\noutbox_limit_bytes = 262144\n'
                      f'[[auth.tokens]]\ntoken = "{ALICE}"\nowner = "alice"\n')
    gw = GatewayProcess(tmp_path / "state", agents, token=None, config=config)
    gw.token = ALICE
    await gw.start()
    try:
        c = await gw.client()
        view = await start(c, work)
        frozen = raw_subscriber(gw.port, ALICE)
        await c.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/flood 300 20000"})
        received = await asyncio.to_thread(_read_until_close_frame, frozen)
        assert CLOSE_4429 in received
        cut = [line for line in gw.stderr_lines if "consumer fell" in line]
        assert cut and int(cut[0].split("(")[1].split(" bytes")[0]) <= 262144, cut  # fewer than 100,000 frames
        await c.close()
    finally:
        await gw.stop()
