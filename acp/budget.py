"""How many of a peer's requests may wait for their answers at once, and how many bytes of them: a request
past either is answered at once with an error (LIMIT_EXCEEDED) and nothing of it is kept. Budgets chain — a
session's within its owner's — so one agent asking thousands of questions at once neither grows the gateway's
memory nor holds anyone else's calls up (a flood of 6,000 held requests once grew it by 360 MB and stalled another
owner's calls for seconds). Pure bookkeeping: `acp.jsonrpc` takes and gives, the gateway sizes them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RequestBudget:
    count: int  # requests that may wait at once
    nbytes: int  # bytes of them (their JSON-RPC lines, as read) that may be held at once
    what: str  # whose budget, for the error: "session s-…", "owner alice"
    setting: str  # the setting that sizes it, for the error
    parent: RequestBudget | None = None
    taken: int = field(default=0)
    taken_bytes: int = field(default=0)

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
