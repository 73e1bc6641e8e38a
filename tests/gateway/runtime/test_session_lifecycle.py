"""A session's life against a real gateway process, a real WebSocket client, real agents and a real SQLite file:
kill -9 and lazy resume, fresh starts with context, launch failures, busy turns, listing and deleting."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from gateway.runtime.resume_context import HistoryEntry, render_resume_context
from tests.gateway_harness import EventLog, GatewayProcess, agent_log, journal_events, reference_profile
from tests.support.world import Layout, Spec, World, WorldFactory, start


def profiles(at: Layout) -> None:
    a, s, log = at.agents, at.agent_state, at.log
    reference_profile(a, s, "ref", log=log)
    reference_profile(a, s, "ref-load", "--no-resume", log=log)
    reference_profile(a, s, "ref-inject", native=False, history=True, log=log)
    reference_profile(a, s, "ref-native-inject", native=True, history=True, log=log)
    reference_profile(a, s, "ref-forget", "--fault", "session/resume=unknown_session", log=log)
    for kind in ("auth", "crash", "internal"):
        reference_profile(a, s, f"ref-once-{kind}", "--fault-once", f"session/resume={kind}", log=log)
    (a / "missing.toml").write_text('id = "missing"\ncommand = ["/nonexistent/agent-binary"]\n'
                                    "native_session_resume = true\n")


# The module's gateway, for the tests that leave it running (`world`: an owner of its own on it); a test that kills
# it has a gateway of its own (`gateway_world(GATEWAY)`).
GATEWAY = Spec(agents=profiles)


def sent_methods(log: Path, method: str) -> list[dict[str, Any]]:
    return [e for e in agent_log(log) if e["method"] == method]


async def restart(own: World) -> GatewayClient:
    await own.gateway.kill9()
    await own.gateway.start()
    return await own.client()


@pytest.mark.parametrize(("agent", "method"), [("ref", "session/resume"), ("ref-load", "session/load")])
async def test_kill9_then_lazy_resume_keeps_the_same_acp_session(
        gateway_world: WorldFactory, agent: str, method: str) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    view = await start(client, own.work, agent)
    acp_id = view["acp_session_id"]
    assert view["state"] == "WAITING_FOR_INPUT" and view["task_state"] == "REVIEW" and acp_id
    assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "first"}) == \
        {"stop_reason": "end_turn"}
    c2 = await restart(own)
    status = await c2.call("task.session.status", {"session_id": view["session_id"]})
    assert (status["needs_resume"], status["is_resumable"], status["resume_reason"]) == \
        (True, True, "agent_not_running")
    assert status["is_agent_running"] is False and status["has_resume_token"] is True
    resumed = await c2.call("task.session.resume", {"session_id": view["session_id"]})
    assert resumed["already_running"] is False and resumed["acp_session_id"] == acp_id
    assert resumed["state"] == "WAITING_FOR_INPUT" and resumed["task_state"] == "REVIEW"
    assert [e["params"]["sessionId"] for e in sent_methods(own.layout.log, method)] == [acp_id]
    # the relaunch is said, with how the session came back (a user of a paid agent wants to know)
    db = sqlite3.connect(own.layout.state / "gateway.db")
    said = [e["data"] for e in journal_events(db) if e["type"] == "session_message"]
    db.close()
    assert said == [{"level": "info", "text": f"Agent {agent} relaunched; session {acp_id} restored by {method}"
                     + (", which replayed the conversation" if method == "session/load" else "") + "."}]
    assert await c2.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "second"}) == \
        {"stop_reason": "end_turn"}
    history = await c2.call("task.session.history", {"session_id": view["session_id"]})
    assert [(e["kind"], e["content"]) for e in history["entries"]] == [
        ("user_message", "first"), ("agent_message", "echo: first"),
        ("user_message", "second"), ("agent_message", "echo: second")]
    await c2.close()


async def test_lazy_resume_on_prompt(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    view = await start(client, own.work)
    c2 = await restart(own)
    assert await c2.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "after restart"}) == \
        {"stop_reason": "end_turn"}
    assert (await c2.call("task.session.status", {"session_id": view["session_id"]}))["resume_reason"] == \
        "agent_running"
    await c2.close()


def null_token(state: Path, session_id: str) -> None:
    db = sqlite3.connect(state / "gateway.db")
    db.execute("UPDATE executors SET resume_token = NULL WHERE session_id = ?", (session_id,))
    db.commit()
    db.close()


@pytest.mark.parametrize("case", ["no native resume", "token never stored"])
async def test_fresh_start_injects_resume_context_once(gateway_world: WorldFactory, case: str) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    agent = "ref-inject" if case == "no native resume" else "ref-native-inject"
    view = await start(client, own.work, agent)
    sid = view["session_id"]
    await client.call("task.session.prompt", {"session_id": sid, "prompt": "/tool ls README.md"})
    await client.call("task.session.prompt", {"session_id": sid, "prompt": "first question"})
    await own.gateway.kill9()
    if case == "token never stored":
        null_token(own.layout.state, sid)
    await own.gateway.start()
    c2 = await own.client()
    status = await c2.call("task.session.status", {"session_id": sid})
    expected_reason = "agent_not_running" if case == "no native resume" else "agent_not_running_fresh_start"
    assert (status["needs_resume"], status["resume_reason"]) == (True, expected_reason)
    await c2.call("task.session.resume", {"session_id": sid})
    prompts_before = len(sent_methods(own.layout.log, "session/prompt"))
    await c2.call("task.session.prompt", {"session_id": sid, "prompt": "next question"})
    await c2.call("task.session.prompt", {"session_id": sid, "prompt": "and another"})
    prompts = sent_methods(own.layout.log, "session/prompt")[prompts_before:]
    expected = render_resume_context([
        HistoryEntry("user_message", "/tool ls README.md"), HistoryEntry("tool_call", name="ls"),
        HistoryEntry("tool_result", "README.md", "ls"), HistoryEntry("user_message", "first question"),
        HistoryEntry("agent_message", "echo: first question")], "next question")
    assert prompts[0]["params"]["prompt"] == [{"type": "text", "text": expected}]
    assert expected.startswith("RESUME CONTEXT FOR CONTINUING TASK\n\n=== EXECUTION HISTORY ===\n[USER]: /tool")
    assert "[TOOL CALL: ls]\n[TOOL RESULT: ls] README.md\n" in expected
    assert "\n=== CURRENT REQUEST ===\nnext question\n\n=== INSTRUCTIONS ===\n" in expected
    assert prompts[1]["params"]["prompt"] == [{"type": "text", "text": "and another"}]
    # The history keeps what the user said, not the injected context.
    history = await c2.call("task.session.history", {"session_id": sid})
    assert [e["content"] for e in history["entries"] if e["kind"] == "user_message"][-2:] == \
        ["next question", "and another"]
    await c2.close()


async def test_forgotten_session_falls_back_to_new(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    view = await start(client, own.work, "ref-forget")
    old = view["acp_session_id"]
    c2 = await restart(own)
    sub_events: list[dict[str, Any]] = []
    resumed = await c2.call("task.session.resume", {"session_id": view["session_id"]})
    assert resumed["state"] == "WAITING_FOR_INPUT" and resumed["task_state"] == "REVIEW"
    assert resumed["acp_session_id"] and resumed["acp_session_id"] != old
    assert resumed["error_message"] is None
    status = await c2.call("task.session.status", {"session_id": view["session_id"]})
    assert status["resume_reason"] == "agent_running"
    db = sqlite3.connect(own.layout.state / "gateway.db")
    messages = [str(e["data"]) for e in journal_events(db) if e["type"] == "session_message"]
    assert any("no longer knew session" in m and old in m for m in messages), (messages, sub_events)
    await c2.close()


@pytest.mark.parametrize(("agent", "cls"), [("ref-once-auth", "authentication"), ("ref-once-crash", "transport"),
                                           ("ref-once-internal", "inconclusive")])
async def test_preserving_failures_keep_the_token(gateway_world: WorldFactory, agent: str, cls: str) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    view = await start(client, own.work, agent)
    sid, token = view["session_id"], view["acp_session_id"]
    c2 = await restart(own)
    resumed = await c2.call("task.session.resume", {"session_id": sid})
    assert resumed["state"] == "WAITING_FOR_INPUT" and resumed["task_state"] == "REVIEW"
    assert resumed["acp_session_id"] == token and cls in resumed["error_message"]
    # An agent that asks to be signed in says how, beside the kept session (recover retries; a sign-in works too).
    assert (resumed["config"]["auth"] is not None) == (cls == "authentication")
    status = await c2.call("task.session.status", {"session_id": sid})
    assert (status["is_resumable"], status["needs_resume"], status["resume_reason"]) == \
        (True, False, "error_recovery")
    assert status["is_agent_running"] is False
    recovered = await c2.call("task.session.recover", {"session_id": sid, "action": "retry"})
    assert recovered["acp_session_id"] == token and recovered["is_agent_running"] is True
    assert recovered["error_message"] is None
    assert (await c2.call("task.session.status", {"session_id": sid}))["resume_reason"] == "agent_running"
    assert await c2.call("task.session.prompt", {"session_id": sid, "prompt": "works"}) == {"stop_reason": "end_turn"}
    await c2.close()


async def test_recover_fresh_start(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    view = await start(client, own.work, "ref-once-internal")
    c2 = await restart(own)
    await c2.call("task.session.resume", {"session_id": view["session_id"]})
    fresh = await c2.call("task.session.recover", {"session_id": view["session_id"], "action": "fresh_start"})
    assert fresh["acp_session_id"] != view["acp_session_id"] and fresh["is_agent_running"] is True
    db = sqlite3.connect(own.layout.state / "gateway.db")
    said = [e["data"] for e in journal_events(db) if e["type"] == "session_message"]
    db.close()
    assert said[-1] == {"level": "info", "text": f"Agent ref-once-internal relaunched with a fresh session "
                        f"{fresh['acp_session_id']}: a fresh start was asked for; the saved session was given up."}
    await c2.close()


async def test_twenty_concurrent_resumes_launch_one_agent(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    view = await start(client, own.work)
    c2 = await restart(own)
    before = len(sent_methods(own.layout.log, "initialize"))
    results = await asyncio.gather(*(c2.call("task.session.resume", {"session_id": view["session_id"]})
                                     for _ in range(20)))
    assert len(sent_methods(own.layout.log, "initialize")) - before == 1
    assert len(sent_methods(own.layout.log, "session/resume")) == 1
    assert {r["acp_session_id"] for r in results} == {view["acp_session_id"]}
    assert all(r["state"] == "WAITING_FOR_INPUT" and r["is_agent_running"] for r in results)
    # A resume of a live session never kills it.
    again = await c2.call("task.session.resume", {"session_id": view["session_id"]})
    assert again["already_running"] is True
    assert len(sent_methods(own.layout.log, "initialize")) - before == 1
    await c2.close()


async def test_launch_failure_marks_failed_and_resume_is_refused(world: World) -> None:
    client = await world.client()
    view = await start(client, world.work, "missing")
    assert view["state"] == "FAILED" and view["task_state"] == "FAILED"
    assert "agent command not found" in view["error_message"] and "/nonexistent/agent-binary" in view["error_message"]
    with pytest.raises(RpcCallError) as info:
        await client.call("task.session.resume", {"session_id": view["session_id"]})
    assert info.value.code == -32013 and info.value.data["state"] == "FAILED"
    status = await client.call("task.session.status", {"session_id": view["session_id"]})
    assert (status["is_resumable"], status["resume_reason"]) == (False, "terminal_state")


async def test_missing_cwd(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    with pytest.raises(RpcCallError) as info:
        await start(client, own.work / "nope")
    assert info.value.code == -32011
    work = own.work / "project"
    work.mkdir()
    view = await start(client, work)
    c2 = await restart(own)
    work.rmdir()
    with pytest.raises(RpcCallError) as info:
        await c2.call("task.session.resume", {"session_id": view["session_id"]})
    assert info.value.code == -32011 and "no longer exists" in info.value.message
    # Nothing was lost: the session is still resumable once its workspace is back.
    work.mkdir()
    assert (await c2.call("task.session.resume", {"session_id": view["session_id"]}))["is_agent_running"] is True
    await c2.close()


async def test_failed_turn_is_not_a_failed_session(world: World) -> None:
    client = await world.client()
    view = await start(client, world.work)
    with pytest.raises(RpcCallError) as info:
        await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/fail"})
    # The agent's own -32603 is the agent's failure, not the gateway's: -32015 carries it as `agent_error`.
    assert info.value.code == -32015 and "failed this turn" in info.value.message
    assert info.value.data["agent_error"]["code"] == -32603 and info.value.data["needs_resume"] is False
    status = await client.call("task.session.status", {"session_id": view["session_id"]})
    assert status["state"] == "WAITING_FOR_INPUT" and status["task_state"] == "REVIEW" and status["error_message"]
    assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "ok"}) == \
        {"stop_reason": "end_turn"}


async def test_agent_dies_mid_turn_keeps_token(world: World) -> None:
    client = await world.client()
    view = await start(client, world.work)
    with pytest.raises(RpcCallError) as info:
        await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/crash"})
    assert info.value.code == -32015 and "exited during the turn" in info.value.message
    assert info.value.data["needs_resume"] is True
    status = await client.call("task.session.status", {"session_id": view["session_id"]})
    assert (status["needs_resume"], status["resume_reason"], status["has_resume_token"]) == \
        (True, "agent_not_running", True)
    assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "back"}) == \
        {"stop_reason": "end_turn"}


async def test_busy_while_a_turn_runs(world: World) -> None:
    client = await world.client()
    events = EventLog(client)
    await client.call("task.session.subscribe")
    view = await start(client, world.work)
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": view["session_id"],
                                                                     "prompt": "/hang"}))
    await events.wait(lambda e: e["type"] == "session_status" and e["data"]["state"] == "RUNNING")
    with pytest.raises(RpcCallError) as info:
        await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "again"})
    assert info.value.code == -32010
    await client.call("task.session.cancel_turn", {"session_id": view["session_id"]})
    assert await asyncio.wait_for(turn, 10) == {"stop_reason": "cancelled"}
    assert (await client.call("task.session.get", {"session_id": view["session_id"]}))["state"] == "WAITING_FOR_INPUT"


async def test_initial_prompt_on_first_launch_only(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    events = EventLog(client)
    await client.call("task.session.subscribe")
    view = await client.call("task.session.start", {"agent": "ref", "cwd": str(own.work),
                                                    "description": "do the task", "wait_ready": True})
    await events.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == view["session_id"])
    assert [p["params"]["prompt"][0]["text"] for p in sent_methods(own.layout.log, "session/prompt")] == ["do the task"]
    c2 = await restart(own)
    await c2.call("task.session.resume", {"session_id": view["session_id"]})
    assert len(sent_methods(own.layout.log, "session/prompt")) == 1
    await c2.close()


async def test_list_get_title_delete_and_paging(world: World) -> None:
    client = await world.client()
    ids = [(await start(client, world.work))["session_id"] for _ in range(3)]
    page = await client.call("task.session.list", {"limit": 2})
    assert [s["session_id"] for s in page["sessions"]] == ids[::-1][:2] and page["next_cursor"]
    assert isinstance(page["event_cursor"], int) and page["event_cursor"] > 0
    rest = await client.call("task.session.list", {"limit": 2, "cursor": page["next_cursor"]})
    assert [s["session_id"] for s in rest["sessions"]] == [ids[0]] and rest["next_cursor"] is None
    assert (await client.call("task.session.list", {"states": ["FAILED"]}))["sessions"] == []
    titled = await client.call("task.session.set_title", {"session_id": ids[0], "title": "renamed"})
    assert titled["title"] == "renamed"
    assert (await client.call("task.session.get", {"session_id": ids[0]}))["title"] == "renamed"
    tokens = [(await client.call("task.session.get", {"session_id": sid}))["acp_session_id"] for sid in ids]
    token = tokens[0]
    assert await client.call("task.session.delete", {"session_id": ids[0]}) is None
    with pytest.raises(RpcCallError) as info:
        await client.call("task.session.get", {"session_id": ids[0]})
    assert info.value.code == -32002
    # Its agent advertises session/delete: it was told to forget the session too (and none other of this owner's;
    # the log is the module gateway's, its other owners' sessions in it too).
    assert [p["params"]["sessionId"] for p in sent_methods(world.layout.log, "session/delete")
            if p["params"]["sessionId"] in tokens] == [token]
    assert not any(world.layout.agent_state.glob(f"{token}*.json"))


async def test_info(world: World) -> None:
    client = await world.client()
    info = await client.call("gateway.info")
    assert info["protocol_version"] == 1 and info["default_agent"] == "reference"
    assert {"ref", "reference", "codex"} <= {a["id"] for a in info["agents"]}


async def test_second_gateway_on_same_state_dir_refuses(world: World) -> None:
    second = await asyncio.create_subprocess_exec(*GatewayProcess(world.layout.state, world.layout.agents).argv(),
                                                  stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(second.communicate(), 30)
    assert second.returncode == 2
    assert b"another gateway (pid" in err and b"Traceback" not in err


async def test_state_dir_and_database_permissions(world: World) -> None:
    assert (world.layout.state.stat().st_mode & 0o777) == 0o700
    assert ((world.layout.state / "gateway.db").stat().st_mode & 0o777) == 0o600


def test_pure_modules_are_importable_without_io() -> None:
    # acp/ knows nothing of the gateway: importing it must not pull gateway modules in.
    import subprocess

    code = ("import acp.client, acp.restore, acp.session_setup, sys; "
            "print(any(m.startswith('gateway') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
