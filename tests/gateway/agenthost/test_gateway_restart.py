"""Work in flight outlives the gateway (issue 46): with agent hosts (`host_linger`), a turn under way when the gateway
is killed -9 or restarted with SIGTERM ends as the agent ends it, in the same agent process, every update reaching a
resubscribing client once and in order, the history holding the whole answer; a permission the agent asks while no
gateway runs is asked after the restart and the turn goes on with the answer; a host whose gateway does not come back
within its linger leaves nothing running; a killed host puts the session back on the restore rules."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_harness import GatewayClient, GatewayProcess, reference_profile, running, subscribed


def agent_pids(marker: Path) -> set[int]:
    """The reference agents of this test (their command line names its agent state directory)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes()
            if b"agents.reference" in cmdline and str(marker).encode() in cmdline:
                found.add(int(entry.name))
    return found


def host_pids(state_dir: Path) -> set[int]:
    """The agent hosts of the gateway with this state directory."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if b"gateway.agenthost" in (entry / "cmdline").read_bytes():
                found.add(int(entry.name))
    return {pid for pid in found if _serves(pid, state_dir)}


def _serves(pid: int, state_dir: Path) -> bool:
    """Whether host `pid` holds a file under `state_dir` (its spool or its log)."""
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if str(state_dir) in os.readlink(fd):
                    return True
    return False


class World:
    def __init__(self, tmp_path: Path, linger: float) -> None:
        self.tmp_path = tmp_path
        self.agents = tmp_path / "agents"
        self.agents.mkdir()
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.agent_state = tmp_path / "agent-state"
        reference_profile(self.agents, self.agent_state, "ref")
        config = tmp_path / "gateway.toml"
        config.write_text(f"host_linger = {linger}\n")
        self.gateway = GatewayProcess(tmp_path / "state", self.agents, config=config)

    async def session(self, client: GatewayClient) -> str:
        started = await client.call("task.session.start", {"agent": "ref", "cwd": str(self.work),
                                                           "wait_ready": True})
        return str(started["session_id"])


def chunk_texts(events: list[dict[str, Any]], sid: str) -> list[str]:
    return [e["data"]["update"]["content"]["text"] for e in events
            if e["type"] == "session_update" and e["session_id"] == sid
            and e["data"]["update"].get("sessionUpdate") == "agent_message_chunk"
            and e["data"]["update"]["content"]["text"].startswith("chunk ")]


async def all_events(gateway: GatewayProcess, sid: str, until: Any) -> list[dict[str, Any]]:
    client, log = await subscribed(gateway, 0)
    await log.wait(until, timeout=30)
    await client.close()
    return [e for e in log.events if e["session_id"] == sid]


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
async def test_a_turn_under_way_ends_in_the_same_agent_after_a_gateway_restart(hosted: World, how: str) -> None:
    gate = hosted.tmp_path / "gate"
    client, log = await subscribed(hosted.gateway)
    sid = await hosted.session(client)
    [pid] = agent_pids(hosted.agent_state)
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"/gate {gate} 40"}))
    await log.wait(lambda e: e["type"] == "session_update" and e["session_id"] == sid
                   and e["data"]["update"].get("content", {}).get("text") == "chunk 19 ")
    if how == "kill9":
        await hosted.gateway.kill9()
    else:
        await hosted.gateway.stop()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    assert agent_pids(hosted.agent_state) == {pid}  # the agent runs on with no gateway
    gate.touch()  # the second half of the turn happens while no gateway is attached, or as it comes back
    await hosted.gateway.start()
    events = await all_events(hosted.gateway, sid, lambda e: e["type"] == "turn_ended" and e["session_id"] == sid)
    [ended] = [e for e in events if e["type"] == "turn_ended"]
    assert ended["data"]["stop_reason"] == "end_turn"
    assert chunk_texts(events, sid) == [f"chunk {i} " for i in range(40)]  # each once, in order, no gap
    assert [e["type"] for e in events].count("turn_started") == 1
    assert agent_pids(hosted.agent_state) == {pid}  # the very same process answered
    again = await hosted.gateway.client()
    history = await again.call("task.session.history", {"session_id": sid})
    answer = [e for e in history["entries"] if e["kind"] == "agent_message"]
    assert answer[-1]["content"] == "".join(f"chunk {i} " for i in range(40))
    status = await again.call("task.session.status", {"session_id": sid})
    assert status["is_agent_running"] is True and status["state"] == "WAITING_FOR_INPUT"
    # and the session goes on with the same agent
    assert (await again.call("task.session.prompt", {"session_id": sid, "prompt": "hello"}))["stop_reason"] \
        == "end_turn"
    assert agent_pids(hosted.agent_state) == {pid}
    await again.close()


async def test_a_permission_asked_while_no_gateway_ran_is_answered_after_the_restart(hosted: World) -> None:
    client, log = await subscribed(hosted.gateway)
    sid = await hosted.session(client)
    [pid] = agent_pids(hosted.agent_state)
    gate = hosted.tmp_path / "gate"
    # the agent's question comes after the gateway is gone: the turn waits at the gate, then asks
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"/gate {gate} 2"}))
    await log.wait(lambda e: e["type"] == "session_update" and e["session_id"] == sid
                   and e["data"]["update"].get("content", {}).get("text") == "chunk 0 ")
    await hosted.gateway.kill9()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    gate.touch()
    await hosted.gateway.start()
    client, log = await subscribed(hosted.gateway, 0)
    await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid)
    # a second turn asks a permission; the gateway is killed while it waits; after the restart it is asked again
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "/permission"}))
    await log.wait(lambda e: e["type"] == "permission_requested" and e["session_id"] == sid)
    await hosted.gateway.kill9()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    await hosted.gateway.start()
    client, log = await subscribed(hosted.gateway)
    # asked again (a new subscriber is offered what waits), as the agent's open request was replayed
    event = await log.wait(lambda e: e["type"] == "permission_requested" and e["session_id"] == sid)
    request_id, options = event["data"]["request_id"], event["data"]["options"]
    allow = next(o["optionId"] for o in options if o["kind"].startswith("allow"))
    await client.call("task.session.permission.respond", {"session_id": sid, "request_id": request_id,
                                                          "option_id": allow})
    ended = await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid)
    assert ended["data"]["stop_reason"] == "end_turn"
    said = await log.wait(lambda e: e["type"] == "session_update" and e["session_id"] == sid
                          and "permission:" in e["data"]["update"].get("content", {}).get("text", ""))
    assert allow in said["data"]["update"]["content"]["text"]
    assert agent_pids(hosted.agent_state) == {pid}
    await client.close()


async def test_a_killed_host_puts_the_session_back_on_the_restore_rules(hosted: World) -> None:
    client, log = await subscribed(hosted.gateway)
    sid = await hosted.session(client)
    [pid] = agent_pids(hosted.agent_state)
    [host] = host_pids(hosted.gateway.state_dir)
    os.kill(host, signal.SIGKILL)
    await log.wait(lambda e: e["type"] == "session_status" and e["session_id"] == sid
                   and e["data"]["is_agent_running"] is False and e["data"]["needs_resume"] is True)
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["is_agent_running"], status["needs_resume"]) == (False, True)
    assert not list((hosted.gateway.state_dir / "hosts").iterdir())  # nothing of the dead host is left: no spool
    for _ in range(200):  # the agent dies with its host (PR_SET_PDEATHSIG)
        if pid not in agent_pids(hosted.agent_state):
            break
        await asyncio.sleep(0.05)
    assert pid not in agent_pids(hosted.agent_state)
    answer = await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello again"})
    assert answer["stop_reason"] == "end_turn"
    assert agent_pids(hosted.agent_state) - {pid}  # a new agent, restored by the rules
    await client.close()


async def test_a_host_killed_while_no_gateway_ran_leaves_nothing_after_the_restart(hosted: World) -> None:
    """The next gateway cannot attach to it: the session goes by the restore rules, and what the dead host left (its
    socket, its spool: the agent's conversation) is removed."""
    client = await hosted.gateway.client()
    sid = await hosted.session(client)
    await client.close()
    [host] = host_pids(hosted.gateway.state_dir)
    assert list((hosted.gateway.state_dir / "hosts").iterdir())
    await hosted.gateway.kill9()
    os.kill(host, signal.SIGKILL)
    await hosted.gateway.start()
    assert any("could not be attached again" in line for line in hosted.gateway.stderr_lines)
    assert not list((hosted.gateway.state_dir / "hosts").iterdir())
    client = await hosted.gateway.client()
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["is_agent_running"], status["needs_resume"]) == (False, True)
    assert (await client.call("task.session.prompt", {"session_id": sid, "prompt": "hi"}))["stop_reason"] == "end_turn"
    await client.close()


async def test_no_gateway_back_within_the_linger_leaves_nothing_running(tmp_path: Path) -> None:
    world = World(tmp_path, 1)
    async with running(world.gateway):
        client, _ = await subscribed(world.gateway)
        await world.session(client)
        await client.close()
        [pid] = agent_pids(world.agent_state)
        hosts = host_pids(world.gateway.state_dir)
        assert len(hosts) == 1
        await world.gateway.kill9()
        for _ in range(300):
            if not agent_pids(world.agent_state) and not (host_pids(world.gateway.state_dir) & hosts):
                break
            await asyncio.sleep(0.05)
        assert pid not in agent_pids(world.agent_state)
        assert not host_pids(world.gateway.state_dir) & hosts
        assert not list((world.gateway.state_dir / "hosts").glob("*/spool/*.lines"))
        await world.gateway.start()  # the session comes back by the restore rules
        client, _ = await subscribed(world.gateway)
        sid = (await client.call("task.session.list", {}))["sessions"][0]["session_id"]
        status = await client.call("task.session.status", {"session_id": sid})
        assert status["needs_resume"] is True
        await client.close()


async def test_twenty_kills_during_a_flood_lose_and_repeat_no_update(hosted: World) -> None:
    """The agent streams while the gateway is killed -9 twenty times, each after a random number of updates it
    relayed: once the turn ends, a subscriber from the start sees every chunk once, in order, with no gap."""
    rng = random.Random(46)
    gate = hosted.tmp_path / "gate"
    client, log = await subscribed(hosted.gateway)
    sid = await hosted.session(client)
    [pid] = agent_pids(hosted.agent_state)
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"/trickle {gate}"}))
    cursor = 0
    for _ in range(20):
        wanted = rng.randint(1, 40)
        seen = log
        await seen.wait(lambda e, seen=seen, wanted=wanted: len(chunk_texts(seen.events, sid)) >= wanted, timeout=30)
        cursor = max([cursor, *(e["id"] for e in log.events if e.get("id") is not None)])
        await hosted.gateway.kill9()
        await client.close()
        with contextlib.suppress(Exception):
            await prompt
        await hosted.gateway.start()
        client, log = await subscribed(hosted.gateway, cursor)
    gate.touch()
    await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid, timeout=30)
    await client.close()
    events = await all_events(hosted.gateway, sid, lambda e: e["type"] == "turn_ended" and e["session_id"] == sid)
    texts = chunk_texts(events, sid)
    assert texts == [f"chunk {i} " for i in range(len(texts))]
    assert len(texts) >= 20
    ids = [e["id"] for e in events]
    assert ids == sorted(set(ids))
    assert agent_pids(hosted.agent_state) == {pid}
