"""Whether a client that promised heartbeats is still there: a pure rule, time is an input.

A client says how often it will ping (`gateway.ping {heartbeat}`); a connection that then sends nothing at all for
MISSES_ALLOWED of those intervals is gone, whatever TCP says (a link that silently stops delivering keeps a socket
open for minutes), and the gateway stops spending on it: its subscriptions end and its socket is closed.
"""

from __future__ import annotations

from dataclasses import dataclass

MISSES_ALLOWED = 3  # one more than a client's own deadline (2 intervals), so a live client always reconnects first
CLOSE_CODE = 4408  # the WebSocket close code of a connection that missed its heartbeats


@dataclass
class Liveness:
    heard_at: float
    interval: float | None = None  # seconds; None: the client promised nothing

    def heard(self, now: float) -> None:
        self.heard_at = now

    def promise(self, interval: float | None, now: float) -> None:
        self.interval = interval
        self.heard_at = now

    def overdue(self, now: float) -> bool:
        return self.interval is not None and now - self.heard_at > MISSES_ALLOWED * self.interval

    def next_check(self, now: float) -> float | None:
        """Seconds until the connection would be overdue if nothing arrives; None when nothing was promised."""
        if self.interval is None:
            return None
        return max(0.0, self.heard_at + MISSES_ALLOWED * self.interval - now) + 0.001

    def reason(self) -> str:
        return f"no heartbeat for {MISSES_ALLOWED} x {self.interval:g} s"
