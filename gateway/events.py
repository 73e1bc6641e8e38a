"""The event bus: every event is committed to the journal first, then handed to subscribers.

Subscribers are callbacks filtered by owner (and optionally session). The WebSocket layer turns
them into `task.session.event` notifications; nothing here knows about sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .store import EventRow, Store

log = logging.getLogger(__name__)

Deliver = Callable[[EventRow], None]


@dataclass
class Subscriber:
    owner: str
    deliver: Deliver
    session_id: str | None = None


class EventBus:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.subscribers: set[int] = set()
        self._subs: dict[int, Subscriber] = {}
        self._next = 0

    def subscribe(self, owner: str, deliver: Deliver, session_id: str | None = None) -> int:
        self._next += 1
        self._subs[self._next] = Subscriber(owner, deliver, session_id)
        return self._next

    def unsubscribe(self, sub_id: int) -> None:
        self._subs.pop(sub_id, None)

    async def publish(self, type_: str, owner: str, session_id: str | None, task_id: str | None,
                      data: dict[str, Any]) -> EventRow:
        event = await self.store.events.append(type_, owner, session_id, task_id, data)
        for sub in list(self._subs.values()):
            if sub.owner != owner or (sub.session_id is not None and sub.session_id != session_id):
                continue
            try:
                sub.deliver(event)
            except Exception:
                log.exception("event subscriber failed")
        return event
