"""What the key proxy decides, as pure functions of a request (rule ids KEY-1…6, shared by the code, docs/security.md
and tests/gateway/runtime/test_key_rules.py): which stand-in a request carries, and the upstream request that
carries the real key.

KEY-1  A stand-in is found in the credential headers (`authorization: Bearer …`, `x-api-key`, `x-goog-api-key`,
       `api-key`) or the `key` query parameter; a request without one is refused (401).
KEY-2  The upstream URL is the grant's upstream with the request's path and query appended; a path that does not
       start with `/` (an absolute or authority form) is refused (400): the host is never the agent's to choose.
KEY-3  Every credential header and the `key` parameter the agent sent is dropped; the real key goes in the grant's
       header only (`authorization` as `Bearer KEY`).
KEY-4  Hop-by-hop headers (RFC 9110 §7.6.1), `host`, `content-length`, and the headers a proxy must not forward
       (`forwarded`, `x-forwarded-*`, `proxy-*`, `cookie`) are dropped both ways; the rest pass unchanged.
KEY-5  A stand-in the proxy does not know (never granted, or its agent has exited) is refused (401), naming no key.
KEY-6  What the proxy says of a refusal or of an unreachable upstream never holds a key or a stand-in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit

from agents.brokered import HEADERS

STAND_IN_PREFIX = "acpgw-standin-"
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "host", "content-length", "forwarded", "cookie", "set-cookie",
                        "proxy-authorization", "proxy-authenticate"})
UNFORWARDED_PREFIXES = ("x-forwarded-", "proxy-")


class Refused(Exception):
    """A request the proxy will not forward: its HTTP status and what to say (never a key)."""

    def __init__(self, status: int, rule: str, message: str) -> None:
        super().__init__(message)
        self.status, self.rule, self.message = status, rule, message


@dataclass(frozen=True)
class Upstream:
    """Where the proxy sends a request and with which headers."""

    url: str
    headers: tuple[tuple[str, str], ...]


def stand_in_of(headers: Iterable[tuple[str, str]], target: str) -> str:
    """KEY-1: the stand-in a request carries (request-target `target`), else Refused."""
    for name, value in headers:
        name = name.lower()
        if name in HEADERS:
            value = value.strip()
            if name == "authorization" and value[:7].lower() == "bearer ":
                value = value[7:].strip()
            if value.startswith(STAND_IN_PREFIX):
                return value
    for name, value in parse_qsl(urlsplit(target).query, keep_blank_values=True):
        if name == "key" and value.startswith(STAND_IN_PREFIX):
            return value
    raise Refused(401, "KEY-1", "no stand-in key on the request: send the key the gateway gave this agent "
                                "(its API-key variable) as the API expects")


def forwarded(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """KEY-4 (and KEY-3 for requests): the headers that pass, in order."""
    return [(name, value) for name, value in headers
            if (low := name.lower()) not in HOP_BY_HOP and not low.startswith(UNFORWARDED_PREFIXES)
            and low not in HEADERS]


def upstream_request(upstream: str, header: str, real_key: str, target: str,
                     headers: Iterable[tuple[str, str]]) -> Upstream:
    """KEY-2…4: the request to send upstream for request-target `target` with `headers`, carrying `real_key`."""
    if not target.startswith("/") or target.startswith("//"):
        raise Refused(400, "KEY-2", "the request's target must be a path (origin form): the proxy chooses the host")
    parts = urlsplit(target)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "key"]
    base = urlsplit(upstream)
    url = f"{base.scheme}://{base.netloc}{base.path.rstrip('/')}{parts.path}" + (f"?{urlencode(query)}" if query
                                                                                   else "")
    value = f"Bearer {real_key}" if header == "authorization" else real_key
    return Upstream(url, (*forwarded(headers), (header, value)))


def response_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """KEY-4: what of the upstream's answer goes back to the agent, compressed as it came (its length and framing
    are the proxy's own)."""
    return [(name, value) for name, value in headers
            if (low := name.lower()) not in HOP_BY_HOP and not low.startswith(UNFORWARDED_PREFIXES)]
