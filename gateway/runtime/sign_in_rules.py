"""Whether a person's sign-in (`task.session.authenticate`) may go ahead, and what a failed login program tells them:
a pure decision by table (rule ids SI-n, shared by `manager.py`, docs/architecture.md and
tests/gateway/runtime/test_sign_in.py).
The manager gathers the facts and performs what is decided: an `env_var` method's values kept for the owner's
agents of the profile, an `agent` method chosen for the session, a `terminal` method's login program run.

- SI-1 the session's agent runs on this node: it asks for no sign-in (refused, `method_id`).
- SI-2 the session's `config.auth` is null: its agent asked for none; a resume is what it needs (`method_id`).
- SI-3 the method is not one the agent offered, or the values are not what it takes (`acp.auth.sign_in_refusal`).
- SI-4 a variable it would set (an `env_var` method's values, a `terminal` method's env) may not be set for this
  agent (`spawn_env.refusal`: ENV-3, ENV-5), `values`.
- SI-5 the method is of a kind this gateway does not know (`method_id`).
- otherwise the sign-in goes ahead, with the method as `config.auth` describes it.
- SI-6 a `terminal` method's login program that did not exit 0 fails the sign-in, saying how it ended.

Whether an owner's agent is signed in (`auth_state` in `gateway.info`; rule ids AS-n), from what is known of it:
- AS-1 the agent answered one of the owner's sessions `auth_required` (or "Authentication required") since the
  owner last signed it in: `needs_sign_in`.
- AS-2 a variable that signs it in is set, in its profile's env or among the values the owner gave it: `signed_in`.
- AS-3 the owner signed it in with a method, or it answered one of their turns: `signed_in`.
- AS-4 the gateway knows variables that sign it in (its profile's `sign_in_vars`, its registry entry's) and none is
  set: `needs_sign_in`.
- AS-5 otherwise what its install's probe found (null for an agent not installed from the registry).

And whether an agent's error asks for a sign-in (`asks_sign_in`): ACP's `auth_required` (-32000), or any error whose
message says "Authentication required" (agents that answer it under another code), at any call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acp.auth import sign_in_refusal
from acp.errors import AUTH_REQUIRED

from .spawn_env import Source, refusal

KINDS = ("env_var", "agent", "terminal")  # the kinds of sign-in the manager performs


@dataclass(frozen=True)
class SignInFacts:
    session_id: str
    agent: str
    running: bool  # the session's agent runs on this node now
    auth: Mapping[str, Any] | None  # the session's `config.auth`: the methods its agent offered, when it asked
    method_id: str
    values: Mapping[str, str] | None
    confined: bool  # the agent runs in a sandbox (outside one, ENV-3 refuses more names)


@dataclass(frozen=True)
class SignInRefused:
    rule: str
    field: str  # the parameter at fault
    message: str


def sign_in_decision(facts: SignInFacts) -> SignInRefused | Mapping[str, Any]:
    """SI-1…5: why the sign-in may not go ahead, or the method to sign in with (one of `config.auth`'s)."""
    sid, method_id = facts.session_id, facts.method_id
    if facts.running:
        return SignInRefused("SI-1", "method_id", f"the agent of session {sid} is running: it asks for no sign-in")
    if facts.auth is None:
        return SignInRefused("SI-2", "method_id", f"the agent of session {sid} asks for no sign-in (config.auth is "
                             "null): resume the session instead")
    methods = facts.auth.get("methods") or []
    refused = sign_in_refusal(methods, method_id, facts.values)
    if refused is not None:
        return SignInRefused("SI-3", refused[0], f"session {sid}: {refused[1]}")
    method: Mapping[str, Any] = next(m for m in methods if m.get("id") == method_id)
    given = method.get("env") if method["kind"] == "terminal" else facts.values
    refused_env = refusal(((str(k), str(v)) for k, v in (given or {}).items()), Source.SIGN_IN, facts.confined)
    if refused_env is not None:
        return SignInRefused("SI-4", "values", f"session {sid}, agent {facts.agent!r}, sign-in method {method_id!r}: "
                             f"{refused_env}")
    if method["kind"] not in KINDS:
        return SignInRefused("SI-5", "method_id", f"method {method_id!r} is a {method['kind']} sign-in, a kind this "
                             "gateway does not know: choose another method")
    return method


def login_failure(status: Mapping[str, Any], agent: str, method_name: str) -> str | None:
    """SI-6: why a `terminal` sign-in failed, from its login program's exit status; None when it exited 0."""
    if status.get("exitCode") == 0:
        return None
    how = (f"exit code {status['exitCode']}" if status.get("exitCode") is not None
           else f"killed by {status.get('signal')}")
    return (f"the sign-in of agent {agent!r} ({method_name}) ended with {how}: its output is in the session's "
            "terminal events; sign in again, or choose another method")


SIGNED_IN, NEEDS_SIGN_IN = "signed_in", "needs_sign_in"


@dataclass(frozen=True)
class AuthFacts:
    required: tuple[str, ...]  # the variables the gateway knows sign the agent in (AS-4)
    given: tuple[str, ...]  # which variables that sign it in are set for the owner (AS-2)
    agent_said: str | None  # SIGNED_IN or NEEDS_SIGN_IN: the last the agent told of this owner (AS-1, AS-3)
    probed: str | None  # its install's probe's `auth_state` (AS-5)


def auth_state(facts: AuthFacts) -> tuple[str, str | None]:
    """AS-1…5: (the rule, the owner's agent's `auth_state`)."""
    if facts.agent_said == NEEDS_SIGN_IN:
        return "AS-1", NEEDS_SIGN_IN
    if facts.given:
        return "AS-2", SIGNED_IN
    if facts.agent_said == SIGNED_IN:
        return "AS-3", SIGNED_IN
    if facts.required:
        return "AS-4", NEEDS_SIGN_IN
    return "AS-5", facts.probed


def asks_sign_in(code: int | None, message: str | None) -> bool:
    """An agent's error that asks for a sign-in: `auth_required`, or words saying authentication is required."""
    return code == AUTH_REQUIRED or "authentication required" in (message or "").lower()
