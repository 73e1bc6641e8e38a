"""An agent is stopped whole and a cancel ends its turn: children that left its group or session go with it (when it
exits, when it is stopped, after a kill -9 of the gateway), and a turn the agent never ends is ended anyway."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.clients.client import GatewayClient
from tests.gateway_harness import processes_naming, reference_profile
from tests.support.paths import REPO
from tests.support.world import Layout, Spec, World, WorldFactory, start


def escaping_profile(agents: Path, agent_id: str, agent_state: Path, tag: str, sandboxed: bool = False) -> None:
    """The reference agent, started by a shell that first leaves two children holding its stdout: one in the
    agent's process group, one in a session of its own (`setsid`). Both name `tag` on their command line."""
    child = f"sleep 1000; : {tag}"  # a shell that waits for its sleep, its command line naming `tag`
    script = (f"sh -c '{child}' & setsid sh -c '{child}' & "
              f"exec {sys.executable} -m agents.reference --state-dir {agent_state}")
    reads = [sys.prefix, sys.base_prefix, str(REPO), str(agent_state.parent)]
    extra = f'sandbox = "bwrap"\nnetwork = "none"\nsandbox_read = {orjson.dumps(reads).decode()}\n' if sandboxed else ""
    (agents / f"{agent_id}.toml").write_text(
        f'id = "{agent_id}"\ncommand = {orjson.dumps(["sh", "-c", script]).decode()}\n'
        f"native_session_resume = true\n{extra}")


@pytest.fixture
def tag(tmp_path: Path) -> Iterator[str]:
    tag = f"acp-escaper-{os.getpid()}-{tmp_path.name}"
    yield tag
    if children(tag):  # a failed test leaves nothing behind either
        subprocess.run(["pkill", "-9", "-f", tag], check=False)


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


def spec(tag: str) -> Spec:
    """Escaping agents whose children name `tag`, and one that ignores a cancel. A gateway of each test's own: its
    profiles name the test's `tag`, and the sandboxed agent keeps its state in the test's workspace."""
    def profiles(at: Layout) -> None:
        escaping_profile(at.agents, "escaper", at.agent_state, tag)
        # Under bubblewrap its state is kept where it may write: in the workspace.
        escaping_profile(at.agents, "escaper-sandboxed", at.root / "work" / ".agent-state", tag, sandboxed=True)
        reference_profile(at.agents, at.agent_state, "stubborn", "--ignore-cancel")

    return Spec(agents=profiles, config="cancel_grace = 0.5\nstop_grace = 0.5\n")


async def ready(client: GatewayClient, world: World, agent: str) -> str:
    """A session of `agent`, its agent ready."""
    view = await start(client, world.work, agent)
    assert view["state"] == "WAITING_FOR_INPUT", view
    return str(view["session_id"])


def agent_exited(sid: str) -> Any:
    return lambda e: (e["session_id"] == sid and e["type"] == "session_status" and e["data"]["is_agent_running"]
                      is False and "agent process exited" in (e["data"]["error_message"] or ""))


@pytest.mark.parametrize("agent", ["escaper", "escaper-sandboxed"])
async def test_an_agent_that_exits_takes_its_escaped_children_with_it(
        gateway_world: WorldFactory, tag: str, agent: str) -> None:
    own = await gateway_world(spec(tag))
    client, log = await own.subscribed()
    sid = await ready(client, own, agent)
    assert len(children(tag)) == 2  # one in the agent's group, one that left it
    [pid] = agents_of(own.layout.root)
    os.kill(pid, signal.SIGKILL)  # it exits while idle; its children hold its stdout open
    await log.wait(agent_exited(sid))
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["state"], status["is_agent_running"], status["needs_resume"]) == ("WAITING_FOR_INPUT", False, True)
    assert children(tag) == []
    await client.close()


async def test_an_agent_that_crashes_mid_turn_takes_its_escaped_children_with_it(
        gateway_world: WorldFactory, tag: str) -> None:
    own = await gateway_world(spec(tag))
    client, log = await own.subscribed()
    sid = await ready(client, own, "escaper")
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


async def test_stopping_a_session_stops_its_escaped_children(gateway_world: WorldFactory, tag: str) -> None:
    own = await gateway_world(spec(tag))
    client, _ = await own.subscribed()
    sid = await ready(client, own, "escaper")
    assert len(children(tag)) == 2
    view = await client.call("task.session.cancel", {"session_id": sid})
    assert view["state"] == "CANCELLED"
    assert children(tag) == [] and agents_of(own.layout.root) == []
    await client.close()


async def test_kill_9_of_the_gateway_leaves_no_escaped_child_after_restart(
        gateway_world: WorldFactory, tag: str) -> None:
    own = await gateway_world(spec(tag))
    client, _ = await own.subscribed()
    sid = await ready(client, own, "escaper")
    assert len(children(tag)) == 2
    await own.gateway.kill9()
    await client.close()
    assert len(children(tag)) >= 1  # the one in its own session outlives the gateway: nothing kills it but us
    await own.gateway.start()  # recovery reaps what the crashed gateway's agents left
    assert children(tag) == [] and agents_of(own.layout.root) == []
    c2 = await own.client()
    status = await c2.call("task.session.status", {"session_id": sid})
    assert (status["is_agent_running"], status["needs_resume"]) == (False, True)
    await c2.close()


async def test_a_cancel_the_agent_never_answers_ends_the_turn_and_the_next_prompt_resumes(
        gateway_world: WorldFactory, tag: str) -> None:
    own = await gateway_world(spec(tag))
    client, log = await own.subscribed()
    sid = await ready(client, own, "stubborn")
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
    assert agents_of(own.layout.root) == []
    history = await client.call("task.session.history", {"session_id": sid})
    assert any("hanging until cancelled" in str(entry) for entry in history["entries"])  # what the turn did is kept
    # The next prompt resumes the session (the agent is restored) and is answered.
    answer = await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello again"})
    assert answer["stop_reason"] == "end_turn"
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["is_agent_running"], status["error_message"]) == (True, None)
    await client.close()
