"""Counting a flood as its subscribers get it: a figure whose subscriber stops short of its flood is void."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any


class MissedUpdates(RuntimeError):
    """A subscriber of a flood stopped short of it: the figure is void (the relay lost updates, or stopped)."""


# A flood may take 30 s + 1 s per 2,000 updates to reach every subscriber (the relays here move 100k–300k a second),
# and a subscriber still short of it may go STALL seconds without an update: past either it has stopped.
STALL = 20.0


def flood_deadline(count: int) -> float:
    return 30 + count / 2000


class Tally:
    """How many updates of a flood of `count` each subscriber got, counted as they arrive, and when each had all."""

    def __init__(self, figure: str, count: int, subscribers: int = 1, updates: int | None = None) -> None:
        """`updates`: of all the floods this tally waits for (several sessions'), if more than `count`."""
        self.figure, self.count = figure, count
        self.deadline = flood_deadline(updates or count)
        self.got = [0] * subscribers
        self.done_at: list[float] = []
        self.t0 = time.perf_counter()

    def add(self, k: int, n: int = 1) -> bool:
        """Subscriber `k` got `n` more; True once it has the whole flood."""
        before = self.got[k]
        self.got[k] = before + n
        if before < self.count <= before + n:
            self.done_at.append(time.perf_counter())
        return before + n >= self.count

    def start(self) -> None:
        self.t0 = time.perf_counter()

    @property
    def rates(self) -> list[float]:
        """Updates/s each subscriber got the whole flood at, from `start`."""
        return [self.count / (t - self.t0) for t in self.done_at]

    async def wait(self, *tasks: Awaitable[Any]) -> None:
        """Wait for `tasks` (the receivers counting into this tally, the prompt). Raises MissedUpdates, naming each
        subscriber short of the flood and what it got, once the flood's deadline passes or STALL seconds go by
        without an update to any of them; the exception of a task that fails."""
        futures = [asyncio.ensure_future(t) for t in tasks]
        deadline = time.monotonic() + self.deadline
        moved_at, last = time.monotonic(), sum(self.got)
        try:
            pending = set(futures)
            while pending:
                done, pending = await asyncio.wait(pending, timeout=1.0, return_when=asyncio.FIRST_EXCEPTION)
                for f in done:
                    error = f.exception()
                    if error is not None and any(n < self.count for n in self.got):
                        raise MissedUpdates(self.missed(f"{type(error).__name__}: {error}")) from error
                    f.result()
                now, total = time.monotonic(), sum(self.got)
                if total != last:
                    moved_at, last = now, total
                short = [k for k, n in enumerate(self.got) if n < self.count]
                if pending and (now > deadline or (short and now - moved_at > STALL)):
                    raise MissedUpdates(self.missed(f"nothing for {STALL:.0f} s" if now <= deadline else
                                                    f"not within {self.deadline:.0f} s"))
        finally:
            for f in futures:
                f.cancel()
        if any(n < self.count for n in self.got):  # the receivers ended (their connection closed) short of it
            raise MissedUpdates(self.missed("its connection ended"))

    def missed(self, why: str) -> str:
        short = [f"subscriber {k + 1} got {n:,} of {self.count:,} updates" for k, n in enumerate(self.got)
                 if n < self.count]
        return f"{self.figure}: {'; '.join(short) or 'every subscriber got all, but the prompt did not end'} ({why})"


def got_all(tallies: list[Tally]) -> str:
    """What the subscribers of these floods got, for a row: "each subscriber got 200,000 of 200,000 updates in
    each run", or the range of counts when any got other than its flood (more; one short of it fails the figure)."""
    count = tallies[0].count
    got = sorted({n for t in tallies for n in t.got})
    counts = f"{got[0]:,}" if len(got) == 1 else f"{got[0]:,} to {got[-1]:,}"
    who = "the subscriber" if len(tallies[0].got) == 1 else "each subscriber"
    return f"{who} got {counts} of {count:,} updates in each run"
