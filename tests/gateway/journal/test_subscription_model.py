"""Model-based test of the event bus's subscriptions on a real SQLite journal: commits, journal reads, sinks that fill
up and pause, drains, subscribes from any retained cursor, unsubscribes and retention (by count and by bytes)
interleaved at random. After every step: no subscription behind the head is left with nothing scheduled to bring it
forward, what each subscriber got is its events in order with no gap and no repeat, and one that was ended was told.
Once every sink takes what it is sent, every subscription reaches the head (or was ended and told)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gateway.journal import EventBus, Subscription
from gateway.journal.phases import WAKE, SubscriptionPhase, Wake
from gateway.store import StoreBase, open_store

OWNER = "o"
SESSIONS = ("s1", "s2")
SETTLE_SECONDS = 10.0


class Sink:
    """A subscriber's socket: `full` while it is blocked; its drain waits while it is paused."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.caught_up = 0
        self.ended: str | None = None
        self.blocked = False
        self.flowing = asyncio.Event()
        self.flowing.set()

    def send(self, frame: bytes) -> None:
        self.send_many([frame])

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        for frame in frames:
            params = orjson.loads(frame)["params"]
            if params["id"] is not None:
                self.ids.append(params["id"])
            elif params["type"] == "caught_up":
                self.caught_up += 1

    def full(self) -> bool:
        return self.blocked

    async def drain(self) -> None:
        await self.flowing.wait()

    def end(self, reason: str) -> None:
        self.ended = reason


class Subscriber:
    def __init__(self, sub: Subscription, sink: Sink, session_id: str | None, since: int) -> None:
        self.sub, self.sink, self.session_id, self.since = sub, sink, session_id, since


class SubscriptionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = tempfile.TemporaryDirectory()
        self.store: StoreBase | None = None
        self.bus: EventBus | None = None
        self.subscribers: list[Subscriber] = []
        self.sessions_of: dict[int, str] = {}  # every committed event id -> its session

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def turn(self, times: int = 20) -> None:
        """Let the loop run what is ready (feeders, their reads on aiosqlite's thread) for a few turns."""
        async def turns() -> None:
            for _ in range(times):
                await asyncio.sleep(0)
        self.run(turns())

    @initialize(retention=st.sampled_from([8, 30, 1000]), retention_bytes=st.sampled_from([6 << 10, 1 << 30]),
                page_ids=st.sampled_from([1, 3, 50]), page_bytes=st.sampled_from([300, 1 << 20]))
    def open(self, retention: int, retention_bytes: int, page_ids: int, page_bytes: int) -> None:
        self.store = self.run(open_store(str(Path(self.dir.name) / "gateway.db")))
        bus = EventBus(self.store, retention=retention, retention_bytes=retention_bytes)
        bus.PRUNE_EVERY = 5
        bus.FEED_PAGE_IDS = page_ids
        bus.FEED_PAGE_BYTES = page_bytes
        self.bus = bus
        self.run(bus.open())

    @rule(count=st.integers(1, 25), session=st.sampled_from(SESSIONS), groups=st.booleans())
    def commit(self, count: int, session: str, groups: bool) -> None:
        """An agent's updates: one group commit, or a commit each."""
        assert self.bus is not None
        bus = self.bus

        async def publish() -> None:
            for i in range(count):
                event_id = bus.enqueue("session_update", OWNER, session, "t", {"n": i, "pad": "x" * 200})
                self.sessions_of[event_id] = session
                if not groups:
                    await bus.flush()
            await bus.flush()
        self.run(publish())

    @precondition(lambda self: len(self.subscribers) < 4)
    @rule(session=st.sampled_from([None, *SESSIONS]), back=st.integers(0, 40), from_head=st.booleans())
    def subscribe(self, session: str | None, back: int, from_head: bool) -> None:
        assert self.bus is not None and self.store is not None
        head = self.bus.head(OWNER)
        horizon = self.run(self.store.events.horizon(OWNER))
        since = None if from_head else max(horizon, head - back)
        sink = Sink()
        sub = self.run(self.bus.subscribe(OWNER, sink, since, session))
        self.subscribers.append(Subscriber(sub, sink, session, head if since is None else since))
        sub.feeder = self.loop.create_task(self.bus.start_replay(sub))

    @precondition(lambda self: self.subscribers)
    @rule(data=st.data())
    def unsubscribe(self, data: st.DataObject) -> None:
        assert self.bus is not None
        who = data.draw(st.sampled_from(self.subscribers))
        bus = self.bus

        async def unsubscribe() -> None:
            bus.unsubscribe(who.sub.id)
        self.run(unsubscribe())
        self.subscribers.remove(who)

    @precondition(lambda self: self.subscribers)
    @rule(data=st.data(), blocked=st.booleans())
    def fill_or_free(self, data: st.DataObject, blocked: bool) -> None:
        """Its socket's buffer fills (no live events are handed to it) or empties."""
        data.draw(st.sampled_from(self.subscribers)).sink.blocked = blocked

    @precondition(lambda self: self.subscribers)
    @rule(data=st.data(), paused=st.booleans())
    def pause_or_drain(self, data: st.DataObject, paused: bool) -> None:
        """Its reader stops reading (a page sent waits to drain), or reads again."""
        sink = data.draw(st.sampled_from(self.subscribers)).sink
        if paused:
            sink.flowing.clear()
        else:
            sink.flowing.set()

    @rule(times=st.integers(1, 60))
    def run_the_loop(self, times: int) -> None:
        self.turn(times)

    @rule()
    def everyone_reads_until_settled(self) -> None:
        """Every sink takes what it is sent: every subscription reaches the head, or was ended and told."""
        assert self.bus is not None
        bus = self.bus
        for who in self.subscribers:
            who.sink.blocked = False
            who.sink.flowing.set()

        async def settled() -> None:
            deadline = asyncio.get_running_loop().time() + SETTLE_SECONDS
            settled = (SubscriptionPhase.ENDED, SubscriptionPhase.LIVE)
            while not all(who.sub.phase in settled for who in self.subscribers):
                assert asyncio.get_running_loop().time() < deadline, [
                    (who.sub.phase, who.sub.rule, who.sub.last_id, bus.head(OWNER)) for who in self.subscribers]
                await asyncio.sleep(0.001)
        self.run(settled())
        for who in self.subscribers:
            if who.sub.phase is SubscriptionPhase.LIVE:
                assert who.sink.ended is None and who.sink.caught_up == 1
                assert who.sink.ids == self.wanted(who, bus.head(OWNER))

    def wanted(self, who: Subscriber, through: int) -> list[int]:
        return [event_id for event_id in range(who.since + 1, through + 1)
                if who.session_id is None or self.sessions_of.get(event_id) == who.session_id]

    @invariant()
    def nobody_behind_is_left_without_a_feeder(self) -> None:
        if self.bus is None:
            return
        for who in self.subscribers:
            sub = who.sub
            wake = WAKE[sub.phase]
            if wake is Wake.FEEDER:
                assert sub.feeder is not None and not sub.feeder.done(), (sub.phase, sub.rule)
            elif wake is Wake.COMMIT:
                # Live: every event it wants up to the head is handed over; the next commit brings the rest.
                assert sub.id in self.bus._subs
                assert who.sink.ids == self.wanted(who, self.bus.head(OWNER)), (
                    sub.rule, who.since, sub.until, who.sink.ids[:4], self.bus.head(OWNER))
                assert who.sink.caught_up == 1
            else:
                assert sub.id not in self.bus._subs

    @invariant()
    def what_each_subscriber_got_is_in_order_without_gap_or_repeat(self) -> None:
        for who in self.subscribers:
            assert who.sink.ids == self.wanted(who, who.sink.ids[-1] if who.sink.ids else who.since)
            assert who.sub.last_id >= (who.sink.ids[-1] if who.sink.ids else who.since)

    @invariant()
    def one_that_was_ended_was_told(self) -> None:
        for who in self.subscribers:
            if who.sub.phase is SubscriptionPhase.ENDED:
                assert who.sink.ended is not None and who.sub.rule in ("SUB-7", "SUB-8")

    def teardown(self) -> None:
        if self.bus is not None:
            self.run(self.bus.close())
        if self.store is not None:
            self.run(self.store.close())
        async def cancel_the_rest() -> None:
            pending = asyncio.all_tasks() - {asyncio.current_task()}
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self.run(cancel_the_rest())
        self.loop.close()
        self.dir.cleanup()


SubscriptionMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                                 suppress_health_check=[HealthCheck.too_slow])
test_subscriptions_reach_the_head_or_are_told = SubscriptionMachine.TestCase
