"""Forking a session (`task.session.fork`, ACP `session/fork`) through a real gateway and real reference agents: the
new session has the conversation so far and an agent of its own, the original goes on untouched, both survive a
gateway crash; an agent that does not fork, a turn in progress and an agent that cannot restore the fork elsewhere
each get their answer."""

from __future__ import annotations

import asyncio

import pytest

from gateway.clients.client import RpcCallError
from tests.gateway_harness import agent_log, agent_said, reference_profile
from tests.support.world import Layout, Spec, World, WorldFactory, start


def profiles(at: Layout) -> None:
    reference_profile(at.agents, at.agent_state, "ref", log=at.log)
    reference_profile(at.agents, at.agent_state, "no-fork", "--no-fork")
    reference_profile(at.agents, at.agent_state, "forgetful", "--no-load", "--no-resume", history=True)


# The module's gateway (`world`: an owner of its own on it); the test that crashes it has a gateway of its own.
GATEWAY = Spec(agents=profiles)


async def test_a_fork_has_the_conversation_so_far_and_goes_its_own_way(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    gateway = own.gateway
    client, log = await own.subscribed()
    view = await start(client, own.work, title="plan")
    sid = view["session_id"]
    assert view["config"]["can_fork"] is True and view["forked_from"] is None
    for text in ("one", "two"):
        await client.call("task.session.prompt", {"session_id": sid, "prompt": text})

    fork = await client.call("task.session.fork", {"session_id": sid, "name": "branch"})
    fid = fork["session_id"]
    assert (fork["forked_from"], fork["name"], fork["title"], fork["is_agent_running"]) == (
        sid, "branch", "plan (fork)", True)
    assert fork["acp_session_id"] not in (None, view["acp_session_id"])
    # The agent forked the original's ACP session, let the fork go in the original's process, and the fork's own
    # process restored it (the restore rules: resume first).
    sent = [(m.get("method"), (m.get("params") or {}).get("sessionId")) for m in agent_log(own.layout.log)]
    assert ("session/fork", view["acp_session_id"]) in sent
    assert ("session/close", fork["acp_session_id"]) in sent
    assert ("session/resume", fork["acp_session_id"]) in sent
    # The history so far is the fork's too; each side says where the other is.
    history = await client.call("task.session.history", {"session_id": fid})
    said = [e["content"] for e in history["entries"] if e["kind"] == "user_message"]
    assert any("one" in c for c in said) and any("two" in c for c in said), history
    await log.wait(lambda e: e["session_id"] == sid and e["type"] == "session_message"
                   and fid in e["data"]["text"])
    await log.wait(lambda e: e["session_id"] == fid and e["type"] == "session_message"
                   and sid in e["data"]["text"])
    # Its first start is not a relaunch (issue 45, item 7): it says it took up the fork (LW-9).
    started = await log.wait(lambda e: e["session_id"] == fid and e["type"] == "session_message"
                             and "session/fork" in e["data"]["text"])
    assert started["data"]["text"].startswith(f"Agent ref started for this fork of session {sid}")
    assert not [e for e in log.events if e["session_id"] == fid and e["type"] == "session_message"
                and "relaunched" in e["data"]["text"]]

    # The two go their own ways: the agent of each remembers its own conversation only.
    await client.call("task.session.prompt", {"session_id": sid, "prompt": "three"})
    assert "recall: 4 prompts: one | two | three | /recall" in await agent_said(gateway, own.token, sid,
                                                                                "/recall")
    assert "recall: 3 prompts: one | two | /recall" in await agent_said(gateway, own.token, "branch", "/recall")
    listed = await client.call("task.session.list", {})
    assert {s["session_id"]: s["forked_from"] for s in listed["sessions"]} == {sid: None, fid: sid}

    # A crash keeps both: the fork is a session like any other, restored by the restore rules.
    await gateway.kill9()
    await gateway.start()
    assert "recall: 4 prompts: one | two | /recall | /recall" in await agent_said(
        gateway, own.token, "branch", "/recall")


async def test_what_cannot_be_forked_is_refused_with_the_reason(world: World) -> None:
    client = await world.client()
    plain = await start(client, world.work, "no-fork")
    assert plain["config"]["can_fork"] is False
    with pytest.raises(RpcCallError) as refused:
        await client.call("task.session.fork", {"session_id": plain["session_id"]})
    assert refused.value.code == -32602 and "does not fork" in refused.value.message

    view = await start(client, world.work)
    sid = view["session_id"]
    watcher, log = await world.subscribed(session_id=sid)
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "/hang"}))
    await log.wait(lambda e: e["type"] == "turn_started")
    with pytest.raises(RpcCallError) as busy:  # mid-turn: what would the fork hold?
        await client.call("task.session.fork", {"session_id": sid})
    assert busy.value.code == -32010
    await client.call("task.session.cancel_turn", {"session_id": sid})
    assert (await turn)["stop_reason"] == "cancelled"

    with pytest.raises(RpcCallError) as taken:
        await client.call("task.session.fork", {"session_id": sid, "name": plain["session_id"]})
    assert taken.value.code == -32602
    await client.call("task.session.cancel", {"session_id": sid})
    with pytest.raises(RpcCallError) as ended:
        await client.call("task.session.fork", {"session_id": sid})
    assert ended.value.code == -32013
    listed = await client.call("task.session.list", {})
    assert len(listed["sessions"]) == 2  # nothing was made by the refusals
    await watcher.close()


async def test_a_fork_its_agent_cannot_restore_elsewhere_starts_fresh_with_the_history(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work, "forgetful")
    await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "remember me"})
    fork = await client.call("task.session.fork", {"session_id": view["session_id"]})
    assert fork["is_agent_running"] is True
    # an untitled original: the fork's title says whose fork it is up front (a list cutting titles tells them apart)
    assert view["title"] is None and fork["title"] == f"fork of {view['session_id']}"
    history = await client.call("task.session.history", {"session_id": fork["session_id"]})
    assert any("remember me" in e["content"] for e in history["entries"] if e["kind"] == "user_message")
    await log.wait(lambda e: e["session_id"] == fork["session_id"] and e["type"] == "session_message"
                   and e["data"]["level"] == "warning" and "fresh session" in e["data"]["text"])
