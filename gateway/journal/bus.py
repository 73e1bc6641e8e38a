"""The event journal and its subscribers: commit first, then publish, in strictly increasing id order.

`enqueue` fixes an event's id and order at once; `publish` also waits for its commit. Whatever queued
up while the loop was busy (a whole chunk of an agent's output, say) is committed in one transaction
(group commit) by a loop callback, and only then handed to subscribers, in id order. Each event is
encoded to its `task.session.event` frame once, whoever receives it, and the journal keeps that frame.
Subscriptions replay the journal after a cursor, say `caught_up`, then go live without losing or
repeating an event. A subscriber whose sink is full (it reads slower than events come) is not dropped and
nothing is queued for it: it is fed from the journal, a bounded page at a time as its sink drains, and rejoins
the live stream once it reaches the head, with the same ids and order. Nothing here knows about sockets: a
subscription writes frames to a `Sink`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .. import metrics
from ..errors import log_fault, resync_required
from ..store import EventGroup, EventRow, JournalEntry, PruneGoal, StoreBase
from .phases import (
    FED_FROM_THE_JOURNAL,
    FeedAction,
    GapVerdict,
    Move,
    SubscriptionPhase,
    cut_page,
    explain_gap,
    next_feed_step,
    prune_floor,
)
from .subscription import HEARTBEAT_SECONDS, Reoffer, Sink, Subscription, synthetic_frame

log = logging.getLogger(__name__)

relay_lag = metrics.RELAY_LAG


def _consume_exception(fut: asyncio.Future[EventRow]) -> None:
    if not fut.cancelled():
        fut.exception()  # logged by the committer; retrieved here so asyncio does not warn again


class EventBus:
    """Event ids count per owner, from 1, gap-free: an owner's cursor says nothing about anyone else's activity.
    Each owner's journal keeps its newest `retention` events and at most `retention_bytes` (whole group-commit
    rows, oldest first)."""

    PRUNE_EVERY = 1000  # events between count-retention deletes (each rides along with a group commit)
    # A subscription fed from the journal is sent a page at a time: at most this many ids are read, and sent up
    # to this many bytes (or one event), then the next page waits for its sink to drain.
    FEED_PAGE_IDS = 2000
    FEED_PAGE_BYTES = 256 << 10

    def __init__(self, store: StoreBase, retention: int = 100_000, heartbeat: float = HEARTBEAT_SECONDS,
                 retention_bytes: int = 256 << 20) -> None:
        self.store = store
        self.retention = retention
        self.retention_bytes = retention_bytes
        self.heartbeat = heartbeat
        self._subs: dict[str, Subscription] = {}
        self._queue: list[EventRow] = []  # queued in id order, committed as one group
        self._waiters: list[tuple[EventRow, asyncio.Future[EventRow]]] = []
        self._scheduled = False  # a commit callback is due on the loop
        self._in_flight: asyncio.Task[None] | None = None  # a group waiting for the store to be free
        self._floor = 0  # every owner's ids start above it (a journal from before ids were per owner)
        self._next: dict[str, int] = {}  # owner -> the id its next event gets
        self._heads: dict[str, int] = {}  # owner -> its newest event committed and handed out
        self._bytes: dict[str, int] = {}  # owner -> bytes its journal holds (as written; pruning subtracts)
        self._reserved: dict[str, int] = {}  # owner -> the highest id promised by next_id()
        self.lost: dict[str, int] = {}  # session id -> its events a failed write lost
        self._pruned_at = 0
        self.reoffer: Reoffer | None = None
        self.committed = 0
        # Hosted agents (gateway.runtime.hosting): their ledgers' marks go into each group as it is cut, and are
        # told when it is committed (or failed)
        self.marks: Callable[[], dict[str, bytes] | None] | None = None
        self.marks_committed: Callable[[Mapping[str, bytes]], None] | None = None
        self.marks_failed: Callable[[Mapping[str, bytes]], None] | None = None
        # A journal other nodes write too (PostgreSQL): their events reach this node's subscribers by catching up
        # from the journal, woken by the store (NOTIFY) or the poll; `_delivery` keeps every owner's events in id
        # order however they arrive.
        self._delivery = asyncio.Lock()
        self._waking: dict[str, asyncio.Task[None]] = {}
        self._wanted: dict[str, int] = {}  # owner -> the newest id another writer said it committed, not handed out
        self._rewoken: set[str] = set()  # owners woken again while their catch-up read the journal
        self._poller: asyncio.Task[None] | None = None
        self.poll_interval = 1.0

    def next_id(self, owner: str) -> int:
        """The id the owner's next queued event will get: each of its events queued from now on has this id or a
        greater one (a promise: ids lost to a failed write are never handed out again below it)."""
        next_id = self._upcoming(owner)
        self._reserved[owner] = max(self._reserved.get(owner, 0), next_id)
        return next_id

    def _upcoming(self, owner: str) -> int:
        return self._next.get(owner, self._floor + 1)

    def _past(self, owner: str, event_id: int) -> None:
        """An id of the owner is taken (committed here or by another node): the next provisional id is after it."""
        self._next[owner] = max(self._upcoming(owner), event_id + 1)

    def _watched(self, owner: str) -> bool:
        """Some subscription here is the owner's: other nodes' events of the owner are owed to it."""
        return any(sub.owner == owner for sub in self._subs.values())

    def head(self, owner: str) -> int:
        """The owner's newest event that is committed and handed out: subscribing from it misses nothing."""
        return self._heads.get(owner, self._floor)

    def journal_bytes(self, owner: str) -> int:
        return self._bytes.get(owner, 0)

    async def open(self) -> None:
        heads, self._floor = await self.store.events.heads()
        for owner, (head, size) in heads.items():
            self._next[owner], self._heads[owner], self._bytes[owner] = head + 1, head, size
            freed = await self.store.events.prune(owner, self._goal(owner, count=True))
            self._bytes[owner] -= freed
        if self.store.shared_journal:
            await self.store.listen(self._heard)
            self._poller = asyncio.ensure_future(self._poll())

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        for task in list(self._waking.values()):
            task.cancel()
        await self.flush()
        for sub in list(self._subs.values()):
            self.unsubscribe(sub.id)

    def idle(self) -> bool:
        """Nothing queued and nothing being committed: every event enqueued so far is in the journal (or failed)."""
        return not self._queue and self._in_flight is None and not self._scheduled

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or failed) and handed out."""
        while self._queue or self._in_flight is not None:
            if self._in_flight is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._in_flight)
            await asyncio.sleep(0)  # the done-callback fans out and hands in the next group

    # -- publishing --------------------------------------------------------------------
    async def publish(self, type_: str, owner: str, session_id: str | None, task_id: str | None,
                      data: dict[str, Any]) -> EventRow:
        """Queue an event and wait until it is committed (and handed to subscribers)."""
        fut: asyncio.Future[EventRow] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_consume_exception)  # a caller cancelled while waiting leaves no warning
        self.enqueue(type_, owner, session_id, task_id, data, fut)
        return await asyncio.shield(fut)

    def enqueue(self, type_: str, owner: str, session_id: str | None, task_id: str | None, data: dict[str, Any],
                fut: asyncio.Future[EventRow] | None = None) -> int:
        """Queue an event without waiting: its id and order are fixed now, its commit comes with the next
        group, and subscribers see nothing before it. For streams (session updates) that must not wait one
        commit per event; a failed write is logged. Returns the event's id."""
        event_id = self._upcoming(owner)
        self._next[owner] = event_id + 1
        event = EventRow(event_id, type_, owner, session_id, task_id, time.time(), data)
        self._queue.append(event)
        if fut is not None:
            self._waiters.append((event, fut))
        if not self._scheduled and self._in_flight is None:
            # A callback, not a task: it runs as soon as the current step (say, the ACP read loop working
            # through one chunk of lines) yields, so a whole chunk is one group and nobody waits a task hop.
            # While a group is being committed, events wait here and go as the next group when it is done.
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._commit_ready)
        return event.id

    def _commit_ready(self) -> None:
        self._scheduled = False
        if self._in_flight is None and self._queue:
            self._hand_in()

    def _hand_in(self) -> None:
        group = EventGroup.of(self._queue)
        if self.marks is not None:  # hosted agents' ledgers, cut with the events their lines produced
            group.marks = self.marks()
        self._queue = []
        waiters, self._waiters = self._waiters, []
        prune = self._prune_goals(group)
        if not self.store.events.can_append_now():
            self._in_flight = asyncio.ensure_future(self._commit_when_free(group, waiters, prune))
            return
        try:
            pruned = self.store.events.append_batch_now(group, prune)
        except Exception as exc:
            self._failed(group, waiters, exc)
            return
        self._committed(group, waiters, pruned)

    def _prune_goals(self, group: EventGroup) -> dict[str, PruneGoal] | None:
        """Which owners' journals this commit prunes: every owner's by count once in PRUNE_EVERY events, and an
        owner's by bytes as soon as its journal exceeds `retention_bytes` (down to 90% of it, so that pruning
        comes in steps, not with every commit)."""
        goals: dict[str, PruneGoal] = {}
        by_count = self.committed + len(group.events) - self._pruned_at >= self.PRUNE_EVERY
        if by_count:
            self._pruned_at = self.committed + len(group.events)
        written = self._group_bytes(group)
        for owner, size in written.items():
            self._bytes[owner] = self._bytes.get(owner, 0) + size
        for owner in (self._next if by_count else written):
            goal = self._goal(owner, by_count)
            if goal.through > 0 or goal.drop_bytes > 0:
                goals[owner] = goal
        return goals or None

    @staticmethod
    def _group_bytes(group: EventGroup) -> dict[str, int]:
        """The bytes each owner's journal row of this group holds: its frames joined by newlines."""
        sizes: dict[str, int] = {}
        for frame, event in zip(group.frames, group.events, strict=True):
            sizes[event.owner] = sizes.get(event.owner, -1) + len(frame) + 1
        return sizes

    def _goal(self, owner: str, count: bool) -> PruneGoal:
        excess = self._bytes.get(owner, 0) - self.retention_bytes
        through = 0
        if count:  # PIN-1: never past a cursor the journal still feeds (a slow subscriber of a long flood)
            through = prune_floor(self._upcoming(owner) - 1 - self.retention,
                                  (sub.last_id for sub in self._subs.values()
                                   if sub.owner == owner and sub.phase in FED_FROM_THE_JOURNAL))
        return PruneGoal(through=through, drop_bytes=excess + self.retention_bytes // 10 if excess > 0 else 0)

    async def _commit_when_free(self, group: EventGroup, waiters: list[tuple[EventRow, asyncio.Future[EventRow]]],
                                prune: dict[str, PruneGoal] | None) -> None:
        try:
            pruned = await self.store.events.append_batch(group, prune)
        except Exception as exc:
            self._failed(group, waiters, exc)
        else:
            if self.store.shared_journal:
                await self._committed_in_order(group, waiters, pruned)
            else:
                self._committed(group, waiters, pruned)
        finally:
            self._in_flight = None
        if self._queue:
            self._hand_in()  # what queued meanwhile, as the next group

    def _failed(self, group: EventGroup, waiters: list[tuple[EventRow, asyncio.Future[EventRow]]],
                exc: Exception) -> None:
        """A group the store refused (a full disk, say): nobody saw its events, and nobody will. Its sessions count
        the loss (a turn that lost output says so), and each owner's ids are handed out again from the first lost
        one, so ids stay gap-free — unless an id past it is already in use (queued, or a turn's floor)."""
        log_fault(log, "event journal write failed", exc)
        if group.marks and self.marks_failed is not None:
            self.marks_failed(group.marks)
        first: dict[str, int] = {}
        for event in group.events:
            first.setdefault(event.owner, event.id)
            if event.session_id is not None:
                self.lost[event.session_id] = self.lost.get(event.session_id, 0) + 1
        queued = {event.owner for event in self._queue}
        for owner, event_id in first.items():
            if owner not in queued and self._reserved.get(owner, 0) <= event_id:
                self._next[owner] = event_id
        for owner, size in self._group_bytes(group).items():
            self._bytes[owner] -= size
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)

    def _committed(self, group: EventGroup, waiters: list[tuple[EventRow, asyncio.Future[EventRow]]],
                   pruned: dict[str, int]) -> None:
        """Fan a committed group out, in id order. Synchronous: a subscribe cannot fall between two events of
        the group, so the heads move once, after the whole group was handed out."""
        events = group.events
        self.committed += len(events)
        relay_lag.observe(time.time() - events[0].ts)
        for owner, freed in pruned.items():
            self._bytes[owner] -= freed
        self._fan_out(group)
        if group.marks and self.marks_committed is not None:
            self.marks_committed(group.marks)
        for event, fut in waiters:
            if not fut.done():
                fut.set_result(event)

    async def _committed_in_order(self, group: EventGroup,
                                  waiters: list[tuple[EventRow, asyncio.Future[EventRow]]],
                                  pruned: dict[str, int]) -> None:
        """A group committed to a journal other nodes write too: the store gave its final ids, which may come after
        other nodes' events this node has not handed out yet; those go first, from the journal."""
        async with self._delivery:
            firsts: dict[str, int] = {}
            for event in group.events:
                firsts.setdefault(event.owner, event.id)
                self._past(event.owner, event.id)
            for owner, first in firsts.items():
                await self._catch_up(owner, first - 1)
            self._committed(group, waiters, pruned)

    # -- other nodes' events (a shared journal) --------------------------------------------------------------
    def _heard(self, owner: str, last_id: int, entries: list[JournalEntry] | None = None) -> None:
        """The store says another writer committed the owner's events up to `last_id`; `entries` are those events
        when they fitted in its notification."""
        if last_id <= self.head(owner) or not self._watched(owner):
            return
        if entries and entries[0][0] == self.head(owner) + 1 and not self._delivery.locked():
            # The very next events, in hand: handed out now, as a catch-up would hand them out after reading the
            # journal (a round trip more); nothing else hands out meanwhile (no await here, no delivery running).
            self._hand_out(owner, entries)
            return
        self._wake(owner, last_id)

    def _wake(self, owner: str, last_id: int) -> None:
        self._wanted[owner] = max(self._wanted.get(owner, 0), last_id)
        if owner in self._waking and not self._waking[owner].done():
            self._rewoken.add(owner)  # the running catch-up reads the journal once more before it stops
            return

        async def catch_up() -> None:
            try:
                async with self._delivery:
                    while self.head(owner) < self._wanted.get(owner, 0):
                        self._rewoken.discard(owner)
                        before = self.head(owner)
                        await self._catch_up(owner, self._wanted[owner])
                        if self.head(owner) == before and owner not in self._rewoken:
                            break  # not in the journal (a forged wake-up, say): the poll comes back for it
                    self._wanted.pop(owner, None)
                    self._rewoken.discard(owner)
            except Exception as exc:  # the poll tries again
                log_fault(log, f"catching up on {owner}'s events from the journal failed", exc)

        self._waking[owner] = asyncio.ensure_future(catch_up())

    async def _poll(self) -> None:
        """A notification is only a wake-up: every `poll_interval`, the owners with subscribers here are compared
        with the journal, so a lost notification costs latency, never an event."""
        while True:
            await asyncio.sleep(self.poll_interval)
            owners = {sub.owner for sub in self._subs.values()}
            try:
                heads = await self.store.events.heads_of(owners)
            except Exception as exc:
                log_fault(log, "polling the journal's heads failed", exc)
                continue
            for owner, last_id in heads.items():
                if last_id > self.head(owner):
                    self._wake(owner, last_id)

    async def refresh(self, owner: str) -> None:
        """Bring this node's head of the owner up to the journal's (a journal other nodes write too; else a no-op):
        through its subscribers when it has some, else at once (nobody here is owed those events)."""
        if not self.store.shared_journal:
            return
        latest = (await self.store.events.heads_of([owner])).get(owner, 0)
        if latest <= self.head(owner):
            return
        async with self._delivery:
            if self._watched(owner):
                await self._catch_up(owner, latest)
            elif latest > self.head(owner):
                self._heads[owner] = latest
                self._past(owner, latest)

    async def _catch_up(self, owner: str, until: int) -> None:
        """Hand out the owner's events from this node's head to `until`, read from the journal (with `_delivery`
        held, so nothing else is handed out meanwhile)."""
        cursor: int | None = self.head(owner)
        while cursor is not None and cursor < until:
            entries, cursor = await self.store.events.entries_after(owner, cursor, until)
            if entries:
                self._hand_out(owner, entries)

    def _hand_out(self, owner: str, entries: list[JournalEntry]) -> None:
        """Hand out another writer's events of the owner (the next ones after this node's head, in id order)."""
        events = [EventRow(event_id, "", owner, session_id, None, 0.0, {}, frame)
                  for event_id, session_id, frame in entries]
        self._fan_out(EventGroup(events, [e.frame() for e in events], None))
        self._past(owner, events[-1].id)

    def _fan_out(self, group: EventGroup) -> None:
        """Hand committed events (in id order) to every subscription that wants them; move the heads after. A group of
        several sessions is split by owner and session once, not filtered by each subscription (with 96 sessions of
        one owner flooding, each with a subscriber, that filtering cost more than the rest of the relay)."""
        events = group.events
        by_session: dict[tuple[str, str | None], list[EventRow]] = {}
        by_owner: dict[str, list[EventRow]] = {}
        if group.stream is None:
            for event in events:
                by_session.setdefault((event.owner, event.session_id), []).append(event)
                by_owner.setdefault(event.owner, []).append(event)
        for sub in list(self._subs.values()):
            if sub.phase is not SubscriptionPhase.LIVE:
                continue  # the journal feeds it: it reads these there, in order, at its own pace
            try:
                if group.stream is not None:  # one owner, one session: all or nothing
                    handed = sub.deliver(events, group) if sub.wants(events[0]) else _passed(sub, events)
                else:
                    wanted = (by_owner.get(sub.owner) if sub.session_id is None
                              else by_session.get((sub.owner, sub.session_id)))
                    handed = sub.deliver(wanted) if wanted else _passed(sub, by_owner.get(sub.owner))
                if not handed:
                    self._fall_behind(sub)
            except Exception:
                log.exception("subscription %s failed", sub.id)
        for event in events:
            self._heads[event.owner] = event.id

    # -- subscriptions -----------------------------------------------------------------
    async def subscribe(self, owner: str, sink: Sink, since: int | None, session_id: str | None,
                        batch: bool = False) -> Subscription:
        """Register now, not live (`start_replay` feeds it from the journal): nothing committed from here on can be
        missed."""
        await self.refresh(owner)  # on a shared journal, a cursor another node handed out is not "ahead"
        head = self.head(owner)
        if since is not None and since > head:
            raise resync_required("cursor_ahead", f"cursor {since} is ahead of this gateway's journal ({head}): "
                                  "refetch task.session.list and subscribe from its event_cursor", head=head)
        # Registered not live: what is committed from here on is read from the journal until it is live. Registered
        # before the horizon is read, so its cursor holds the count retention (PIN-1) from the moment it is checked.
        sub = Subscription(f"sub-{uuid.uuid4().hex[:12]}", owner, session_id, sink,
                           last_id=head if since is None else since, until=head, batch=batch)
        self._subs[sub.id] = sub
        if since is not None:
            try:
                floor = await self.store.events.horizon(owner)
            except BaseException:
                self.unsubscribe(sub.id)
                raise
            if since < floor:
                self.unsubscribe(sub.id)
                raise resync_required("too_far_behind", f"cursor {since} is older than the retained journal "
                                      f"(from {floor}): refetch task.session.list and subscribe from its event_cursor",
                                      head=head, oldest=floor)
        return sub

    async def start_replay(self, sub: Subscription) -> None:
        """Send what came after the cursor, re-offers, `caught_up`, and go live (`_feed`)."""
        await self._feed(sub)

    def _fall_behind(self, sub: Subscription) -> None:
        """Its sink is full (SUB-6): no more live events for it; the journal feeds it from its last id."""
        sub.take(Move.SINK_FULL)
        sub.fell_behind += 1
        metrics.SUBSCRIBERS_BEHIND.inc()
        sub.feeder = asyncio.ensure_future(self._feed(sub))

    async def _feed(self, sub: Subscription) -> None:
        """Feed a subscription that is not live from the journal, a page of at most FEED_PAGE_BYTES (or one event)
        at a time, each once its sink has taken the last; live again once it reaches the head. The first time it
        gets there its replay is over: re-offers, then `caught_up` (and what was committed meanwhile). What to do
        at each step is `next_feed_step`'s: this loop only reads, sends and waits."""
        read_again = False  # the window at the cursor was read once more after a gap (FEED-6)
        try:
            while sub.id in self._subs:
                step = next_feed_step(sub.phase, sub.last_id, sub.until, self.head(sub.owner))
                if step.action is FeedAction.SEND_CAUGHT_UP:
                    if self.reoffer is not None:
                        await self.reoffer(sub, sub.last_id)
                    sub.sink.send(synthetic_frame("caught_up", {"subscription_id": sub.id, "cursor": sub.last_id}))
                    sub.take(Move.CAUGHT_UP)
                    if sub.heartbeat is None:
                        sub.heartbeat = asyncio.ensure_future(self._heartbeat(sub))
                    continue  # FED: what was committed during the replay and the re-offers
                if step.action is FeedAction.GO_LIVE:
                    # No await between reading the head (above) and this: every event after it goes to it live.
                    sub.take(Move.AT_HEAD)
                    sub.advanced()
                    return
                since = sub.last_id
                entries, next_cursor = await self.store.events.entries_after(sub.owner, since, step.target,
                                                                             self.FEED_PAGE_IDS)
                if sub.id not in self._subs:
                    return  # unsubscribed while the journal was read
                page = cut_page(entries, since, step.target if next_cursor is None else next_cursor,
                                sub.session_id, self.FEED_PAGE_BYTES)
                if page.gap:
                    rule, verdict = explain_gap(since, await self.store.events.horizon(sub.owner), read_again)
                    if verdict is GapVerdict.OVERTAKEN:
                        self._end(sub, Move.OVERTAKEN, f"too far behind: retention pruned event {since + 1}; "
                                  "resubscribe")
                        return
                    if verdict is GapVerdict.READ_AGAIN:
                        read_again = True
                        continue
                    log.info("subscription %s passes over a hole in owner %s's journal after %d (%s)", sub.id,
                             sub.owner, since, rule)
                read_again = False
                if page.frames:
                    sub.sink.send_many(page.frames, None, sub.batch)
                sub.last_id = max(sub.last_id, page.through)
                sub.take(Move.PAGE_SENT)
                sub.advanced()
                await sub.sink.drain()  # the next page once this one has left
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("feeding subscription %s from the journal failed", sub.id)
            self._end(sub, Move.FEED_FAILED, "reading the event journal failed: reconnect and resubscribe")

    def _end(self, sub: Subscription, what: Move, reason: str) -> None:
        """SUB-7, SUB-8: the journal cannot bring it forward in order. It is ended and its subscriber told so (its
        connection is closed, 4429: reconnect and resubscribe from the cursor), never left behind in silence.
        `reason` goes into a WebSocket close frame: at most 123 bytes."""
        if sub.phase is SubscriptionPhase.ENDED:
            return  # unsubscribed meanwhile: nobody is waiting for it
        rule = sub.take(what)
        metrics.SUBSCRIPTIONS_ENDED.labels(rule).inc()
        log.warning("ending subscription %s of owner %s at cursor %d (%s): %s", sub.id, sub.owner, sub.last_id, rule,
                    reason)
        self.unsubscribe(sub.id)
        sub.sink.end(reason)

    async def _heartbeat(self, sub: Subscription) -> None:
        while sub.id in self._subs:
            await asyncio.sleep(self.heartbeat)
            if sub.phase is SubscriptionPhase.LIVE:  # one the journal feeds is not quiet
                sub.sink.send(synthetic_frame("heartbeat", {"subscription_id": sub.id,
                                                            "cursor": self.head(sub.owner)}))

    def unsubscribe(self, sub_id: str) -> bool:
        sub = self._subs.pop(sub_id, None)
        if sub is None:
            return False
        if sub.phase is not SubscriptionPhase.ENDED:
            sub.take(Move.UNSUBSCRIBED)
        for task in (sub.heartbeat, sub.feeder):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        sub.ended()
        return True


def _passed(sub: Subscription, events: list[EventRow] | None) -> bool:
    """A live subscription that wants none of these events: its cursor moves past its owner's (ids are per owner)."""
    if events and events[0].owner == sub.owner:
        sub.passed_over(events[-1].id)
    return True
