"""How many of a peer's requests may wait for their answers at once, and how many bytes of them: a request
past either is answered at once with an error (LIMIT_EXCEEDED) and nothing of it is kept. Budgets chain — a
session's within its owner's — so one agent asking thousands of questions at once neither grows the gateway's
memory nor holds anyone else's calls up (a flood of 6,000 held requests once grew it by 360 MB and stalled another
owner's calls for seconds). Pure bookkeeping: `acp.jsonrpc` takes and gives, the gateway sizes them.

Refusals are paced (`refusal_rate`): an agent that keeps asking past its budget has what it sends read no faster
than that many refusals a second; the rest waits in its own pipe, not in the gateway. Answering 3,000 questions
at once with errors kept the gateway's loop busy for 170 ms, another owner's p99 6-9x its idle one meanwhile."""

from __future__ import annotations

from dataclasses import dataclass, field


class ByteRate:
    """A token bucket: how long a reader waits before it reads on, so that what it takes over time stays under
    `rate` units a second (bytes of a terminal's output, an agent's refused requests), with a burst of `burst` (a
    second's worth unless given). A command flooding its output (`yes`) is read at that pace, its pipe fills and it
    blocks, instead of taking the event loop. Pure: the caller gives the time."""

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.burst = rate if burst is None else burst
        self.tokens = self.burst
        self.last: float | None = None

    def delay(self, now: float, nbytes: int) -> float:
        """Seconds to wait after taking `nbytes` at `now`; 0 while under the rate."""
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= nbytes
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


@dataclass
class RequestBudget:
    count: int  # requests that may wait at once
    nbytes: int  # bytes of them (their JSON-RPC lines, as read) that may be held at once
    what: str  # whose budget, for the error: "session s-…", "owner alice"
    setting: str  # the setting that sizes it, for the error
    parent: RequestBudget | None = None
    taken: int = field(default=0)
    taken_bytes: int = field(default=0)
    refusal_rate: float = 0.0  # refusals a second past which reading the peer waits (0: never)
    _refusals: ByteRate | None = field(default=None, repr=False)

    def paced(self, now: float, refusals: int) -> float:
        """Seconds the peer's reader waits after `refusals` at `now` (0 while under the rate), this budget's and its
        parents' (an owner's agents together)."""
        if not refusals:
            return 0.0
        delay = 0.0
        if self.refusal_rate:
            if self._refusals is None:
                self._refusals = ByteRate(self.refusal_rate, burst=max(1.0, self.refusal_rate / 10))
            delay = self._refusals.delay(now, refusals)
        return max(delay, self.parent.paced(now, refusals)) if self.parent is not None else delay

    def refusal(self, size: int) -> str | None:
        """Why a request of `size` bytes may not wait now (this budget's or a parent's), or None."""
        if self.taken + 1 > self.count:
            return (f"{self.what} has {self.taken} requests waiting for answers, its limit ({self.setting} = "
                    f"{self.count}): answer or withdraw some first")
        if self.taken_bytes + size > self.nbytes:
            return (f"{self.what} has {self.taken_bytes} bytes of requests waiting for answers, and this one "
                    f"({size}) would pass its limit ({self.setting}_bytes = {self.nbytes})")
        return self.parent.refusal(size) if self.parent is not None else None

    def take(self, size: int) -> str | None:
        """Reserve a request of `size` bytes here and in every parent; the refusal instead when it may not wait."""
        refused = self.refusal(size)
        if refused is not None:
            return refused
        budget: RequestBudget | None = self
        while budget is not None:
            budget.taken += 1
            budget.taken_bytes += size
            budget = budget.parent
        return None

    def give(self, size: int) -> None:
        """The request was answered (or withdrawn, or its peer went): its place is free again."""
        budget: RequestBudget | None = self
        while budget is not None:
            budget.taken -= 1
            budget.taken_bytes -= size
            budget = budget.parent
