"""A subscriber's sink on an event bus (gateway.journal.EventBus), without a gateway: the ids it was sent, in order."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson


class Frames:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.changed = asyncio.Event()
        self.caught_up_after = -1  # how many events came before `caught_up`
        self.ended: str | None = None  # why the bus ended the subscription, if it did

    def send(self, frame: bytes) -> None:
        self.send_many([frame])

    def full(self) -> bool:
        return False

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        for frame in frames:
            params = orjson.loads(frame)["params"]
            if params["id"] is not None:
                self.ids.append(params["id"])
            elif params["type"] == "caught_up":
                self.caught_up_after = len(self.ids)
        self.changed.set()

    async def drain(self) -> None:
        return None

    def end(self, reason: str) -> None:
        self.ended = reason
        self.changed.set()

    async def until(self, count: int) -> None:
        while len(self.ids) < count:
            assert self.ended is None, f"the bus ended the subscription after {len(self.ids)} events: {self.ended}"
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 15)
