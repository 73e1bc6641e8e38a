"""A subscription to the journal and the sink it writes to: where it stands on its way to the live stream (its phase,
`phases.py`), what it has been handed (`last_id`) and who waits for it. The bus (`bus.py`) decides what it is handed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from ..store import EventGroup, EventRow
from .phases import Move, SubscriptionPhase, move

HEARTBEAT_SECONDS = 25.0


def synthetic_frame(type_: str, data: dict[str, Any], session_id: str | None = None,
                    task_id: str | None = None) -> bytes:
    """A notification that is not in the journal (caught_up, heartbeat, re-offers): its id is null."""
    return orjson.dumps({"jsonrpc": "2.0", "method": "task.session.event", "params": {
        "id": None, "type": type_, "session_id": session_id, "task_id": task_id, "ts": time.time(), "data": data}})


class Sink(Protocol):
    def send(self, frame: bytes) -> None: ...

    def full(self) -> bool:
        """The sink holds as much as it may: live events are not given to it, the journal feeds it later."""

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        """Frames in order, each its own message; with `batch`, several may go as one JSON array (`message`, when
        given, is them already joined as one). `shared`, when given, lives as long as these frames and is the same
        for every sink they go to: a place to keep an encoding of them made once."""

    async def drain(self) -> None:
        """Return once what was sent so far has left (or the sink is gone): replay paces itself by it."""

    def end(self, reason: str) -> None:
        """Nothing more can be handed to it in order (the journal no longer holds what it is owed, or reading it
        failed): the subscriber is told to reconnect and resubscribe from its cursor, not left waiting."""


@dataclass
class Subscription:
    id: str
    owner: str
    session_id: str | None
    sink: Sink
    # Where it is on its way to the live stream (`phases.py`): only LIVE is handed committed groups; the
    # feeder brings REPLAY and FED forward from the journal.
    phase: SubscriptionPhase = SubscriptionPhase.REPLAY
    last_id: int = 0  # every event it wants up to this id has been handed to its sink
    until: int = 0  # the head when it subscribed: its replay ends there, and `caught_up` says so
    heartbeat: asyncio.Task[None] | None = None
    batch: bool = False  # the subscriber accepts several notifications as one JSON array (subscribe {batch: true})
    feeder: asyncio.Task[None] | None = None
    fell_behind: int = 0  # times its sink was full and the journal fed it
    rule: str = ""  # the rule of its last move (SUB-5, a live group handed over, changes nothing and is not kept)
    _waiting: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.phase is SubscriptionPhase.LIVE

    def take(self, what: Move) -> str:
        """Apply a move of the table (raises on one it lacks); returns its rule id."""
        self.rule, self.phase = move(self.phase, what)
        return self.rule

    def wants(self, event: EventRow) -> bool:
        return event.owner == self.owner and (self.session_id is None or event.session_id == self.session_id)

    def deliver(self, events: list[EventRow], group: EventGroup | None = None) -> bool:
        """Hand over committed events (in id order) as one group, so a sink can write them as one message.
        `group`, when given, is exactly these events: its frames and message are shared by every subscriber.
        False when the sink is full: nothing was handed over, and the journal is to feed it from `last_id` (SUB-6).
        Handing a group over is SUB-5, a move that changes nothing: applied here without a call to the table (it is
        the relay's hot path)."""
        if events[0].id <= self.last_id:  # already handed over (read from the journal meanwhile)
            events = [e for e in events if e.id > self.last_id]
            group = None
            if not events:
                return True
        if self.sink.full():
            return False
        self.last_id = events[-1].id
        if group is not None:
            self.sink.send_many(group.frames, group.message() if self.batch else None, self.batch, group.shared)
        else:
            self.sink.send_many([e.frame() for e in events], None, self.batch)
        self.advanced()
        return True

    def passed_over(self, event_id: int) -> None:
        """The owner's events up to `event_id` were committed and it wanted none of them (another session's): it has
        been handed all it wants up to there. Without this, a session's subscription waited in `reached` for the
        owner's head until its own session said something more (an `/acp` prompt's answer, with another session of
        the owner busy at the same time, waited for ever)."""
        if event_id > self.last_id:
            self.last_id = event_id
            self.advanced()

    async def reached(self, event_id: int) -> None:
        """Return once every event it wants up to `event_id` has been handed to its sink."""
        if self.last_id >= event_id:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((event_id, fut))
        await fut

    def advanced(self) -> None:
        if self._waiting:
            done = [fut for event_id, fut in self._waiting if event_id <= self.last_id]
            self._waiting = [(event_id, fut) for event_id, fut in self._waiting if event_id > self.last_id]
            for fut in done:
                if not fut.done():
                    fut.set_result(None)

    def ended(self) -> None:
        for _, fut in self._waiting:
            if not fut.done():
                fut.set_result(None)  # nothing more will be handed over: whoever waits goes on
        self._waiting = []


# Called after the journal replay, before `caught_up`: re-offers what is still pending (permissions).
Reoffer = Callable[[Subscription, int], Awaitable[None]]
