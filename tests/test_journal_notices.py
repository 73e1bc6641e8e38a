"""What a PostgreSQL journal commit tells the other nodes (gateway.store.postgres.commit_notice / read_notice): a
table of payloads, and two buses on one database, where events in the notification are handed out without reading
the journal and anything a notification cannot carry (too big, lost) comes from the journal, in order."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.events import EventBus
from gateway.store import EventGroup, EventRow, journal_rows, open_store
from gateway.store.postgres import NOTICE_MAX_BYTES, commit_notice, read_notice
from tests.test_shared_journal import Frames


def row_of(first: int, count: int, owner: str = "alice", text: str = "hi") -> tuple[int, int, str, bytes, bytes]:
    events = [EventRow(first + i, "session_update", owner, "s-1", "t", 1.0, {"text": text}) for i in range(count)]
    return journal_rows(EventGroup.of(events))[0]


def test_small_commits_carry_their_events_and_read_back_as_the_journal_would() -> None:
    _, last, owner, spans, frames = row_of(5, 3)
    owner_read, last_read, writer, entries = read_notice(commit_notice(last, "w1", owner, spans, frames)) or ()
    assert (owner_read, last_read, writer) == ("alice", 7, "w1")
    assert entries is not None
    assert [e[0] for e in entries] == [5, 6, 7] and {e[1] for e in entries} == {"s-1"}
    assert [orjson.loads(e[2])["params"]["id"] for e in entries] == [5, 6, 7]


@pytest.mark.parametrize(("case", "payload", "expected"), [
    ("a wake-up only", "12 w1 alice", ("alice", 12, "w1", None)),
    ("an owner with spaces", "12 w1 team a", ("team a", 12, "w1", None)),
    ("not a notice", "hello", None),
    ("no id", " w1 alice", None),
    ("no owner", "12 w1", None),
    ("garbled events", "12 w1 alice\n[[1,2,\n{}", ("alice", 12, "w1", None)),
    ("events that end before the id named", '12 w1 alice\n[[10,1,"s"]]\n{"x":1}', ("alice", 12, "w1", None)),
])
def test_read_notice_table(case: str, payload: str, expected: Any) -> None:
    assert read_notice(payload) == expected, case


def test_what_does_not_fit_is_a_wake_up() -> None:
    _, last, owner, spans, frames = row_of(1, 40, text="x" * 300)
    assert len(frames) > NOTICE_MAX_BYTES
    assert commit_notice(last, "w1", owner, spans, frames) == f"{last} w1 alice"
    _, last, _, spans, frames = row_of(1, 1, owner="two\nlines")  # its lines would be taken for the events'
    assert commit_notice(last, "w1", "two\nlines", spans, frames) == f"{last} w1 two\nlines"


class Counted:
    """Counts a store's journal reads (the real ones: it calls through)."""

    def __init__(self, events: Any) -> None:
        self.reads = 0
        self._entries_after = events.entries_after
        events.entries_after = self.entries_after

    async def entries_after(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self._entries_after(*args, **kwargs)


async def test_another_nodes_events_come_in_its_notifications_and_the_journal_fills_what_they_cannot_carry(
        pg_url: str) -> None:
    writer_store, reader_store = await open_store(pg_url), await open_store(pg_url)
    writer, reader = EventBus(writer_store), EventBus(reader_store)
    reader.poll_interval = 3600.0  # notifications only
    await writer.open()
    await reader.open()
    try:
        await writer.publish("session_update", "carol", "s", "t", {"n": 0})
        sink = Frames()
        await reader.start_replay(await reader.subscribe("carol", sink, 0, None))
        counted = Counted(reader_store.events)
        for n in range(1, 21):  # one small commit each: every one fits in its notification
            await writer.publish("session_update", "carol", "s", "t", {"n": n})
        await sink.until(21)
        assert counted.reads == 0  # handed out from the notifications alone
        for n in range(21, 61):  # one commit too big for a notification: the journal has it
            writer.enqueue("session_update", "carol", "s", "t", {"n": n, "pad": "x" * 300})
        await writer.flush()
        await sink.until(61)
        assert counted.reads >= 1
        assert sink.ids == list(range(1, 62))
    finally:
        await writer.close()
        await reader.close()
        await writer_store.close()
        await reader_store.close()


async def test_a_lost_notification_is_filled_from_the_journal_before_the_next_ones_events(pg_url: str) -> None:
    writer_store, reader_store = await open_store(pg_url), await open_store(pg_url)
    writer, reader = EventBus(writer_store), EventBus(reader_store)
    reader.poll_interval = 3600.0
    heard = reader._heard
    dropped: list[int] = []

    def lossy(owner: str, last_id: int, entries: Any = None) -> None:
        if last_id == 3 and not dropped:  # the notification of event 3 never arrives
            dropped.append(last_id)
            return
        heard(owner, last_id, entries)

    reader._heard = lossy  # type: ignore[method-assign]
    await writer.open()
    await reader.open()
    try:
        sink = Frames()
        await reader.start_replay(await reader.subscribe("dave", sink, 0, None))
        for n in range(6):
            await writer.publish("session_update", "dave", "s", "t", {"n": n})
        await sink.until(6)
        assert dropped == [3] and sink.ids == [1, 2, 3, 4, 5, 6]  # 4's notification found the gap: read, in order
    finally:
        await writer.close()
        await reader.close()
        await writer_store.close()
        await reader_store.close()


async def test_journal_commits_skip_the_wal_flush_only_when_configured(pg_url: str) -> None:
    for synchronous, expected in ((True, "on"), (False, "off")):
        store = await open_store(pg_url, journal_synchronous_commit=synchronous)
        bus = EventBus(store)
        await bus.open()
        try:
            await bus.publish("session_update", "erin", "s", "t", {"n": 1})
            journal = store._journal  # type: ignore[attr-defined]
            assert await journal.fetchval("SHOW synchronous_commit") == expected
            assert await store.fetchone("SHOW synchronous_commit") == ("on",)  # every other write waits for it
        finally:
            await bus.close()
            await store.close()
