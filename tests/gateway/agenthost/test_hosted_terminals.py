"""Terminals an agent opened belong to its host too (issue 46): with agent hosts (`host_linger`), a terminal's command
is the host's child, so a gateway killed -9 or stopped (SIGTERM, detach) leaves it running; after the restart it is
the same process, the agent's `terminal/wait_for_exit` sent before the crash is answered with its real exit status,
its `terminal/output` holds what it wrote before, while no gateway ran and after, and the session's
`terminal_output` events hold each byte once. A host whose gateway does not come back within its linger leaves
nothing of the terminal running. A hosted agent's terminal under bubblewrap runs in its sandbox (its arguments handed
on by the host) and outlives a kill -9 too. And a hosted terminal answers as an unhosted one does: output streamed
and kept, bounded under a flood, a command that cannot start refused, killed with its session."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from gateway.clients.client import GatewayClient
from gateway.runtime.sandbox import owner_uid
from tests.gateway.agenthost.test_gateway_restart import World, agent_pids, host_pids
from tests.gateway.sandbox.test_sandbox import session, sref
from tests.gateway_harness import EventLog, running, subscribed
from tests.support.world import Spec, WorldFactory


def parent_of(pid: int) -> int | None:
    """`pid`'s parent, or None when it is gone (a zombie counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])


async def gone(pids: set[int], timeout: float = 15.0) -> bool:
    """Whether every one of `pids` is gone within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while any(parent_of(pid) is not None for pid in pids):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def appears(path: Path, timeout: float = 15.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not path.exists():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def terminal_text(events: list[dict[str, Any]], sid: str) -> str:
    return "".join(e["data"]["text"] for e in events if e["type"] == "terminal_output" and e["session_id"] == sid)


def agent_text(events: list[dict[str, Any]], sid: str) -> str:
    return "".join(e["data"]["update"]["content"]["text"] for e in events
                   if e["type"] == "session_update" and e["session_id"] == sid
                   and e["data"]["update"].get("sessionUpdate") == "agent_message_chunk")


async def said(client: GatewayClient, log: EventLog, sid: str, prompt: str) -> tuple[str, list[dict[str, Any]]]:
    """The agent's words in the turn of `prompt`, and the turn's events."""
    mark = len(log.events)
    await client.call("task.session.prompt", {"session_id": sid, "prompt": prompt})
    await log.wait(lambda e: e["type"] == "turn_ended" and e in log.events[mark:])
    events = log.events[mark:]
    return agent_text(events, sid), events


@pytest.mark.parametrize(("how", "ends_while_down"), [("kill9", False), ("sigterm", False), ("kill9", True)])
async def test_a_terminal_runs_on_in_its_host_across_a_gateway_restart(hosted: World, how: str,
                                                                       ends_while_down: bool) -> None:
    """`ends_while_down`: the command ends while no gateway runs; else after the restart, the same process."""
    middle, seen, end = (hosted.tmp_path / name for name in ("middle", "middle-seen", "end"))
    client, log = await subscribed(hosted.gateway)
    sid = await hosted.session(client)
    [host] = host_pids(hosted.gateway.state_dir)
    [agent] = agent_pids(hosted.agent_state)
    # It writes before the gateway goes, while none runs (then says so in a file), and after it came back.
    command = (f"echo before $$; while [ ! -e {middle} ]; do sleep 0.05; done; echo during; touch {seen}; "
               f"while [ ! -e {end} ]; do sleep 0.05; done; echo after; exit 7")
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"/term {command}"}))
    await log.wait(lambda e: "\n" in terminal_text(log.events, sid))
    found = re.fullmatch(r"before (\d+)\n", terminal_text(log.events, sid))
    assert found, terminal_text(log.events, sid)
    pid = int(found.group(1))
    assert parent_of(pid) == host  # the command is the host's child, not the gateway's

    if how == "kill9":
        await hosted.gateway.kill9()
    else:
        await hosted.gateway.stop()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    assert parent_of(pid) == host  # it runs on with no gateway
    middle.touch()
    assert await appears(seen)  # it wrote while no gateway ran
    if ends_while_down:
        end.touch()
        assert await gone({pid})  # it exited; the host keeps its output and exit (its parent reaped it)
        assert host_pids(hosted.gateway.state_dir) == {host}
    await hosted.gateway.start()
    if not ends_while_down:
        assert parent_of(pid) == host  # the same process, after the restart
        end.touch()
    client, log = await subscribed(hosted.gateway, 0)
    await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid, timeout=30)
    events = [e for e in log.events if e["session_id"] == sid]
    written = f"before {pid}\nduring\nafter\n"
    # The agent's wait_for_exit, sent before the restart, got the real exit status; its terminal/output everything.
    words = agent_text(events, sid)
    assert 'terminal exit {"exitCode":7,"signal":null}' in words, words
    assert f"kept {len(written)} bytes, truncated False; ends with {written!r}" in words
    # Each byte of it reached the session's events once, in order: before the restart and after.
    assert terminal_text(events, sid) == written
    [started] = [e["data"] for e in events if e["type"] == "terminal_started"]
    [exited] = [e["data"] for e in events if e["type"] == "terminal_exited"]
    assert (exited["terminal_id"], exited["exit_code"], exited["complete"]) == (started["terminal_id"], 7, True)
    assert [e["data"]["stop_reason"] for e in events if e["type"] == "turn_ended"] == ["end_turn"]
    assert await gone({pid})  # released by the agent
    assert agent_pids(hosted.agent_state) == {agent}
    history = (await client.call("task.session.history", {"session_id": sid, "limit": 1000}))["entries"]
    [kept] = [h for h in history if h["kind"] == "terminal"]
    assert kept["content"] == f"{written}\n[exit code 7]"
    await client.close()


async def test_no_gateway_back_within_the_linger_leaves_no_terminal_running(tmp_path: Path) -> None:
    world = World(tmp_path, 1)
    async with running(world.gateway):
        client, log = await subscribed(world.gateway)
        sid = await world.session(client)
        hosts = host_pids(world.gateway.state_dir)
        said_text, _ = await said(client, log, sid, "/term --detach echo up $$; while true; do sleep 0.05; done")
        assert "detached" in said_text
        await log.wait(lambda e: "\n" in terminal_text(log.events, sid))
        pid = int(terminal_text(log.events, sid).split()[1])
        assert parent_of(pid) in hosts
        await world.gateway.kill9()
        await client.close()
        assert parent_of(pid) in hosts  # the host keeps it while it lingers
        assert await gone({pid, *hosts})  # then stops the agent's tree, its terminals with it
        assert not agent_pids(world.agent_state)


async def test_a_hosted_terminal_answers_as_an_unhosted_one(hosted: World) -> None:
    client, log = await subscribed(hosted.gateway)
    sid = await hosted.session(client)
    text, events = await said(client, log, sid, "/term printf 'hello \\303\\251\\n'; pwd")
    assert 'terminal exit {"exitCode":0,"signal":null}' in text and "truncated False" in text
    assert terminal_text(events, sid) == f"hello é\n{hosted.work}\n"
    exited = next(e["data"] for e in events if e["type"] == "terminal_exited")
    assert (exited["exit_code"], exited["signal"], exited["complete"]) == (0, None, True)
    # a flood: the agent keeps the limit it asked for, the events the first MiB
    text, events = await said(client, log, sid, "/term --limit 1000 head -c 3000000 /dev/zero | tr '\\0' x")
    assert "kept 1000 bytes, truncated True" in text
    assert len(terminal_text(events, sid)) == 1 << 20
    exited = next(e["data"] for e in events if e["type"] == "terminal_exited")
    assert (exited["output_bytes"], exited["truncated"], exited["complete"]) == (3_000_000, True, False)
    # killed by the agent: its exit says the signal
    text, _ = await said(client, log, sid, "/term --kill sleep 1000")
    assert 'terminal exit {"exitCode":null,"signal":"SIGKILL"}' in text
    # a command that cannot start is refused as the gateway refuses it
    text, events = await said(client, log, sid, "/term --cwd /nonexistent-dir-for-the-test true")
    assert "terminal/create error -32602" in text
    assert not any(e["type"] == "terminal_started" for e in events)
    # cancelling the session's turn kills its running terminal, in the host
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                     "prompt": "/term echo up $$; sleep 1000"}))
    await log.wait(lambda e: e["type"] == "terminal_output" and e["data"]["text"].startswith("up "))
    pid = int([e for e in log.events if e["type"] == "terminal_output"][-1]["data"]["text"].split()[1])
    await client.call("task.session.cancel", {"session_id": sid})
    await asyncio.wait([turn], timeout=15)
    assert await gone({pid})
    await client.close()


async def test_a_hosted_terminal_under_bwrap_runs_confined_and_outlives_a_gateway_kill(
        gateway_world: WorldFactory) -> None:
    own = await gateway_world(Spec(agents=sref, config='sandbox = "bwrap"\nhost_linger = 60\n'))
    try:
        client, log = await own.subscribed()
        sid = await session(client, own.work)
        gate = own.work / "term-gate"  # in the workspace: the command polls it from inside the sandbox
        command = f"id -u; while [ ! -e {gate} ]; do sleep 0.05; done; echo done"
        prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                             "prompt": f"/term {command}"}))
        await log.wait(lambda e: "\n" in terminal_text(log.events, sid))
        assert terminal_text(log.events, sid) == f"{owner_uid(own.owner)}\n"  # as the owner, in the sandbox
        await own.gateway.kill9()
        await client.close()
        with contextlib.suppress(Exception):
            await prompt
        gate.touch()
        await own.gateway.start()
        client, log = await own.subscribed(0)
        await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid, timeout=30)
        assert 'terminal exit {"exitCode":0,"signal":null}' in agent_text(log.events, sid)
        assert terminal_text(log.events, sid) == f"{owner_uid(own.owner)}\ndone\n"
    finally:
        await own.gateway.stop()
        for pid in host_pids(own.gateway.state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def test_a_descriptor_a_terminal_is_handed_reaches_it_at_its_number() -> None:
    """TM-1: what a gateway's descriptor held (a sandbox's `--args N`) is at N in the command, whether the host uses
    N itself or not; the host's own N stays its own, and nothing the host made for it stays open. TM-2: an id taken
    is refused."""
    from gateway.agenthost.host_terminals import HostTerminals
    from gateway.agenthost.protocol import TermStart

    async def took() -> None:
        pass

    frames: list[dict[str, Any]] = []
    terminals = HostTerminals(frames.append, took)
    used = os.open(os.devnull, os.O_RDONLY)  # a number the host holds
    free = max(used, *(int(fd) for fd in os.listdir("/proc/self/fd"))) + 20
    before = set(os.listdir("/proc/self/fd"))
    try:
        for number in (used, free):
            program = f"import os; print(os.read({number}, 100).decode())"
            answer = await terminals.start(TermStart(f"t-{number}", ["python3", "-c", program], "/",
                                                     {"PATH": os.defpath}, 1000, "python3", None,
                                                     ((number, f"held {number}".encode()),)))
            assert answer["t"] == "term_started"
            held = terminals.held[f"t-{number}"].terminal
            assert await held.wait() == {"exitCode": 0, "signal": None}
            assert held.output.data() == f"held {number}\n".encode()
        assert os.readlink(f"/proc/self/fd/{used}") == os.devnull
        assert set(os.listdir("/proc/self/fd")) == before
        refused = await terminals.start(TermStart(f"t-{used}", ["true"], "/", {}, 10, "true"))
        assert (refused["t"], refused["rule"]) == ("term_failed", "TM-2")
        await asyncio.wait([h.watcher for h in terminals.held.values() if h.watcher is not None], timeout=15)
        assert [f["status"] for f in frames if f["t"] == "term_exit"] == [{"exitCode": 0, "signal": None}] * 2
    finally:
        os.close(used)
        for terminal_id in list(terminals.held):
            await terminals.release(terminal_id)


async def test_a_create_handled_again_after_a_crash_runs_its_command_once(tmp_path: Path) -> None:
    """The gateway dies (failpoint `terminal-started`) after the host started the agent's terminal and before the
    agent had its id: the next gateway handles the replayed `terminal/create` by naming the terminal the host kept
    (its id follows from the agent's line), not by running the command again."""
    hosted = World(tmp_path, 60)
    runs = tmp_path / "runs"
    gateway = hosted.gateway
    gateway.env = {"ACP_GATEWAY_FAILPOINT": "terminal-started"}
    await gateway.start()
    try:
        client, log = await subscribed(gateway)
        sid = await hosted.session(client)
        [agent] = agent_pids(hosted.agent_state)
        prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                             "prompt": f"/term echo ran >> {runs}"}))
        assert gateway.proc is not None
        await asyncio.wait_for(gateway.proc.wait(), 30)  # it killed itself with the terminal started, unanswered
        with contextlib.suppress(Exception):
            await prompt
        await client.close()
        gateway.env = {}
        await gateway.start()
        client, log = await subscribed(gateway, 0)
        ended = await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid, timeout=30)
        assert ended["data"]["stop_reason"] == "end_turn"
        assert runs.read_text() == "ran\n"  # once
        assert agent_pids(hosted.agent_state) == {agent}
        events = [e for e in log.events if e["session_id"] == sid]
        assert len([e for e in events if e["type"] == "terminal_started"]) == 1
        assert 'terminal exit {"exitCode":0,"signal":null}' in agent_text(events, sid)
        await client.close()
    finally:
        await gateway.stop()
        for host in host_pids(gateway.state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(host, signal.SIGKILL)
