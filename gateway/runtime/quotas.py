"""Per-owner quotas on what is stored, and on how fast sessions start: no owner fills the shared store for the others.

Every owner may hold at most `max_sessions_per_owner` stored sessions and `max_history_bytes_per_owner` bytes of
history, and start at most `max_starts_per_minute_per_owner` sessions a minute (a failed start still stores a
session). The journal is bounded per owner by `event_retention_bytes` already (it prunes the oldest). With
`store_max_bytes` set, no owner's share may exceed half of it for history and a quarter for its journal
(`Quotas.within_store`), so a quarter of the store stays for the others whatever one owner does.

The decisions are pure (`Quotas.refusal`, `StartRate.take`, fed with figures and a clock); `Usage` keeps the
figures: each owner's stored sessions and history bytes are read from the store once, then kept current with what
this gateway writes (a cluster node re-reads them every `REREAD_AFTER` seconds, to count the other nodes' writes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import GatewayError, limit_exceeded
from ..store import StoreBase

REREAD_AFTER = 300.0  # seconds before an owner's figures are read from the store again


@dataclass(frozen=True)
class Quotas:
    max_sessions: int = 1000
    max_history_bytes: int = 1 << 30
    starts_per_minute: int = 60

    def within_store(self, store_max_bytes: int) -> Quotas:
        """With a capped store, at most half of it for one owner's history (a quarter goes to its journal)."""
        if not store_max_bytes:
            return self
        return Quotas(self.max_sessions, min(self.max_history_bytes, store_max_bytes // 2), self.starts_per_minute)

    def refusal(self, sessions: int, history_bytes: int, *, starting: bool) -> GatewayError | None:
        """-32014 when an owner with these figures may not start a session (`starting`) or a turn, else None."""
        if starting and sessions >= self.max_sessions:
            return limit_exceeded(self.max_sessions, f"{sessions} stored sessions already (max_sessions_per_owner = "
                                  f"{self.max_sessions}): delete sessions you no longer need (task.session.delete, "
                                  "acp-gateway delete), then start again", "max_sessions_per_owner")
        if history_bytes >= self.max_history_bytes:
            return limit_exceeded(self.max_history_bytes, f"your sessions' history holds {history_bytes} bytes "
                                  f"(max_history_bytes_per_owner = {self.max_history_bytes}): delete sessions you no "
                                  "longer need, then try again", "max_history_bytes_per_owner")
        return None


def journal_share(retention_bytes: int, store_max_bytes: int) -> int:
    """An owner's journal bytes: its retention, and with a capped store at most a quarter of it."""
    return min(retention_bytes, store_max_bytes // 4) if store_max_bytes else retention_bytes


@dataclass
class StartRate:
    """A token bucket per owner: `per_minute` starts, refilled evenly; a burst of up to `per_minute` at once."""

    per_minute: int
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)  # owner -> (tokens, at)

    def take(self, owner: str, now: float) -> float | None:
        """Take one start for `owner` at `now` (seconds): None when allowed, else how long until one is."""
        tokens, at = self._buckets.get(owner, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60.0)
        if tokens < 1.0:
            self._buckets[owner] = (tokens, now)
            return (1.0 - tokens) * 60.0 / self.per_minute
        self._buckets[owner] = (tokens - 1.0, now)
        return None


@dataclass
class _Figures:
    sessions: int
    history_bytes: int
    read_at: float


class Usage:
    """Each owner's stored sessions and history bytes, as the quotas need them."""

    def __init__(self, store: StoreBase, quotas: Quotas, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.quotas = quotas
        self.rate = StartRate(quotas.starts_per_minute)
        self._clock = clock
        self._figures: dict[str, _Figures] = {}

    async def _of(self, owner: str) -> _Figures:
        known = self._figures.get(owner)
        if known is None or self._clock() - known.read_at > REREAD_AFTER:
            known = self._figures[owner] = _Figures(await self.store.sessions.count(owner),
                                                    await self.store.sessions.history_bytes(owner), self._clock())
        return known

    async def check_start(self, owner: str) -> None:
        """Before a session is created: the owner's start rate, stored sessions and history (-32014)."""
        figures = await self._of(owner)
        refused = self.quotas.refusal(figures.sessions, figures.history_bytes, starting=True)
        if refused is not None:
            raise refused
        wait = self.rate.take(owner, self._clock())
        if wait is not None:
            per_minute = self.quotas.starts_per_minute
            raise limit_exceeded(per_minute, f"more than {per_minute} session starts in a minute "
                                 f"(max_starts_per_minute_per_owner): try again in {wait:.1f}s",
                                 "max_starts_per_minute_per_owner", retry_after=wait)

    async def check_turn(self, owner: str) -> None:
        """Before a turn is started: the owner's history (-32014)."""
        figures = await self._of(owner)
        refused = self.quotas.refusal(figures.sessions, figures.history_bytes, starting=False)
        if refused is not None:
            raise refused

    def created(self, owner: str) -> None:
        if owner in self._figures:
            self._figures[owner].sessions += 1

    def wrote_history(self, owner: str, nbytes: int) -> None:
        if owner in self._figures:
            self._figures[owner].history_bytes += nbytes

    def deleted(self, owner: str) -> None:
        """A session of `owner` went, with its history: its figures are read again when next needed."""
        self._figures.pop(owner, None)
