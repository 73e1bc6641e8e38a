"""`task.session.events`: a session's journal events, the one ordered source a frontend renders its transcript from.
Paged by count and by bytes, an owner's own only, and honest about what retention pruned."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from tests.support.world import Spec, World, WorldFactory, start


async def all_pages(client: GatewayClient, sid: str, limit: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after, first = 0, None
    while True:
        page = await client.call("task.session.events", {"session_id": sid, "after": after, "limit": limit})
        first = first or page
        events += page["events"]
        if page["next"] is None:
            return events, first
        after = page["next"]


# The module's gateway (`world`: an owner of its own on it); the test that restarts it has a gateway of its own.
async def test_a_sessions_events_are_what_subscribers_got_page_by_page(world: World) -> None:
    alice = await world.client()
    await alice.call("task.session.subscribe", {"since": 0})
    one = await start(alice, world.work, name="one")
    other = await start(alice, world.work)
    for text in ("a", "/tool ls x", "/stream 5"):
        await alice.call("task.session.prompt", {"session_id": "one", "prompt": text})  # by name
        await alice.call("task.session.prompt", {"session_id": other["session_id"], "prompt": text})
    whole, first = await all_pages(alice, one["session_id"], 2000)
    paged, _ = await all_pages(alice, "one", 3)
    assert paged == whole and first["complete"] is True
    assert whole[0]["type"] == "session_created" and {e["session_id"] for e in whole} == {one["session_id"]}
    ids = [e["id"] for e in whole]
    assert ids == sorted(set(ids))
    # exactly the session's events a subscriber from the start got, in the same order
    streamed: list[dict[str, Any]] = []
    while len(streamed) < len(whole):
        event = (await alice.next_notification(10))["params"]
        if event["session_id"] == one["session_id"] and event["id"] is not None:
            streamed.append(event)
    assert streamed == whole
    # another owner's session is not found, by id or name
    bob = await world.another().client()
    for ref in (one["session_id"], "one"):
        with pytest.raises(RpcCallError) as refused:
            await bob.call("task.session.events", {"session_id": ref})
        assert refused.value.code == -32002
    await alice.close()
    await bob.close()


async def test_a_page_is_bounded_in_bytes(world: World) -> None:
    alice = await world.client()
    view = await start(alice, world.work)
    for _ in range(3):  # three 4 MiB messages: at most two fit a page of 8 MiB
        await alice.call("task.session.prompt", {"session_id": view["session_id"], "prompt": f"/huge {4 << 20}"})
    page = await alice.call("task.session.events", {"session_id": view["session_id"], "limit": 2000})
    huge = [e for e in page["events"] if e["type"] == "session_update"
            and len(e["data"]["update"].get("content", {}).get("text", "")) >= 4 << 20]
    assert len(huge) <= 2 and page["next"] is not None
    rest, _ = await all_pages(alice, view["session_id"], 2000)
    assert sum(1 for e in rest if e["type"] == "session_update"
               and len(e["data"]["update"].get("content", {}).get("text", "")) >= 4 << 20) == 3
    await alice.close()


async def test_what_retention_pruned_is_said(gateway_world: WorldFactory) -> None:
    own = await gateway_world(Spec(config="event_retention = 10\n"))
    gw = own.gateway
    alice = await own.client()
    view = await start(alice, own.work)
    for n in range(6):
        await alice.call("task.session.prompt", {"session_id": view["session_id"], "prompt": f"turn {n}"})
    await alice.close()
    await gw.stop()  # the journal is pruned to its retention when a gateway opens it
    await gw.start()
    alice = await own.client()
    page = await alice.call("task.session.events", {"session_id": view["session_id"]})
    assert page["complete"] is False  # its session_created is gone: the frontend shows its history instead
    assert page["events"] and page["events"][0]["type"] != "session_created"
    history = await alice.call("task.session.history", {"session_id": view["session_id"]})
    assert [e["content"] for e in history["entries"] if e["kind"] == "user_message"] == [
        f"turn {n}" for n in range(6)]
    await alice.close()
