"""Forwarded commands, sealed: a node runs a command another node put in the database only when its MAC (made with
the cluster secret from the configuration) verifies, it has not expired, and it was not run before.

Without this, anyone who can write to the `commands` table — an agent that read the store's URL, say — could have
the lease holder run `set_title` or `prompt` "as" any owner. The seal covers everything the command says: its id,
the node it is for and the node it is from, the request (owner, session, method, arguments) as stored, and its
expiry. Pure: `seal` and `judge` are functions of their arguments; `SeenCommands` is the replay memory, bounded by
the expiry (an id is forgotten once its command could no longer verify anyway).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from enum import StrEnum

import orjson

TTL = 60.0  # seconds a command may wait to be claimed: claims take milliseconds; clocks of nodes may differ a little


class Refusal(StrEnum):
    NO_MAC = "no_mac"
    BAD_MAC = "bad_mac"
    EXPIRED = "expired"
    REPLAYED = "replayed"


def seal(secret: bytes, command_id: str, target: str, sender: str, request: str, expires_at: float) -> str:
    """HMAC-SHA256 over the command's canonical form (a JSON array: no field can bleed into another)."""
    message = orjson.dumps([command_id, target, sender, request, repr(float(expires_at))])
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


@dataclass
class SeenCommands:
    """The ids of commands already run, each until its expiry."""

    until: dict[str, float] = field(default_factory=dict)

    def forget_expired(self, now: float) -> None:
        for command_id in [c for c, t in self.until.items() if t < now]:
            del self.until[command_id]


def judge(secret: bytes, command_id: str, target: str, sender: str, request: str, mac: str | None,
          expires_at: float | None, now: float, seen: SeenCommands) -> Refusal | None:
    """None when the command may run (and it is remembered as run); else why not."""
    if not mac or expires_at is None:
        return Refusal.NO_MAC
    if not hmac.compare_digest(mac, seal(secret, command_id, target, sender, request, expires_at)):
        return Refusal.BAD_MAC
    if expires_at < now:
        return Refusal.EXPIRED
    seen.forget_expired(now)
    if command_id in seen.until:
        return Refusal.REPLAYED
    seen.until[command_id] = expires_at
    return None
