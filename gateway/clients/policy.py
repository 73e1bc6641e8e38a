"""The owner-session client's rules (docs/architecture.md: The clients) as pure pieces: time and randomness are inputs.

Both clients follow these numbers and this link table: the Python library (`gateway.clients.client`) and the
TypeScript package (`clients/typescript`, whose `src/generated/policy.ts` is generated from this module, and which the
web UI runs on). docs/clients.md says what they guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

RECONCILE_INTERVAL = 60.0  # a full task.session.list this often...
RECONCILE_JITTER = 15.0  # ...plus up to this much, so clients do not stampede
HEALTH_SAMPLE_INTERVAL = 5.0
DEGRADED_AFTER_SAMPLES = 9  # samples in a row without a live stream
MALFORMED_LIMIT = 5  # malformed events before an immediate reconciliation
BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
HEARTBEAT_INTERVAL = 5.0  # a client pings this often; silent for SILENT_AFTER of them, the link is dead
SILENT_AFTER = 2  # intervals without a frame (a pong, an event, anything) before the link counts as degraded


class Link(StrEnum):
    """Where a client's link to the gateway is. What a person watching should be told."""

    CONNECTING = "connecting"  # opening a connection (the first, or after a backoff)
    LIVE = "live"  # subscribed; frames arrive
    DEGRADED = "degraded"  # the connection is open but nothing arrived for SILENT_AFTER heartbeat intervals
    RECONNECTING = "reconnecting"  # the connection is gone; the next one waits for its backoff
    CLOSED = "closed"  # the client was closed


class LinkEvent(StrEnum):
    CONNECTED = "connected"  # the connection is open and subscribed
    SILENT = "silent"  # no frame for SILENT_AFTER heartbeat intervals
    HEARD = "heard"  # a frame arrived
    LOST = "lost"  # the connection closed, failed to open, or was given up as silent
    RETRY = "retry"  # the backoff is over: connect again
    CLOSE = "close"  # the client's owner closed it, or the gateway refused its handshake (refused_for_good)


# (state, event) -> next state. Any pair not here is a bug in the client (IllegalLinkTransition), except CLOSE,
# which every state takes. A silent link is given up at once (the client then aborts the socket: LOST), so DEGRADED
# is brief unless the socket will not die; HEARD in DEGRADED is a frame that arrived in between.
LINK_TRANSITIONS: dict[tuple[Link, LinkEvent], Link] = {
    (Link.CONNECTING, LinkEvent.CONNECTED): Link.LIVE,
    (Link.CONNECTING, LinkEvent.LOST): Link.RECONNECTING,
    (Link.LIVE, LinkEvent.HEARD): Link.LIVE,
    (Link.LIVE, LinkEvent.SILENT): Link.DEGRADED,
    (Link.LIVE, LinkEvent.LOST): Link.RECONNECTING,
    (Link.DEGRADED, LinkEvent.HEARD): Link.LIVE,
    (Link.DEGRADED, LinkEvent.LOST): Link.RECONNECTING,
    (Link.RECONNECTING, LinkEvent.RETRY): Link.CONNECTING,
}


class IllegalLinkTransition(Exception):
    pass


def next_link(state: Link, event: LinkEvent) -> Link:
    if event is LinkEvent.CLOSE:
        return Link.CLOSED
    try:
        return LINK_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalLinkTransition(f"{event.value} in {state.value}") from None


# HTTP answers to the WebSocket handshake that no retry would change: the token (401: missing or not one of the
# gateway's) or the page's Origin (403). Every other failure (the gateway down, 429 for too many connections, a cut
# link) is retried with backoff. The TypeScript client's src/policy.ts holds the same set.
REFUSED_STATUSES = frozenset({401, 403})

TOKEN_HELP = ("Set ACP_GATEWAY_TOKEN (the client's token) to one of the gateway's tokens: the one `acp-gateway serve` "
              "printed at its first start and keeps in its state directory's `token` file, or one given to it "
              "(--token, ACP_GATEWAY_TOKEN or [[auth.tokens]] in its configuration). The client does not retry it.")


def refused_for_good(status: int) -> bool:
    """Whether a handshake the gateway answered with HTTP `status` is final: the client closes, saying why."""
    return status in REFUSED_STATUSES


def refusal_message(url: str, status: int, token_given: bool) -> str:
    """What a client says when the gateway refused its handshake: which token problem and how to fix it, never the
    token (the URL is shown without its query, where a browser's token travels, and without user information)."""
    parts = urlsplit(url)
    token_given = token_given or "token" in parse_qs(parts.query)
    where = urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
    if status == 403:
        return (f"the gateway at {where} refused the connection (HTTP 403): the page's Origin is not allowed; a "
                "browser page must come from the gateway itself or from an origin in its `allowed_origins`. The "
                "client does not retry it.")
    if not token_given:
        return f"the gateway at {where} refused the connection (HTTP {status}): no token was given. {TOKEN_HELP}"
    return (f"the gateway at {where} refused the token (HTTP {status}): it is not one of the gateway's tokens. "
            f"{TOKEN_HELP}")


def silence_deadline(heard_at: float, interval: float) -> float:
    """When a link last heard from at `heard_at` counts as silent."""
    return heard_at + SILENT_AFTER * interval


def next_reconcile_delay(rand: float) -> float:
    """`rand` in [0, 1): 60 s plus up to 15 s of jitter."""
    return RECONCILE_INTERVAL + RECONCILE_JITTER * rand


def backoff_delay(attempt: int, rand: float, cap: float = BACKOFF_CAP) -> float:
    """Exponential backoff with jitter: attempt 0 waits 0.25–0.5 s, doubling up to a cap/2–cap wait (15–30 s)."""
    ceiling: float = min(cap, BACKOFF_BASE * (2.0 ** min(max(attempt, 0), 30)))
    return ceiling * (0.5 + rand / 2)


@dataclass
class StreamHealth:
    misses: int = 0

    def sample(self, live: bool) -> bool:
        """Record one sample; returns whether the stream is now degraded."""
        self.misses = 0 if live else self.misses + 1
        return self.degraded

    @property
    def degraded(self) -> bool:
        return self.misses >= DEGRADED_AFTER_SAMPLES


@dataclass
class MalformedCounter:
    count: int = 0

    def note(self) -> bool:
        """One more malformed event; True when it is time to reconcile (and the count starts over)."""
        self.count += 1
        if self.count >= MALFORMED_LIMIT:
            self.count = 0
            return True
        return False


@dataclass
class AutoResumeGuard:
    """Auto-resume a viewed session at most once per view."""

    attempted: set[str] = field(default_factory=set)
    view: str | None = None

    def open_view(self, session_id: str) -> None:
        if self.view != session_id:
            self.view = session_id
            self.attempted.discard(session_id)

    def should_resume(self, session_id: str, status: dict[str, Any]) -> bool:
        if session_id != self.view or session_id in self.attempted:
            return False
        if status.get("needs_resume") and status.get("is_resumable"):
            self.attempted.add(session_id)
            return True
        return False


def is_valid_event(params: Any) -> bool:
    """The shape of `task.session.event` params; anything else counts as malformed."""
    return (isinstance(params, dict) and isinstance(params.get("type"), str)
            and (params.get("id") is None or (isinstance(params.get("id"), int)
                                              and not isinstance(params.get("id"), bool)))
            and isinstance(params.get("data"), dict))
