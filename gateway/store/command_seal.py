"""Forwarded commands, sealed: a node runs a command another node put in the database only when its MAC (made with
the cluster secret from the configuration) verifies, it has not expired, and it was not run before.

Without this, anyone who can write to the `commands` table — an agent that read the store's URL, say — could have
the lease holder run `set_title` or `prompt` "as" any owner. The seal covers everything the command says: its id,
the node it is for and the node it is from, the request (owner, session, method, arguments) as stored, and its
expiry. Pure: `seal` and `judge` are functions of their arguments; `SeenCommands` is the replay memory, bounded by
the expiry (an id is forgotten once its command could no longer verify anyway).

Answers are sealed too (`seal_answer`): over the command's id, the node that ran it, the node that asked and the
answer as stored, under a label of their own (an answer's MAC can never pass for a command's). A caller believes an
answer only when it verifies: an `UPDATE commands SET answer = …` by anyone else never reaches a caller as real.
A command may be sealed to expire no further ahead than `TTL` (and a little for clocks): one sealed for later is
refused like an expired one.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from enum import StrEnum

import orjson

TTL = 60.0  # seconds a command may wait to be claimed: claims take milliseconds; clocks of nodes may differ a little
CLOCK_SLACK = 5.0  # how far ahead of the judge's clock a sender's may be (nodes refuse to run further off: cluster.py)


class SealRefusal(StrEnum):
    NO_MAC = "no_mac"
    BAD_MAC = "bad_mac"
    EXPIRED = "expired"
    REPLAYED = "replayed"
    TOO_LONG = "too_long"  # sealed to expire further ahead than any node seals (a forger's, or a clock far off)


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
          expires_at: float | None, now: float, seen: SeenCommands) -> SealRefusal | None:
    """None when the command may run (and it is remembered as run); else why not."""
    if not mac or expires_at is None:
        return SealRefusal.NO_MAC
    if not hmac.compare_digest(mac, seal(secret, command_id, target, sender, request, expires_at)):
        return SealRefusal.BAD_MAC
    if expires_at < now:
        return SealRefusal.EXPIRED
    if expires_at > now + TTL + CLOCK_SLACK:
        return SealRefusal.TOO_LONG
    seen.forget_expired(now)
    if command_id in seen.until:
        return SealRefusal.REPLAYED
    seen.until[command_id] = expires_at
    return None


def key_check(secret: bytes) -> str:
    """A value every node with `secret` computes alike and nobody can turn back into it: written in the database
    by the first node, compared by each that starts."""
    return hmac.new(secret, b"acp-gateway key check v1", hashlib.sha256).hexdigest()


def seal_answer(secret: bytes, command_id: str, runner: str, sender: str, answer: str) -> str:
    """HMAC-SHA256 over an answer's canonical form, labelled so no command's MAC is ever an answer's."""
    message = orjson.dumps(["answer v1", command_id, runner, sender, answer])
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def answer_verifies(secret: bytes, command_id: str, runner: str, sender: str, answer: str, mac: str | None) -> bool:
    return bool(mac) and hmac.compare_digest(str(mac), seal_answer(secret, command_id, runner, sender, answer))
