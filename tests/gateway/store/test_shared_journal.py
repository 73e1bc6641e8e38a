"""The event journal shared by several writers on one PostgreSQL store (the cluster's nodes): two event buses, each
with its own connections, write one owner's events at once; ids stay gap-free and in commit order, and a
subscriber on either bus receives every event of both, in id order, without a duplicate."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.journal import EventBus
from gateway.store import open_store
from tests.support.frames import Frames


async def test_two_writers_one_owner_ids_gap_free_and_every_subscriber_sees_all_in_order(pg_url: str) -> None:
    stores = [await open_store(pg_url), await open_store(pg_url)]
    buses = [EventBus(store) for store in stores]
    sinks = [Frames(), Frames()]
    try:
        for bus, sink in zip(buses, sinks, strict=True):
            await bus.open()
            await bus.start_replay(await bus.subscribe("alice", sink, 0, None))

        async def write(bus: EventBus, node: str) -> list[int]:
            ids = []
            for n in range(60):
                if n % 3 == 0:
                    ids.append((await bus.publish("session_update", "alice", f"s-{node}", "t", {"n": n})).id)
                else:
                    bus.enqueue("session_update", "alice", f"s-{node}", "t", {"n": n})
                    await asyncio.sleep(0)
            await bus.flush()
            return ids

        published = await asyncio.gather(write(buses[0], "a"), write(buses[1], "b"))
        for sink in sinks:
            await sink.until(120)
            assert sink.ids == list(range(1, 121))  # every event of both writers, in id order, once
        assert len(set(published[0]) | set(published[1])) == 40  # publish answers the final, distinct ids
        entries, _ = await stores[0].events.entries_after("alice", 0, 120)
        assert [e[0] for e in entries] == list(range(1, 121))
        by_session = {sid for _, sid, _ in entries}
        assert by_session == {"s-a", "s-b"}
        assert (await stores[1].events.heads())[0]["alice"].head == 120
        for bus in buses:
            assert bus.head("alice") == 120
    finally:
        for bus in buses:
            await bus.close()
        for store in stores:
            await store.close()


@pytest.mark.parametrize("woken_by", ["notify", "poll"])
async def test_a_late_subscriber_on_another_writer_replays_then_goes_live(pg_url: str, woken_by: str) -> None:
    """Woken by NOTIFY (the poll off), or by the poll alone (no notification ever arrives): either way every event
    arrives, in order."""
    writer_store, reader_store = await open_store(pg_url), await open_store(pg_url)
    writer, reader = EventBus(writer_store), EventBus(reader_store)
    reader.poll_interval = 3600.0 if woken_by == "notify" else 0.2
    if woken_by == "poll":
        async def deaf(on_commit: Any) -> None:  # notifications lost (a listener the server ended, say)
            return None

        reader_store.listen = deaf  # type: ignore[method-assign]
    await writer.open()
    await reader.open()
    try:
        for n in range(10):
            await writer.publish("session_update", "bob", "s", "t", {"n": n})
        sink = Frames()
        await reader.start_replay(await reader.subscribe("bob", sink, 0, None))
        assert (sink.ids, sink.caught_up_after) == (list(range(1, 11)), 10)  # replayed, then caught up
        other = Frames()  # a cursor the writer's node handed out is good on the reader's node
        await reader.start_replay(await reader.subscribe("bob", other, 10, None))
        for n in range(10, 25):
            writer.enqueue("session_update", "bob", "s", "t", {"n": n})
        await writer.flush()
        await sink.until(25)
        await other.until(15)
        assert sink.ids == list(range(1, 26)) and other.ids == list(range(11, 26))
    finally:
        await writer.close()
        await reader.close()
        await writer_store.close()
        await reader_store.close()
