"""The event journal and its subscribers: commit first, then publish, in strictly increasing id order.

`publish` queues an event and waits for its commit; one committer writes whatever has queued up
in one transaction (group commit) and only then hands the batch to subscribers, in id order. Each
event is encoded to its `task.session.event` frame once, whoever receives it. Subscriptions replay
the journal after a cursor, say `caught_up`, then go live without losing or repeating an event.
Nothing here knows about sockets: a subscription writes frames to a `Sink`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from .errors import RESYNC_REQUIRED, GatewayError
from .store import EventRow, Store

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 25.0


_FRAME_HEAD = b'{"jsonrpc":"2.0","method":"task.session.event","params":'


def event_frame(event: EventRow) -> bytes:
    """The notification for `event`, built around the already-encoded data (encoded once, ever)."""
    if event.frame is None:
        head = orjson.dumps({"id": event.id, "type": event.type, "session_id": event.session_id,
                             "task_id": event.task_id, "ts": event.ts})
        event.frame = _FRAME_HEAD + head[:-1] + b',"data":' + event.encoded_data() + b"}}"
    return event.frame


def synthetic_frame(type_: str, data: dict[str, Any], session_id: str | None = None,
                    task_id: str | None = None) -> bytes:
    """A notification that is not in the journal (caught_up, heartbeat, re-offers): its id is null."""
    return orjson.dumps({"jsonrpc": "2.0", "method": "task.session.event", "params": {
        "id": None, "type": type_, "session_id": session_id, "task_id": task_id, "ts": time.time(), "data": data}})


def _consume_exception(fut: asyncio.Future[EventRow]) -> None:
    if not fut.cancelled():
        fut.exception()  # logged by the committer; retrieved here so asyncio does not warn again


class Sink(Protocol):
    def send(self, frame: bytes) -> None: ...


@dataclass
class Subscription:
    id: str
    owner: str
    session_id: str | None
    sink: Sink
    live: bool = False  # False while the journal is replayed: live events wait in `held`
    held: list[EventRow] = field(default_factory=list)
    last_id: int = 0
    until: int = 0
    heartbeat: asyncio.Task[None] | None = None

    def wants(self, event: EventRow) -> bool:
        return event.owner == self.owner and (self.session_id is None or event.session_id == self.session_id)

    def deliver(self, event: EventRow) -> None:
        if not self.live:
            self.held.append(event)
            return
        if event.id > self.last_id:
            self.last_id = event.id
            self.sink.send(event_frame(event))


# Called after the journal replay, before `caught_up`: re-offers what is still pending (permissions).
Reoffer = Callable[[Subscription, int], Awaitable[None]]


class EventBus:
    def __init__(self, store: Store, retention: int = 100_000) -> None:
        self.store = store
        self.retention = retention
        self._subs: dict[str, Subscription] = {}
        self._queue: list[EventRow] = []  # queued in id order, committed as one group
        self._waiters: list[tuple[EventRow, asyncio.Future[EventRow]]] = []
        self._wake = asyncio.Event()
        self._next_id = 1
        self._committer: asyncio.Task[None] | None = None
        self.head = 0
        self.reoffer: Reoffer | None = None
        self.committed = 0

    async def open(self) -> None:
        self._next_id = await self.store.events.next_id()
        self.head = self._next_id - 1
        await self.prune()
        self._committer = asyncio.ensure_future(self._commit_loop())

    async def close(self) -> None:
        await self.flush()
        if self._committer is not None:
            self._committer.cancel()
        for sub in list(self._subs.values()):
            self.unsubscribe(sub.id)

    async def flush(self) -> None:
        while self._queue:
            await asyncio.sleep(0)
            pending = [f for _, f in list(self._waiters)]
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            elif self._queue:
                await asyncio.sleep(0.01)

    async def prune(self) -> None:
        await self.store.events.prune(self.retention)

    # -- publishing --------------------------------------------------------------------
    async def publish(self, type_: str, owner: str, session_id: str | None, task_id: str | None,
                      data: dict[str, Any]) -> EventRow:
        """Queue an event and wait until it is committed (and handed to subscribers)."""
        fut: asyncio.Future[EventRow] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_consume_exception)  # a caller cancelled while waiting leaves no warning
        self.enqueue(type_, owner, session_id, task_id, data, fut)
        return await asyncio.shield(fut)

    def enqueue(self, type_: str, owner: str, session_id: str | None, task_id: str | None, data: dict[str, Any],
                fut: asyncio.Future[EventRow] | None = None) -> None:
        """Queue an event without waiting: its id and order are fixed now, its commit comes with the next
        group, and subscribers see nothing before it. For streams (session updates) that must not wait one
        commit per event; a failed write is logged."""
        event = EventRow(self._next_id, type_, owner, session_id, task_id, time.time(), data)
        self._queue.append(event)
        if fut is not None:
            self._waiters.append((event, fut))
        self._next_id += 1
        if not self._wake.is_set():
            self._wake.set()

    async def _commit_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            waiters, self._waiters = self._waiters, []
            if not batch:
                continue
            try:
                await self.store.events.append_batch(batch)
            except Exception as exc:
                log.exception("event journal write failed")
                for _, fut in waiters:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.committed += len(batch)
            # No await from here to the end of the fan-out: a subscribe cannot fall between two events
            # of the batch, so `head` may move once, after the whole batch was handed out.
            subs = list(self._subs.values())
            if subs:
                for event in batch:
                    for sub in subs:
                        if sub.wants(event):
                            try:
                                sub.deliver(event)
                            except Exception:
                                log.exception("subscription %s failed", sub.id)
            self.head = batch[-1].id
            for event, fut in waiters:
                if not fut.done():
                    fut.set_result(event)
            if self.committed % 10_000 < len(batch):
                await self.prune()

    # -- subscriptions -----------------------------------------------------------------
    async def subscribe(self, owner: str, sink: Sink, since: int | None, session_id: str | None) -> Subscription:
        """Register now (live events are held), so nothing committed from here on can be missed."""
        head = self.head
        if since is not None:
            if since > head:
                raise GatewayError(RESYNC_REQUIRED, f"cursor {since} is ahead of this gateway's journal ({head}): "
                                   "refetch task.session.list and subscribe from its event_cursor",
                                   {"reason": "cursor_ahead", "head": head})
            oldest = await self.store.events.oldest()
            floor = (oldest - 1) if oldest is not None else head
            if since < floor:
                raise GatewayError(RESYNC_REQUIRED, f"cursor {since} is older than the retained journal "
                                   f"(from {floor}): refetch task.session.list and subscribe from its event_cursor",
                                   {"reason": "too_far_behind", "oldest": floor})
        # No await from here to the registration: every event committed after `until` is held.
        until = self.head
        sub = Subscription(f"sub-{uuid.uuid4().hex[:12]}", owner, session_id, sink,
                           last_id=until if since is None else since, until=until)
        self._subs[sub.id] = sub
        return sub

    async def start_replay(self, sub: Subscription) -> None:
        """Send what came after the cursor up to `until`, re-offers, `caught_up`, then held live events."""
        until = sub.until
        try:
            cursor = sub.last_id
            while cursor < until:
                page = await self.store.events.after(sub.owner, cursor, until, sub.session_id)
                if not page:
                    break
                for event in page:
                    sub.sink.send(event_frame(event))
                cursor = page[-1].id if len(page) == 1000 else until
            sub.last_id = max(sub.last_id, until)
            if self.reoffer is not None:
                await self.reoffer(sub, sub.last_id)
            sub.sink.send(synthetic_frame("caught_up", {"subscription_id": sub.id, "cursor": sub.last_id}))
            sub.live = True
            held, sub.held = sub.held, []
            for event in held:
                sub.deliver(event)
            sub.heartbeat = asyncio.ensure_future(self._heartbeat(sub))
        except Exception:
            log.exception("replay for %s failed", sub.id)
            self.unsubscribe(sub.id)

    async def _heartbeat(self, sub: Subscription) -> None:
        while sub.id in self._subs:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            sub.sink.send(synthetic_frame("heartbeat", {"subscription_id": sub.id, "cursor": self.head}))

    def unsubscribe(self, sub_id: str) -> bool:
        sub = self._subs.pop(sub_id, None)
        if sub is None:
            return False
        if sub.heartbeat is not None:
            with contextlib.suppress(Exception):
                sub.heartbeat.cancel()
        return True

