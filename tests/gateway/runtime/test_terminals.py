"""Agents' terminals (`terminal/*`): the pure parts by table (output kept at a character boundary, the refusals),
then a real gateway and the reference agent: output streamed to frontends and kept, bounded under a flood, refused
where it may not run, killed with the session, none left after a kill -9, a clear error for an id from before."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import pytest

from acp.budget import ByteRate
from acp.errors import RpcError
from acp.models import CreateTerminalRequest
from acp.terminals import OutputBuffer, incomplete_tail
from gateway.clients.client import GatewayClient
from gateway.runtime.settings import Settings
from gateway.runtime.terminals import PUBLISHED_BYTES, refusal
from tests.conftest import wait_until
from tests.gateway_harness import EventLog, processes_naming, reference_profile
from tests.support.world import Layout, Spec, World, WorldFactory, start


def test_output_is_cut_from_the_beginning_at_a_character_boundary() -> None:
    buffer = OutputBuffer(limit=5)
    buffer.append(b"ab")
    assert (buffer.text(), buffer.truncated) == ("ab", False)
    buffer.append("cdé".encode())  # 6 bytes: "a" goes
    assert (buffer.text(), buffer.truncated) == ("bcdé", True)
    buffer.append("€".encode())  # 3 bytes: over by 4, so "bcd" go and "é€" (2 + 3 bytes) stay
    assert buffer.text() == "é€"
    buffer.append(b"x")  # over by 1: the cut lands inside "é", so "é" goes whole
    assert buffer.text() == "€x"
    assert buffer.total == len("abcdé€x".encode())


@pytest.mark.parametrize(("data", "expected"), [
    (b"", 0), (b"abc", 0), ("é".encode(), 0), ("é".encode()[:1], 1), ("€".encode()[:2], 2),
    ("😀".encode()[:3], 3), ("😀".encode(), 0), (b"a" + "€".encode()[:1], 1),
])
def test_a_character_still_arriving_is_not_shown(data: bytes, expected: int) -> None:
    assert incomplete_tail(data) == expected
    buffer = OutputBuffer(100)
    buffer.append(data)
    assert "\ufffd" not in buffer.text()


SETTINGS = Settings(state_dir=Path("/nonexistent"), max_terminals_per_session=2, max_terminals_per_owner=3,
                    max_terminal_output_bytes=1000)


def allowed_under_work(directory: str) -> str | None:
    return None if directory.startswith("/work/") else "it is outside your workspace roots"


REFUSALS: list[tuple[dict[str, Any], int, int, str | None]] = [
    # request fields, live in session, live of owner -> the field or limit refused (None: allowed)
    ({}, 0, 0, None),
    ({"cwd": "/work/a/sub"}, 0, 0, None),
    ({"cwd": "/work/a"}, 0, 0, None),  # the session's own directory
    ({"cwd": "/etc"}, 0, 0, "cwd"),
    ({"cwd": "relative/dir"}, 0, 0, "cwd"),
    ({"cwd": "/work/a/../../etc"}, 0, 0, "cwd"),
    ({"outputByteLimit": -1}, 0, 0, "outputByteLimit"),
    ({"outputByteLimit": 1001}, 0, 0, "outputByteLimit"),
    ({"outputByteLimit": 10**30}, 0, 0, "outputByteLimit"),
    ({"outputByteLimit": 0}, 0, 0, None),
    ({}, 2, 2, "max_terminals_per_session"),
    ({}, 1, 3, "max_terminals_per_owner"),
]


@pytest.mark.parametrize(("fields", "in_session", "of_owner", "refused"), REFUSALS)
def test_refusal(fields: dict[str, Any], in_session: int, of_owner: int, refused: str | None) -> None:
    request = CreateTerminalRequest.model_validate({"sessionId": "x", "command": "ls", **fields})
    error = refusal(request, session_cwd="/work/a", settings=SETTINGS, live_in_session=in_session,
                    live_of_owner=of_owner,
                    directory_refusal=lambda d: allowed_under_work(os.path.normpath(d)))
    got = None if error is None else (error.data or {}).get("field") or (error.data or {}).get("name")
    assert got == refused
    if error is not None:
        assert isinstance(error, RpcError) and error.code in (-32602, -32014) and "terminal/create" in error.message


# -- a real gateway ------------------------------------------------------------------------------------------------
def profiles(at: Layout) -> None:
    reference_profile(at.agents, at.agent_state, "ref")
    # An agent that calls terminal methods though not offered them (a fault): the gateway refuses them.
    reference_profile(at.agents, at.agent_state, "no-terminals", "--ignore-client-capabilities",
                      extra="terminals = false\n")


# The module's gateway (`world`: an owner of its own on it); the test that kills it has a gateway of its own.
GATEWAY = Spec(agents=profiles, config="max_terminals_per_session = 1\n")


async def said(client: GatewayClient, log: EventLog, sid: str, prompt: str) -> tuple[str, list[dict[str, Any]]]:
    """The agent's words in the turn of `prompt`, and the turn's events."""
    mark = len(log.events)
    await client.call("task.session.prompt", {"session_id": sid, "prompt": prompt})
    await log.wait(lambda e: e["type"] == "turn_ended" and e in log.events[mark:])
    events = log.events[mark:]
    text = "".join(e["data"]["update"]["content"]["text"] for e in events if e["type"] == "session_update"
                   and e["data"]["update"].get("sessionUpdate") == "agent_message_chunk")
    return text, events


async def test_a_command_runs_in_a_terminal_its_output_streamed_and_kept(world: World) -> None:
    client, log = await world.subscribed()
    sid = (await start(client, world.work))["session_id"]
    text, events = await said(client, log, sid, "/term printf 'hello \\033[31mred\\033[0m\\n'; pwd")
    started = next(e["data"] for e in events if e["type"] == "terminal_started")
    assert started["command"].startswith("sh -c") and started["cwd"] == str(world.work)
    output = "".join(e["data"]["text"] for e in events if e["type"] == "terminal_output")
    assert output == f"hello \033[31mred\033[0m\n{world.work}\n"
    exited = next(e["data"] for e in events if e["type"] == "terminal_exited")
    assert (exited["terminal_id"], exited["exit_code"], exited["signal"], exited["complete"]) == (
        started["terminal_id"], 0, None, True)
    # The tool call embeds the terminal, so a frontend ties the output to it.
    embeds = [e for e in events if e["type"] == "session_update" and e["data"]["update"].get("content")
              == [{"type": "terminal", "terminalId": started["terminal_id"]}]]
    assert embeds
    assert 'terminal exit {"exitCode":0,"signal":null}' in text and "truncated False" in text
    history = (await client.call("task.session.history", {"session_id": sid, "limit": 1000}))["entries"]
    [kept] = [h for h in history if h["kind"] == "terminal"]
    assert "hello" in kept["content"] and kept["content"].endswith("[exit code 0]") and kept["name"].startswith("sh")
    await client.close()


async def test_a_flooding_command_is_bounded(world: World) -> None:
    client, log = await world.subscribed()
    sid = (await start(client, world.work))["session_id"]
    text, events = await said(client, log, sid, "/term --limit 1000 head -c 3000000 /dev/zero | tr '\\0' x")
    assert "kept 1000 bytes, truncated True" in text  # what the agent gets: the limit it asked for
    streamed = sum(len(e["data"]["text"]) for e in events if e["type"] == "terminal_output")
    assert streamed == PUBLISHED_BYTES  # what frontends get: the first MiB, not 3 MB of events
    exited = next(e["data"] for e in events if e["type"] == "terminal_exited")
    assert (exited["output_bytes"], exited["truncated"], exited["complete"]) == (3_000_000, True, False)
    await client.close()


async def test_terminals_refused_where_they_may_not_run(world: World) -> None:
    (world.work / "sub").mkdir()
    client, log = await world.subscribed()
    sid = (await start(client, world.work))["session_id"]
    for prompt, says in [
        ("/term --cwd /etc ls", "error -32602: terminal/create: cwd /etc is refused"),
        ("/term --cwd work/sub ls", "error -32602: terminal/create: cwd must be an absolute path"),
        (f"/term --cwd {world.work}/../.. ls", "error -32602: terminal/create: cwd"),
        ("/term --limit -1 ls", "error -32602: terminal/create: outputByteLimit must be between 0 and"),
        ("/term --limit 99999999999999 ls", "error -32602: terminal/create: outputByteLimit"),
    ]:
        text, events = await said(client, log, sid, prompt)
        assert says in text, (prompt, text)
        assert not any(e["type"].startswith("terminal_") for e in events)  # nothing started
    text, _ = await said(client, log, sid, f"/term --cwd {world.work}/sub pwd")  # another allowed directory
    assert "exitCode\":0" in text
    # The cap: one live terminal per session here; a kept one counts until released.
    text, _ = await said(client, log, sid, "/term --keep true")
    kept = re.search(r"terminal (term-[0-9a-f]+) kept", text)
    assert kept
    text, events = await said(client, log, sid, "/term true")
    assert "error -32014: terminal/create: this session has 1 terminals already" in text
    assert not any(e["type"] == "terminal_started" for e in events)
    await client.close()


async def test_a_profile_may_offer_no_terminals(world: World) -> None:
    client, log = await world.subscribed()
    sid = (await start(client, world.work, "no-terminals"))["session_id"]
    text, _ = await said(client, log, sid, "/term true")
    assert "terminal/create error -32601: terminal/create: this client did not offer terminals" in text
    await client.close()


async def test_terminals_end_with_the_session_and_a_kill_9_leaves_none(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    tag = f"acp-terminal-{os.getpid()}-{own.dir.name}"
    client, log = await own.subscribed()
    sid = (await start(client, own.work))["session_id"]
    # Cancelling the session kills its running terminal.
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                     "prompt": f"/term sleep 1000; : {tag}-a"}))
    await log.wait(lambda e: e["type"] == "terminal_started")
    # started: its command is running once the wrappers before it (nice, prlimit, setpriv) have exec'd it
    await wait_until(lambda: processes_naming(f"{tag}-a") != [], what="the terminal's command running")
    await client.call("task.session.cancel", {"session_id": sid})
    await asyncio.wait([turn], timeout=15)
    await wait_until(lambda: processes_naming(f"{tag}-a") == [], what="the cancelled terminal's command gone")
    # A kill -9 of the gateway mid-command: after the restart nothing of it is left, and the agent asking for that
    # terminal's output is told it is gone.
    sid = (await start(client, own.work))["session_id"]
    cut = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                    "prompt": f"/term sleep 1000; : {tag}-b"}))
    started = await log.wait(lambda e: e["type"] == "terminal_started" and e["session_id"] == sid)
    # started: its command is running once the wrappers before it (nice, prlimit, setpriv) have exec'd it
    await wait_until(lambda: processes_naming(f"{tag}-b") != [], what="the terminal's command running")
    await own.gateway.kill9()
    await client.close()
    with pytest.raises(ConnectionError):
        await cut
    await own.gateway.start()
    # killed by then (the parent-death signal, or the start's reaper); a loaded machine may still be tearing it down
    await wait_until(lambda: processes_naming(f"{tag}-b") == [], what="the terminal's command gone after the kill")
    client, log = await own.subscribed()
    text, _ = await said(client, log, sid, f"/termout {started['data']['terminal_id']}")
    assert f"terminal/output error -32002: terminal {started['data']['terminal_id']} is not known" in text
    assert "the gateway restarted since it was created" in text
    await client.close()


@pytest.mark.unit
@pytest.mark.parametrize(("rate", "reads", "delays"), [
    # (time, bytes read) -> seconds to wait after it
    (1000, [(0.0, 500), (0.0, 500)], [0.0, 0.0]),  # a second's worth at once: the burst
    (1000, [(0.0, 1000), (0.0, 500)], [0.0, 0.5]),  # past it: wait until it is earned
    (1000, [(0.0, 1000), (1.0, 1000)], [0.0, 0.0]),  # a second later, a second's worth again
    (1000, [(0.0, 3000)], [2.0]),  # one large read: its time
    (1000, [(0.0, 1000), (10.0, 2000)], [0.0, 1.0]),  # the burst does not grow past a second's worth
])
def test_a_sessions_terminal_output_is_read_at_its_pace(rate: float, reads: list[tuple[float, int]],
                                                       delays: list[float]) -> None:
    pace = ByteRate(rate)
    assert [pace.delay(now, nbytes) for now, nbytes in reads] == pytest.approx(delays)
