"""The session runtime against a real gateway process, real WebSocket clients and real agent processes: turns
outlive the clients that started them, a crash leaves no agent behind and no turn without an outcome."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from gateway.store import journal_frames
from tests.conftest import process_alive, wait_until
from tests.gateway_harness import TOKEN, EventLog, GatewayProcess, journal_events, reference_profile


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    p = {"state": tmp_path / "state", "agents": tmp_path / "agents", "agent_state": tmp_path / "agent-state",
         "work": tmp_path / "work", "grandchild": tmp_path / "grandchild.pid"}
    p["agents"].mkdir()
    p["work"].mkdir()
    reference_profile(p["agents"], p["agent_state"], "ref")
    # An agent that ignores stdin EOF and leaves a grandchild in its process group (as npx wrappers do).
    reference_profile(p["agents"], p["agent_state"], "lingering", "--linger", "--grandchild-pidfile",
                      str(p["grandchild"]))
    return p


def gateway_of(paths: dict[str, Path], config: str = "cancel_grace = 2.0\n") -> GatewayProcess:
    conf = paths["state"].parent / "gw.toml"
    conf.write_text(config)
    return GatewayProcess(paths["state"], paths["agents"], config=conf)


@pytest.fixture
async def gateway(paths: dict[str, Path]) -> AsyncIterator[GatewayProcess]:
    gw = gateway_of(paths)
    await gw.start()
    yield gw
    await gw.stop()


async def subscribed(gw: GatewayProcess) -> tuple[GatewayClient, EventLog]:
    client = await gw.client()
    log = EventLog(client)
    sub = await client.call("task.session.subscribe", {})
    await log.wait(lambda e: e["type"] == "caught_up" and e["data"]["subscription_id"] == sub["subscription_id"])
    return client, log


async def start(client: GatewayClient, cwd: Path, agent: str = "ref") -> str:
    view = await client.call("task.session.start", {"agent": agent, "cwd": str(cwd), "wait_ready": True})
    return str(view["session_id"])


def of(session_id: str, type_: str) -> Any:
    return lambda e: e["session_id"] == session_id and e["type"] == type_


def reference_agents(agent_state: Path) -> list[int]:
    """Pids of the reference agents serving this test (their command line names its agent state directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"agents.reference" in argv and str(agent_state).encode() in argv and process_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


async def test_closing_the_prompting_connection_does_not_end_the_turn(gateway: GatewayProcess,
                                                                      paths: dict[str, Path]) -> None:
    watcher, log = await subscribed(gateway)
    prompter = await gateway.client()
    sid = await start(prompter, paths["work"])
    turn = asyncio.ensure_future(prompter.call("task.session.prompt", {"session_id": sid, "prompt": "/sleep 0.5"}))
    await log.wait(of(sid, "turn_started"))
    await prompter.close()  # the tab is closed mid-turn
    with pytest.raises(Exception):  # noqa: B017 - whatever the client library says of a closed socket
        await turn
    ended = await log.wait(of(sid, "turn_ended"))
    assert ended["data"]["stop_reason"] == "end_turn"
    await log.wait(lambda e: of(sid, "session_status")(e) and e["data"]["state"] == "WAITING_FOR_INPUT")
    assert await watcher.call("task.session.prompt", {"session_id": sid, "prompt": "again"}) == \
        {"stop_reason": "end_turn"}
    await watcher.close()


async def test_a_permission_answered_by_another_connection_after_the_asker_left(gateway: GatewayProcess,
                                                                               paths: dict[str, Path]) -> None:
    other, log = await subscribed(gateway)
    asker = await gateway.client()
    sid = await start(asker, paths["work"])
    turn = asyncio.ensure_future(asker.call("task.session.prompt", {"session_id": sid, "prompt": "/permission"}))
    request = await log.wait(of(sid, "permission_requested"))
    await asker.close()
    with pytest.raises(Exception):  # noqa: B017
        await turn
    await other.call("task.session.permission.respond", {"session_id": sid, "request_id": request["data"]["request_id"],
                                                         "option_id": "allow-once"})
    ended = await log.wait(of(sid, "turn_ended"))
    assert ended["data"]["stop_reason"] == "end_turn"
    status = await other.call("task.session.status", {"session_id": sid})
    assert status["state"] == "WAITING_FOR_INPUT" and status["pending_permissions"] == []
    await other.close()


async def test_two_connections_prompt_at_once_one_runs_one_is_busy(gateway: GatewayProcess,
                                                                   paths: dict[str, Path]) -> None:
    one, two = await gateway.client(), await gateway.client()
    sid = await start(one, paths["work"])
    results = await asyncio.gather(
        one.call("task.session.prompt", {"session_id": sid, "prompt": "/sleep 0.3"}),
        two.call("task.session.prompt", {"session_id": sid, "prompt": "/sleep 0.3"}), return_exceptions=True)
    ran = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, RpcCallError)]
    assert ran == [{"stop_reason": "end_turn"}] and len(refused) == 1
    assert refused[0].code == -32010 and refused[0].data == {"session_id": sid, "state": "RUNNING"}
    await one.close()
    await two.close()


async def test_cancel_turn_from_another_connection(gateway: GatewayProcess, paths: dict[str, Path]) -> None:
    other, log = await subscribed(gateway)
    prompter = await gateway.client()
    sid = await start(prompter, paths["work"])
    turn = asyncio.ensure_future(prompter.call("task.session.prompt", {"session_id": sid, "prompt": "/hang"}))
    await log.wait(of(sid, "turn_started"))
    view = await other.call("task.session.cancel_turn", {"session_id": sid})
    assert await asyncio.wait_for(turn, 10) == {"stop_reason": "cancelled"}
    assert view["state"] == "WAITING_FOR_INPUT"
    await prompter.close()
    await other.close()


@pytest.mark.parametrize("die_with_gateway", [True, False], ids=["parent-death-signal", "reaped-at-start"])
async def test_kill9_leaves_no_agent_and_resume_runs_exactly_one(paths: dict[str, Path],
                                                                 die_with_gateway: bool) -> None:
    gw = gateway_of(paths, f"agents_die_with_gateway = {str(die_with_gateway).lower()}\n")
    await gw.start()
    try:
        client = await gw.client()
        sid = await start(client, paths["work"], "lingering")
        [agent] = reference_agents(paths["agent_state"])
        grandchild = int(paths["grandchild"].read_text())
        assert process_alive(grandchild)
        await client.close()
        await gw.kill9()
        if not die_with_gateway:  # without the signal, the agent outlives the gateway (it ignores stdin EOF)
            assert process_alive(agent) and process_alive(grandchild)
        await gw.start()  # ends what the crashed instance left, before it serves anyone
        assert not process_alive(agent) and not process_alive(grandchild)
        assert reference_agents(paths["agent_state"]) == []
        client = await gw.client()
        results = await asyncio.gather(*(client.call("task.session.resume", {"session_id": sid}) for _ in range(5)))
        assert sum(not r["already_running"] for r in results) >= 1 and all(r["is_agent_running"] for r in results)
        assert len(reference_agents(paths["agent_state"])) == 1
        await client.close()
    finally:
        await gw.stop()
    await wait_until(lambda: reference_agents(paths["agent_state"]) == [], what="agents stopped with the gateway")


async def test_kill9_mid_turn_is_closed_as_interrupted_after_restart(gateway: GatewayProcess,
                                                                     paths: dict[str, Path]) -> None:
    watcher, log = await subscribed(gateway)
    sid = await start(watcher, paths["work"])
    turn = asyncio.ensure_future(watcher.call("task.session.prompt", {"session_id": sid, "prompt": "/hang"}))
    started = await log.wait(of(sid, "turn_started"))
    await gateway.kill9()
    with pytest.raises(Exception):  # noqa: B017 - the gateway is gone
        await turn
    await gateway.start()
    client = await gateway.client()
    status = await client.call("task.session.status", {"session_id": sid})
    assert status["state"] == "WAITING_FOR_INPUT" and (status["needs_resume"], status["is_resumable"]) == (True, True)
    history = await client.call("task.session.history", {"session_id": sid})
    assert [e["kind"] for e in history["entries"]][-2:] == ["user_message", "turn_interrupted"]
    with sqlite3.connect(paths["state"] / "gateway.db") as db:
        events = [e for e in journal_events(db) if e["session_id"] == sid]
    ended = [e for e in events if e["type"] == "turn_ended"]
    assert [e["data"]["stop_reason"] for e in ended] == ["interrupted"] and ended[0]["id"] > started["id"]
    # A second restart finds nothing left open: the turn is not closed twice.
    await gateway.kill9()
    await gateway.start()
    with sqlite3.connect(paths["state"] / "gateway.db") as db:
        assert len([e for e in journal_events(db) if e["session_id"] == sid and e["type"] == "turn_ended"]) == 1
    assert await (await gateway.client()).call("task.session.prompt", {"session_id": sid, "prompt": "next"}) == \
        {"stop_reason": "end_turn"}
    await client.close()


async def test_a_turn_seen_running_before_a_crash_ends_interrupted_after_it(gateway: GatewayProcess,
                                                                            paths: dict[str, Path]) -> None:
    watcher, log = await subscribed(gateway)
    sid = await start(watcher, paths["work"])
    turn = asyncio.ensure_future(watcher.call("task.session.prompt", {"session_id": sid, "prompt": "/hang"}))
    await log.wait(lambda e: e["session_id"] == sid and e["type"] == "session_status"
                   and e["data"]["state"] == "RUNNING")
    await gateway.kill9()  # as soon as a frontend shows RUNNING: its turn_started may not have been seen yet
    with pytest.raises(Exception):  # noqa: B017 - the gateway is gone
        await turn
    await gateway.start()
    with sqlite3.connect(paths["state"] / "gateway.db") as db:
        # RUNNING and the turn it announces are one commit: no crash can come between them.
        rows = [[orjson.loads(f)["params"] for f in journal_frames(spans, frames, 0, 1 << 62, None)]
                for spans, frames in db.execute("SELECT spans, frames FROM journal ORDER BY rowid")]
    running = [row for row in rows if any(e["session_id"] == sid and e["type"] == "session_status"
                                          and e["data"]["state"] == "RUNNING" for e in row)]
    assert len(running) == 1 and any(e["type"] == "turn_started" for e in running[0])
    ended = [e for row in rows for e in row if e["session_id"] == sid and e["type"] == "turn_ended"]
    assert [e["data"]["stop_reason"] for e in ended] == ["interrupted"]
    client = await gateway.client()
    history = await client.call("task.session.history", {"session_id": sid})
    assert [e["kind"] for e in history["entries"]][-2:] == ["user_message", "turn_interrupted"]
    await client.close()


async def test_cli_prompt_whose_gateway_dies_says_so_in_one_line(gateway: GatewayProcess,
                                                                 paths: dict[str, Path]) -> None:
    watcher, log = await subscribed(gateway)
    sid = await start(watcher, paths["work"])
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "prompt", "--url", gateway.url, "--token", TOKEN, "--reconnect-for", "0",
        sid, "/hang", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    await log.wait(of(sid, "turn_started"))
    await gateway.kill9()
    _, stderr = await asyncio.wait_for(cli.communicate(), 30)
    assert cli.returncode == 2
    assert "Traceback" not in stderr.decode()
    assert stderr.decode().strip() == (f"acp-gateway prompt: the connection to the gateway at {gateway.url} closed: "
                                       f"`acp-gateway status {sid}` says what became of the session")


async def test_cli_prompt_whose_gateway_dies_unhosted_hears_the_turn_interrupted_after_the_restart(
        gateway: GatewayProcess, paths: dict[str, Path]) -> None:
    """With no agent hosts the turn ends with the gateway; the prompt that waited for it reconnects and prints the
    outcome the next gateway gives it (`interrupted`), once."""
    watcher, log = await subscribed(gateway)
    sid = await start(watcher, paths["work"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_GATEWAY_")}
    cli = await asyncio.create_subprocess_exec(  # found through the state directory: the restart takes another port
        sys.executable, "-m", "gateway.cli", "prompt", "--state-dir", str(gateway.state_dir), "--token", TOKEN, sid,
        "/hang", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    await log.wait(of(sid, "turn_started"))
    await gateway.kill9()
    assert cli.stderr is not None
    said = (await asyncio.wait_for(cli.stderr.readline(), 30)).decode()
    assert "closed; reconnecting for up to 120 s" in said, said
    await gateway.start()
    out, err = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0, err.decode()
    assert out.decode().strip().splitlines()[-1] == "stop reason: interrupted"
    assert "reconnected to" in err.decode()
