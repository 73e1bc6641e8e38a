"""An agent is stopped whole and a cancel ends its turn: children that left its group or session go with it (when it
exits, when it is stopped, after a kill -9 of the gateway), and a turn the agent never ends is ended anyway."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.clients.client import GatewayClient
from tests.gateway_harness import GatewayProcess, processes_naming, reference_profile, running, subscribed


def escaping_profile(agents: Path, agent_id: str, agent_state: Path, tag: str, sandboxed: bool = False) -> None:
    """The reference agent, started by a shell that first leaves two children holding its stdout: one in the
    agent's process group, one in a session of its own (`setsid`). Both name `tag` on their command line."""
    child = f"sleep 1000; : {tag}"  # a shell that waits for its sleep, its command line naming `tag`
    script = (f"sh -c '{child}' & setsid sh -c '{child}' & "
              f"exec {sys.executable} -m agents.reference --state-dir {agent_state}")
    reads = [sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parent.parent), str(agent_state.parent)]
    extra = f'sandbox = "bwrap"\nnetwork = "none"\nsandbox_read = {orjson.dumps(reads).decode()}\n' if sandboxed else ""
    (agents / f"{agent_id}.toml").write_text(
        f'id = "{agent_id}"\ncommand = {orjson.dumps(["sh", "-c", script]).decode()}\n'
        f"native_session_resume = true\n{extra}")


@pytest.fixture
def tag(tmp_path: Path) -> str:
    return f"acp-escaper-{os.getpid()}-{tmp_path.name}"


def children(tag: str) -> list[str]:
    return [c for c in processes_naming(tag) if c.startswith("sh -c sleep")]


def agents_of(tmp_path: Path) -> list[int]:
    """The pids of the reference agents this test started (their state directory is in `tmp_path`)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agents.reference" in cmdline and str(tmp_path).encode() in b" ".join(cmdline):
            pids.append(int(pid))
    return pids


@pytest.fixture
async def gateway(tmp_path: Path, tag: str) -> AsyncIterator[GatewayProcess]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    escaping_profile(agents, "escaper", tmp_path / "agent-state", tag)
    # Under bubblewrap its state is kept where it may write: in the workspace.
    escaping_profile(agents, "escaper-sandboxed", tmp_path / "work" / ".agent-state", tag, sandboxed=True)
    reference_profile(agents, tmp_path / "agent-state", "stubborn", "--ignore-cancel")
    config = tmp_path / "gw.toml"
    config.write_text("cancel_grace = 0.5\nstop_grace = 0.5\n")
    gw = GatewayProcess(tmp_path / "state", agents, config=config)
    async with running(gw):
        yield gw
    if children(tag):  # a failed test leaves nothing behind either
        await (await asyncio.create_subprocess_exec("pkill", "-9", "-f", tag)).wait()


async def start(client: GatewayClient, tmp_path: Path, agent: str) -> str:
    view = await client.call("task.session.start", {"agent": agent, "cwd": str(tmp_path / "work"),
                                                    "wait_ready": True})
    assert view["state"] == "WAITING_FOR_INPUT", view
    return str(view["session_id"])


def agent_exited(sid: str) -> Any:
    return lambda e: (e["session_id"] == sid and e["type"] == "session_status" and e["data"]["is_agent_running"]
                      is False and "agent process exited" in (e["data"]["error_message"] or ""))


@pytest.mark.parametrize("agent", ["escaper", "escaper-sandboxed"])
async def test_an_agent_that_exits_takes_its_escaped_children_with_it(gateway: GatewayProcess, tmp_path: Path,
                                                                      tag: str, agent: str) -> None:
    client, log = await subscribed(gateway)
    sid = await start(client, tmp_path, agent)
    assert len(children(tag)) == 2  # one in the agent's group, one that left it
    [agent] = agents_of(tmp_path)
    os.kill(agent, signal.SIGKILL)  # it exits while idle; its children hold its stdout open
    await log.wait(agent_exited(sid))
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["state"], status["is_agent_running"], status["needs_resume"]) == ("WAITING_FOR_INPUT", False, True)
    assert children(tag) == []
    await client.close()


async def test_an_agent_that_crashes_mid_turn_takes_its_escaped_children_with_it(
        gateway: GatewayProcess, tmp_path: Path, tag: str) -> None:
    client, log = await subscribed(gateway)
    sid = await start(client, tmp_path, "escaper")
    assert len(children(tag)) == 2
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "/crash"}))
    ended = await log.wait(lambda e: e["type"] == "turn_ended")
    assert "exited during the turn" in ended["data"]["message"]
    with pytest.raises(Exception, match="exited during the turn"):
        await turn
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["is_agent_running"], status["needs_resume"]) == (False, True)
    assert children(tag) == []
    await client.close()


async def test_stopping_a_session_stops_its_escaped_children(gateway: GatewayProcess, tmp_path: Path,
                                                              tag: str) -> None:
    client, _ = await subscribed(gateway)
    sid = await start(client, tmp_path, "escaper")
    assert len(children(tag)) == 2
    view = await client.call("task.session.cancel", {"session_id": sid})
    assert view["state"] == "CANCELLED"
    assert children(tag) == [] and agents_of(tmp_path) == []
    await client.close()


async def test_kill_9_of_the_gateway_leaves_no_escaped_child_after_restart(gateway: GatewayProcess,
                                                                          tmp_path: Path, tag: str) -> None:
    client, _ = await subscribed(gateway)
    sid = await start(client, tmp_path, "escaper")
    assert len(children(tag)) == 2
    await gateway.kill9()
    await client.close()
    assert len(children(tag)) >= 1  # the one in its own session outlives the gateway: nothing kills it but us
    await gateway.start()  # recovery reaps what the crashed gateway's agents left
    assert children(tag) == [] and agents_of(tmp_path) == []
    c2 = await gateway.client()
    status = await c2.call("task.session.status", {"session_id": sid})
    assert (status["is_agent_running"], status["needs_resume"]) == (False, True)
    await c2.close()


async def test_a_cancel_the_agent_never_answers_ends_the_turn_and_the_next_prompt_resumes(
        gateway: GatewayProcess, tmp_path: Path) -> None:
    client, log = await subscribed(gateway)
    sid = await start(client, tmp_path, "stubborn")
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "/hang"}))
    await log.wait(lambda e: e["type"] == "turn_started")
    await log.wait(lambda e: e["type"] == "session_update" and "hanging" in str(e["data"]["update"]))
    view = await client.call("task.session.cancel_turn", {"session_id": sid})
    # When cancel_turn answers, the turn has ended: the agent was stopped after cancel_grace.
    assert (view["state"], view["is_agent_running"]) == ("WAITING_FOR_INPUT", False), view
    assert (await asyncio.wait_for(turn, 10))["stop_reason"] == "cancelled"
    ended = await log.wait(lambda e: e["type"] == "turn_ended")
    assert ended["data"]["stop_reason"] == "cancelled"
    assert "did not end the turn within 0.5s of the cancel" in ended["data"]["message"]
    assert agents_of(tmp_path) == []
    history = await client.call("task.session.history", {"session_id": sid})
    assert any("hanging until cancelled" in str(entry) for entry in history["entries"])  # what the turn did is kept
    # The next prompt resumes the session (the agent is restored) and is answered.
    answer = await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello again"})
    assert answer["stop_reason"] == "end_turn"
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["is_agent_running"], status["error_message"]) == (True, None)
    await client.close()
