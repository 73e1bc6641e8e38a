"""What a launch needs of a sign-in, decided from what it knows (pure: the launcher gathers the facts and performs
what is decided): whether the launch ended on the agent asking its person to sign in, whether a new session's agent
lacks the key the gateway knows it reads, and the words that say how to sign in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from acp.restore import FailureClass

from .sign_in_rules import asks_sign_in

if TYPE_CHECKING:  # types only: a pure module does not load the modules that perform
    from acp.session_setup import RestoreResult

    from .config import SessionConfig


def sign_in_words(session_id: str, agent: str, config: SessionConfig, reason: str) -> str:
    """What a session asking for a sign-in says: the methods, the variables to set and the command that sets them
    (the value read from stdin, never on a command line)."""
    methods = (config.auth or {}).get("methods") or []
    names = ", ".join(f"{m['name']} ({m['kind']})" for m in methods) or "none offered"
    keys = [m for m in methods if m.get("kind") == "env_var" and m.get("vars")]
    how = "".join(f" To set {', '.join(m['vars'])}: acp-gateway sign-in {session_id} {m['id']} "
                  + " ".join(f"{v}=-" for v in m["vars"]) + " (reads the value from stdin; kept write-only for your "
                  "sessions of this agent), or the web UI's sign-in." for m in keys[:1])
    return (f"agent {agent!r} asks to be signed in ({reason}); methods: {names}.{how} Sign in with "
            f"task.session.authenticate, or: acp-gateway sign-in {session_id} METHOD_ID [VAR=VALUE]")


def launch_asks_sign_in(result: RestoreResult | None, failure: Exception | None) -> bool:
    """The launch ended on an agent asking for a sign-in: the restore rules' authentication failure, or an answer
    (at initialize, session/new, a restore) whose words say authentication is required."""
    if result is not None:
        return result.failure_class is FailureClass.AUTHENTICATION or (
            result.failure_class is not None and asks_sign_in(None, result.describe_failure()))
    return failure is not None and asks_sign_in(getattr(failure, "code", None), str(failure))


@dataclass(frozen=True)
class KeyFacts:
    """What a launch knows of the key its agent reads (`missing_key`)."""

    first_launch: bool
    restoring: bool  # a saved ACP session is restored
    forked: bool
    asked: bool  # the session answers a sign-in already (`config.auth`, any method)
    required: Sequence[str]  # the variables the gateway knows the agent reads its key from
    given: Sequence[str]  # which of them the agent's environment sets
    signed_in: bool  # the agent signed the owner in with a method of its own (`AuthSeen`: SIGNED_IN)


def missing_key(facts: KeyFacts) -> str | None:
    """Why a new session's agent waits for its person to sign in before its first prompt — the gateway knows the key
    it reads, and nobody gave it —, or None: not for a restore, a fork, a session that answers a sign-in already, or
    an agent that signed the owner in with a method of its own."""
    if (not facts.first_launch or facts.restoring or facts.forked or facts.asked
            or not facts.required or facts.given or facts.signed_in):
        return None
    return (f"it reads its key from {' or '.join(facts.required)}, which is not set for you "
            f"(session/new answered without it; its prompts would fail)")
