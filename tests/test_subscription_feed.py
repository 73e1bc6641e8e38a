"""The event bus's subscriptions on a real store: a replay ends at the head it subscribed at, and a subscriber
whose sink is full is fed from the journal and rejoins the live stream with nothing lost or repeated."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.events import EventBus
from gateway.store import StoreBase


class Sink:
    """Keeps what it is sent; `full` while `blocked` and anything was sent since it was unblocked."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
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

    def notes(self) -> list[tuple[int | None, str]]:
        return [(p["id"], p["type"]) for p in (orjson.loads(f)["params"] for f in self.frames)]


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
        sink = Sink()
        sub = await bus.subscribe("o", sink, None, "s")
        await bus.start_replay(sub)
        sink.blocked = True
        sink.drained.clear()
        for i in range(40):
            bus.enqueue("session_update", "o", "s" if i % 4 else "other", "t", {"n": i})
            await bus.flush()
        assert not sub.live and sub.fell_behind == 1
        # While full: no live events, and of the journal one page only (it waits for the sink to drain).
        assert all(event_id <= bus.FEED_PAGE_IDS for event_id, _ in sink.notes() if event_id is not None)
        sink.blocked = False
        sink.drained.set()
        assert sub.feeder is not None
        await asyncio.wait_for(sub.feeder, 10)  # it ends once the subscription is live again
        assert sub.live and sub.last_id == bus.head("o")
        bus.enqueue("session_update", "o", "s", "t", {"n": 40})
        await bus.flush()
        got = [event_id for event_id, _ in sink.notes() if event_id is not None]
        assert got == [i + 1 for i in range(40) if i % 4] + [41]  # its session's, each once, in order, then live
    finally:
        await bus.close()
