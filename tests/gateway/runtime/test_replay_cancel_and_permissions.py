"""Event replay and resync, cancellation and permissions, against a real gateway."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp.models import STATE_UPDATE_KINDS
from gateway.clients.client import RpcCallError
from tests.gateway_harness import EventLog, agent_log, reference_profile
from tests.support.world import Layout, Spec, World, WorldFactory, start


def profiles(at: Layout) -> None:
    a, s, log = at.agents, at.agent_state, at.log
    reference_profile(a, s, "ref", log=log)
    reference_profile(a, s, "ref-load", "--no-resume", log=log)
    reference_profile(a, s, "stubborn", "--ignore-cancel", log=log)
    for policy in ("allow_all", "deny_all"):
        reference_profile(a, s, f"ref-{policy}", log=log, extra=f'permission_policy = "{policy}"\n')
    reference_profile(a, s, "ref-timeout", log=log, extra="permission_timeout = 0.2\n")


# The module's gateway, for the tests that leave it running (`world`: an owner of its own on it); a test that stops
# or kills it has a gateway of its own, of this spec or another.
GATEWAY = Spec(agents=profiles, config="cancel_grace = 1.0\n")
RETAINING_10 = Spec(agents=profiles, config="event_retention = 10\ncancel_grace = 1.0\n")


async def eventually(fetch: Any, ok: Any, timeout: float = 15.0) -> Any:
    """Re-read a state nobody announces to a client that is not subscribed; fails after `timeout`."""
    async def loop() -> Any:
        while not ok(value := await fetch()):  # noqa: ASYNC110 - nothing announces it to this client
            await asyncio.sleep(0.05)
        return value

    return await asyncio.wait_for(loop(), timeout)


async def test_replay_from_cursor_after_disconnect_loses_and_repeats_nothing(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work)
    await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "one"})
    await log.wait(lambda e: e["type"] == "turn_ended")
    cursor = log.ids()[-1]
    await client.close()
    # While nobody listens, more happens.
    other = await world.client()
    await other.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "two"})
    await other.close()
    again, log2 = await world.subscribed(since=cursor)
    replayed = log2.ids()
    await again.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "three"})
    await log2.wait(lambda e: e["type"] == "turn_ended" and e["id"] not in replayed)
    ids = log2.ids()
    assert ids == sorted(ids) and len(ids) == len(set(ids)) and ids[0] == cursor + 1
    assert ids == list(range(cursor + 1, ids[-1] + 1))  # nothing lost: ids are contiguous for one owner
    texts = [e["data"]["update"]["content"]["text"] for e in log2.of_type("session_update")
             if e["data"]["update"]["sessionUpdate"] == "agent_message_chunk"]
    assert texts == ["echo: two", "echo: three"]
    listed = await again.call("task.session.list")
    assert listed["event_cursor"] >= ids[-1]
    await again.close()


async def test_resync_required(gateway_world: WorldFactory) -> None:
    own = await gateway_world(RETAINING_10)
    client = await own.client()
    view = await start(client, own.work)
    for i in range(6):  # well past a retention of 10 events, and past the prune interval of the journal
        await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": f"p{i}"})
    head = (await client.call("task.session.list"))["event_cursor"]
    with pytest.raises(RpcCallError) as ahead:
        await client.call("task.session.subscribe", {"since": head + 100})
    assert ahead.value.code == -32012 and ahead.value.data["reason"] == "cursor_ahead"
    await own.gateway.stop()  # the journal is pruned to its horizon when a gateway opens it
    await own.gateway.start()
    client2 = await own.client()
    with pytest.raises(RpcCallError) as behind:
        await client2.call("task.session.subscribe", {"since": 1})
    assert behind.value.code == -32012 and behind.value.data["reason"] == "too_far_behind"
    cursor = (await client2.call("task.session.list"))["event_cursor"]
    assert (await client2.call("task.session.subscribe", {"since": cursor}))["cursor"] == cursor
    await client.close()
    await client2.close()


async def test_load_replay_is_marked_and_not_recorded(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client = await own.client()
    view = await start(client, own.work, "ref-load")
    await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "remember"})
    await own.gateway.kill9()
    await own.gateway.start()
    c2, log = await own.subscribed()
    await c2.call("task.session.resume", {"session_id": view["session_id"]})
    await log.wait(lambda e: e["type"] == "session_update"
                   and e["data"]["update"]["content"]["text"] == "echo: remember")
    updates = log.of_type("session_update")
    assert [(u["data"]["replay"], u["data"]["update"]["content"]["text"]) for u in updates] == \
        [(True, "remember"), (True, "echo: remember")]
    history = await c2.call("task.session.history", {"session_id": view["session_id"]})
    assert [e["content"] for e in history["entries"]] == ["remember", "echo: remember"]
    await client.close()
    await c2.close()


async def test_events_are_owner_scoped_and_session_filtered(world: World) -> None:
    client, _ = await world.subscribed()
    a = await start(client, world.work)
    b = await start(client, world.work)
    filt, flog = await world.subscribed(session_id=b["session_id"])
    await client.call("task.session.prompt", {"session_id": a["session_id"], "prompt": "to a"})
    await client.call("task.session.prompt", {"session_id": b["session_id"], "prompt": "to b"})
    await flog.wait(lambda e: e["type"] == "turn_ended")
    assert {e["session_id"] for e in flog.events if e["id"] is not None} == {b["session_id"]}
    with pytest.raises(RpcCallError) as info:
        await client.call("task.session.subscribe", {"session_id": "s-not-mine"})
    assert info.value.code == -32002
    await client.close()
    await filt.close()


async def test_cancel_twice_second_is_already_terminal(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work)
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": view["session_id"],
                                                                     "prompt": "/hang"}))
    await log.wait(lambda e: e["type"] == "turn_started")
    cancelled = await client.call("task.session.cancel", {"session_id": view["session_id"]})
    assert cancelled["state"] == "CANCELLED" and cancelled["task_state"] == "CANCELLED"
    assert cancelled["is_agent_running"] is False
    assert await asyncio.wait_for(turn, 10) == {"stop_reason": "cancelled"}
    with pytest.raises(RpcCallError) as info:
        await client.call("task.session.cancel", {"session_id": view["session_id"]})
    assert info.value.code == -32009 and info.value.data["state"] == "CANCELLED"
    await log.wait(lambda e: e["type"] == "session_status" and e["data"]["state"] == "CANCELLED")
    types = [e["type"] for e in log.events]
    assert types.index("session_cancel_requested") < max(i for i, t in enumerate(types) if t == "session_status")
    methods = [e["method"] for e in agent_log(world.layout.log)
               if (e.get("params") or {}).get("sessionId") == view["acp_session_id"]]
    assert "session/cancel" in methods and "session/close" in methods
    with pytest.raises(RpcCallError) as resume:
        await client.call("task.session.resume", {"session_id": view["session_id"]})
    assert resume.value.code == -32013
    await client.close()


async def test_cancel_an_agent_that_ignores_cancel(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work, "stubborn")
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": view["session_id"],
                                                                     "prompt": "/hang"}))
    await log.wait(lambda e: e["type"] == "turn_started")
    assert (await client.call("task.session.cancel", {"session_id": view["session_id"]}))["state"] == "CANCELLED"
    assert (await asyncio.wait_for(turn, 10))["stop_reason"] == "cancelled"
    await client.close()


async def test_crash_between_cancel_request_and_agent_stop(gateway_world: WorldFactory) -> None:
    own = await gateway_world(GATEWAY)
    client, log = await own.subscribed()
    view = await start(client, own.work, "stubborn")
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": view["session_id"],
                                                                     "prompt": "/hang"}))
    await log.wait(lambda e: e["type"] == "turn_started")
    cancel = asyncio.ensure_future(client.call("task.session.cancel", {"session_id": view["session_id"]}))
    # The request is durable once its event is out; the agent ignores cancel, so the gateway is still waiting.
    await log.wait(lambda e: e["type"] == "session_cancel_requested")
    await own.gateway.kill9()
    await client.close()
    for pending in (turn, cancel):
        with pytest.raises(ConnectionError):
            await pending
    await own.gateway.start()
    c2 = await own.client()
    status = await c2.call("task.session.status", {"session_id": view["session_id"]})
    assert (status["state"], status["task_state"], status["needs_resume"]) == ("CANCELLED", "CANCELLED", False)
    with pytest.raises(RpcCallError) as info:
        await c2.call("task.session.resume", {"session_id": view["session_id"]})
    assert info.value.code == -32013
    await c2.close()


async def test_permission_asked_while_nobody_listens_is_reoffered(world: World) -> None:
    client = await world.client()
    view = await start(client, world.work)
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": view["session_id"],
                                                                     "prompt": "/permission"}))
    # Nobody is subscribed. A frontend connects later, with no cursor at all.
    await eventually(lambda: client.call("task.session.status", {"session_id": view["session_id"]}),
                     lambda s: len(s["pending_permissions"]) == 1)
    late, log = await world.subscribed()
    offer = next(e for e in log.of_type("permission_requested"))
    # The status lists the request with what answers it (issue 45, item 8): not a count.
    [pending] = (await late.call("task.session.status", {"session_id": view["session_id"]}))["pending_permissions"]
    assert pending == {"request_id": offer["data"]["request_id"], "title": offer["data"]["tool_call"]["title"],
                       "tool_call_id": offer["data"]["tool_call"]["toolCallId"],
                       "options": [{"option_id": o["optionId"], "name": o["name"], "kind": o["kind"]}
                                   for o in offer["data"]["options"]]}
    assert offer["data"]["reoffered"] is True and offer["session_id"] == view["session_id"]
    assert [o["optionId"] for o in offer["data"]["options"]] == ["allow-once", "reject-once"]
    answer = await late.call("task.session.permission.respond", {
        "session_id": view["session_id"], "request_id": offer["data"]["request_id"], "option_id": "allow-once"})
    assert answer["outcome"] == {"outcome": "selected", "optionId": "allow-once"}
    assert await asyncio.wait_for(turn, 10) == {"stop_reason": "end_turn"}
    assert (await late.call("task.session.status", {"session_id": view["session_id"]}))["pending_permissions"] == []
    resolved = await log.wait(lambda e: e["type"] == "permission_resolved")
    assert resolved["data"]["by"] == "user"
    await log.wait(lambda e: e["type"] == "session_update" and "permission" in e["data"]["update"]["content"]["text"])
    await client.close()
    await late.close()


async def test_two_frontends_answer_the_same_permission(world: World) -> None:
    one, log1 = await world.subscribed()
    two, log2 = await world.subscribed()
    view = await start(one, world.work)
    turn = asyncio.ensure_future(one.call("task.session.prompt", {"session_id": view["session_id"],
                                                                  "prompt": "/permission"}))
    req1 = await log1.wait(lambda e: e["type"] == "permission_requested")
    req2 = await log2.wait(lambda e: e["type"] == "permission_requested")
    assert req1["id"] == req2["id"] and req1["id"] is not None
    request_id = req1["data"]["request_id"]
    results = await asyncio.gather(
        one.call("task.session.permission.respond", {"session_id": view["session_id"], "request_id": request_id,
                                                     "option_id": "allow-once"}),
        two.call("task.session.permission.respond", {"session_id": view["session_id"], "request_id": request_id,
                                                     "option_id": "reject-once"}),
        return_exceptions=True)
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, RpcCallError)]
    assert len(winners) == 1 and len(losers) == 1
    assert losers[0].code == -32009 and "first answer wins" in losers[0].message
    assert await asyncio.wait_for(turn, 10) == {"stop_reason": "end_turn"}
    chosen = winners[0]["outcome"]["optionId"]
    said = await log1.wait(lambda e: e["type"] == "session_update" and "permission:" in
                           e["data"]["update"].get("content", {}).get("text", ""))
    assert chosen in said["data"]["update"]["content"]["text"]
    await one.close()
    await two.close()


async def test_permission_answered_cancelled_by_cancel_turn(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work)
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": view["session_id"],
                                                                     "prompt": "/permission"}))
    await log.wait(lambda e: e["type"] == "permission_requested")
    back = await client.call("task.session.cancel_turn", {"session_id": view["session_id"]})
    assert await asyncio.wait_for(turn, 10) == {"stop_reason": "cancelled"}
    assert back["state"] == "WAITING_FOR_INPUT"
    resolved = await log.wait(lambda e: e["type"] == "permission_resolved")
    assert resolved["data"]["outcome"] == {"outcome": "cancelled"} and resolved["data"]["by"] == "cancel"
    await client.close()


@pytest.mark.parametrize(("agent", "expected", "by"), [
    ("ref-allow_all", {"outcome": "selected", "optionId": "allow-once"}, "policy"),
    ("ref-deny_all", {"outcome": "selected", "optionId": "reject-once"}, "policy"),
    ("ref-timeout", {"outcome": "selected", "optionId": "reject-once"}, "timeout"),
])
async def test_permission_policies(world: World, agent: str, expected: dict[str, Any], by: str) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work, agent)
    assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/permission"}) == \
        {"stop_reason": "end_turn"}
    resolved = await log.wait(lambda e: e["type"] == "permission_resolved")
    assert resolved["data"]["outcome"] == expected and resolved["data"]["by"] == by
    await client.close()


async def test_unknown_update_kind_reaches_the_frontend(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work)
    await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/unknown-update"})
    event = await log.wait(lambda e: e["type"] == "session_update"
                           and e["data"]["update"]["sessionUpdate"] not in STATE_UPDATE_KINDS)
    assert event["data"]["update"] == {"sessionUpdate": "_reference_future_kind", "payload": {"x": 1}}
    await client.close()


async def test_a_long_replay_arrives_whole_and_in_order(world: World) -> None:
    """More events than one replay page (5,000 ids) and one group commit: paged, paced, none lost."""
    client = await world.client()
    view = await start(client, world.work)
    await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/flood 12000 10"})
    head = (await client.call("task.session.list"))["event_cursor"]
    await client.close()
    _, log = await world.subscribed(since=0)
    ids = [e["id"] for e in log.events if e["id"] is not None]
    assert ids == list(range(1, head + 1))
    assert len(log.of_type("session_update")) >= 12000


async def test_a_turn_is_staged_prompting_then_ready(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work)
    await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "hello"})
    await log.wait(lambda e: e["type"] == "session_active_stage" and e["data"]["stage"] == "ready"
                   and any(p["type"] == "turn_ended" for p in log.events))
    mine = [e for e in log.events if e["session_id"] == view["session_id"]]
    kinds = [e["data"]["stage"] if e["type"] == "session_active_stage" else e["type"] for e in mine]
    turn = [k for k in kinds[kinds.index("turn_started"):] if k in ("turn_started", "prompting", "turn_ended", "ready")]
    assert turn == ["turn_started", "prompting", "turn_ended", "ready"], kinds
    await client.close()


async def test_a_quiet_subscription_gets_heartbeats_with_the_head(gateway_world: WorldFactory) -> None:
    own = await gateway_world(Spec(agents=profiles, config="heartbeat_interval = 0.2\n"))
    client = await own.client()
    log = EventLog(client)
    sub = await client.call("task.session.subscribe")
    beats: list[dict[str, Any]] = []
    for _ in range(2):  # two in a row: they keep coming
        beats.append(await log.wait(lambda e: e["type"] == "heartbeat" and e not in beats, timeout=10))
    head = (await client.call("task.session.list"))["event_cursor"]
    for beat in beats:
        assert beat["id"] is None  # not a journal event: ids stay strictly increasing
        assert beat["data"] == {"subscription_id": sub["subscription_id"], "cursor": head}
