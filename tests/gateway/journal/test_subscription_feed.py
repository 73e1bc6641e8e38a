"""The event bus's subscriptions on a real store: a replay ends at the head it subscribed at, and a subscriber
whose sink is full is fed from the journal and rejoins the live stream with nothing lost or repeated."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.journal import EventBus, Subscription
from gateway.store import StoreBase


class Sink:
    """Keeps what it is sent; `full` while `blocked` and anything was sent since it was unblocked."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.ended: str | None = None  # why the bus ended its subscription, when it did
        self.blocked = False
        self.drained = asyncio.Event()
        self.drained.set()

    def send(self, frame: bytes) -> None:
        self.frames.append(frame)

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        self.frames += frames

    def full(self) -> bool:
        return self.blocked

    async def drain(self) -> None:
        await self.drained.wait()

    def end(self, reason: str) -> None:
        self.ended = reason

    def stop_reading(self) -> None:
        """Its socket's buffer is full and stays so: live events are not handed to it, a page sent waits."""
        self.blocked = True
        self.drained.clear()

    def resume_reading(self) -> None:
        self.blocked = False
        self.drained.set()

    def notes(self) -> list[tuple[int | None, str]]:
        return [(p["id"], p["type"]) for p in (orjson.loads(f)["params"] for f in self.frames)]


async def live(bus: EventBus, session_id: str | None) -> tuple[Subscription, Sink]:
    """A subscriber of owner "o" (of `session_id`, or all its sessions), replayed and live."""
    sink = Sink()
    sub = await bus.subscribe("o", sink, None, session_id)
    await bus.start_replay(sub)
    return sub, sink


async def test_what_is_committed_during_a_replay_comes_after_caught_up(any_store: StoreBase) -> None:
    bus = EventBus(any_store)
    await bus.open()
    try:
        for i in range(3):
            bus.enqueue("session_update", "o", "s", "t", {"n": i})
        await bus.flush()
        sink = Sink()
        sub = await bus.subscribe("o", sink, 0, None)
        bus.enqueue("turn_started", "o", "s", "t", {})  # after the subscribe, before its replay ran
        await bus.flush()
        await bus.start_replay(sub)
        assert sink.notes() == [(1, "session_update"), (2, "session_update"), (3, "session_update"),
                                (None, "caught_up"), (4, "turn_started")]
        assert sub.live
    finally:
        await bus.close()


async def test_a_full_sink_is_fed_from_the_journal_and_goes_live_again(any_store: StoreBase) -> None:
    bus = EventBus(any_store)
    bus.FEED_PAGE_IDS = 7  # several pages
    await bus.open()
    try:
        sub, sink = await live(bus, "s")
        sink.stop_reading()
        for i in range(40):
            bus.enqueue("session_update", "o", "s" if i % 4 else "other", "t", {"n": i})
            await bus.flush()
        assert not sub.live and sub.fell_behind == 1
        # While full: no live events, and of the journal one page only (it waits for the sink to drain).
        assert all(event_id <= bus.FEED_PAGE_IDS for event_id, _ in sink.notes() if event_id is not None)
        sink.resume_reading()
        assert sub.feeder is not None
        await asyncio.wait_for(sub.feeder, 10)  # it ends once the subscription is live again
        assert sub.live and sub.last_id == bus.head("o")
        bus.enqueue("session_update", "o", "s", "t", {"n": 40})
        await bus.flush()
        got = [event_id for event_id, _ in sink.notes() if event_id is not None]
        assert got == [i + 1 for i in range(40) if i % 4] + [41]  # its session's, each once, in order, then live
    finally:
        await bus.close()


async def test_retention_never_prunes_what_a_subscriber_fed_from_the_journal_still_needs(any_store: StoreBase) -> None:
    """The flood of the issue, scaled down: the journal keeps 10 events, a subscriber is 100 behind. Retention by
    count used to prune the rows the feeder was about to read, and the feeder moved the cursor over them in silence
    (the subscriber then waited forever for updates that never came). PIN-1: pruning waits for its cursor."""
    bus = EventBus(any_store, retention=10)
    bus.PRUNE_EVERY = 10
    bus.FEED_PAGE_IDS = 7
    await bus.open()
    try:
        sub, sink = await live(bus, None)
        sink.stop_reading()
        for i in range(100):
            bus.enqueue("session_update", "o", "s", "t", {"n": i})
            await bus.flush()  # a group commit each: a prune rides along every 10 events
        assert not sub.live
        sink.resume_reading()
        assert sub.feeder is not None
        await asyncio.wait_for(sub.feeder, 10)
        assert sub.live and sink.ended is None
        assert [event_id for event_id, _ in sink.notes() if event_id is not None] == list(range(1, 101))
        # Once it is live, nothing holds the journal: the next prune goes down to the retention.
        for i in range(20):
            bus.enqueue("session_update", "o", "s", "t", {"n": i})
            await bus.flush()
        assert await any_store.events.horizon("o") >= 120 - 10 - bus.PRUNE_EVERY
    finally:
        await bus.close()


async def test_a_subscriber_the_byte_retention_overtook_is_ended_and_told_never_skipped(any_store: StoreBase) -> None:
    """The byte retention bounds the disk an owner's slow reader can hold: what it prunes past a cursor ends that
    subscription (SUB-7) and its sink is told to resubscribe; it never jumps over the missing events."""
    bus = EventBus(any_store, retention_bytes=8 << 10)
    bus.FEED_PAGE_IDS = 5
    await bus.open()
    try:
        sub, sink = await live(bus, None)
        sink.stop_reading()
        for i in range(60):
            bus.enqueue("session_update", "o", "s", "t", {"n": i, "pad": "x" * 400})
            await bus.flush()
        assert await any_store.events.horizon("o") > bus.FEED_PAGE_IDS  # pruned past its first page
        sink.resume_reading()
        assert sub.feeder is not None
        await asyncio.wait_for(sub.feeder, 10)
        assert sink.ended is not None and "resubscribe" in sink.ended and len(sink.ended.encode()) <= 123
        assert sub.rule == "SUB-7" and sub.id not in bus._subs
        got = [event_id for event_id, _ in sink.notes() if event_id is not None]
        assert got == list(range(1, len(got) + 1))  # what it got has no gap: it stopped where the journal did
    finally:
        await bus.close()


async def test_a_session_subscriber_has_reached_the_head_that_only_other_sessions_moved(any_store: StoreBase) -> None:
    """`reached(head)` (an `/acp` prompt waits on it before its answer) returns once everything the subscriber wants up
    to the head was handed over: events of the owner's other sessions, and of other owners, are nothing it waits
    for. It waited for ever when another session of the owner had the last word."""
    bus = EventBus(any_store)
    await bus.open()
    try:
        mine, sink = await live(bus, "mine")
        bus.enqueue("turn_ended", "o", "mine", "t", {})
        bus.enqueue("session_update", "o", "other", "t", {"n": 1})  # in the same group commit
        await bus.flush()
        bus.enqueue("session_update", "o", "other", "t", {"n": 2})  # a group of its own (one session)
        await bus.flush()
        await asyncio.wait_for(mine.reached(bus.head("o")), 5)
        bus.enqueue("session_update", "someone-else", "theirs", "t", {})  # another owner's ids are not its
        await bus.flush()
        assert mine.last_id == bus.head("o") == 3
        assert [n for n in sink.notes() if n[0] is not None] == [(1, "turn_ended")]
    finally:
        await bus.close()
