"""Agent faults, slow consumers, limits and owner isolation, each against a real gateway process."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from gateway.clients.client import GatewayClient, RpcCallError
from tests.gateway_harness import EventLog, GatewayProcess, reference_profile

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
                      f'max_connections_per_owner = 6\nallow_unconfined_agents = true\n'
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
