"""Restore negotiation, docs/restore.md, as pure functions: what to send next, and what a failure means.

Rules of this file:
- Everything that decides how a saved ACP session is brought back lives here, and nothing else.
- No I/O: the inputs are the profile's flags, the saved token, what `initialize` advertised (its sign-in
  methods too) and the attempts made so far; the output is the next call to make (an `authenticate`
  included) or the final outcome.
- It does not know which agent it talks to or how; `acp.session_setup` performs the steps.
- A situation the rules do not cover raises instead of being guessed at.

Rows (see the tables in docs/restore.md):
  R1  native resume + token + `sessionCapabilities.resume`      -> session/resume
  R2  R1 answered -32601, `loadSession` advertised, not cancelled -> session/load (same id)
  R3  native resume + token, no resume but `loadSession`         -> session/load
  R3' native resume + token, neither advertised                  -> nothing sent; unsupported -> session/new
  R4  no native resume, or no token                              -> session/new
  AU1 a sign-in method is named (the owner's or the profile's)   -> authenticate, before the first call
  AU2 a call answered -32000, none sent yet, a method chosen     -> authenticate, then the same call once more
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .auth import choose_auth_method
from .errors import AUTH_REQUIRED, METHOD_NOT_FOUND, REQUEST_CANCELLED, RESOURCE_NOT_FOUND
from .models import AuthMethod


class RestoreMethod(StrEnum):
    RESUME = "session/resume"
    LOAD = "session/load"
    NEW = "session/new"


class FailureClass(StrEnum):
    UNSUPPORTED = "unsupported"
    UNKNOWN_SESSION = "unknown_session"
    TRANSPORT = "transport"
    AUTHENTICATION = "authentication"
    CANCELLATION = "cancellation"
    INCONCLUSIVE = "inconclusive"


# Only these two mean "the agent cannot give this session back"; every other class keeps the token.
FALLBACK_CLASSES = frozenset({FailureClass.UNSUPPORTED, FailureClass.UNKNOWN_SESSION})


class Outcome(StrEnum):
    RESTORED = "restored"  # the agent has the saved session again (resume or load)
    NEW = "new"  # a plain start: no restore was wanted (R4)
    FALLBACK_NEW = "fallback_new"  # the agent no longer knew the session; a fresh one replaced it
    PRESERVED = "preserved"  # the restore failed in a way that keeps the saved identity
    FAILED = "failed"  # a plain start (R4) could not create a session


class FailureKind(StrEnum):
    ERROR = "error"  # the agent answered a JSON-RPC error
    TRANSPORT = "transport"  # process exited, pipe closed
    TIMEOUT = "timeout"  # no answer in time
    CANCELLED = "cancelled"  # the gateway cancelled the restore


@dataclass(frozen=True)
class RestoreInputs:
    native_session_resume: bool
    resume_token: str | None
    advertises_resume: bool
    advertises_load: bool

    @property
    def wants_restore(self) -> bool:
        return self.native_session_resume and bool(self.resume_token)


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    code: int | None = None
    message: str = ""
    data: Any = None
    auth_tried: bool = False


@dataclass(frozen=True)
class RestoreAttempt:
    method: RestoreMethod
    failure: Failure | None = None  # None: the call succeeded

    @property
    def succeeded(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class Call:
    """Send `method` next. `fallback` is set when this `session/new` replaces a lost session."""

    method: RestoreMethod
    rule: str
    fallback: FailureClass | None = None


@dataclass(frozen=True)
class Finished:
    outcome: Outcome
    failure_class: FailureClass | None = None
    rule: str = ""


Step = Call | Finished


@dataclass(frozen=True)
class Authenticate:
    """Send `authenticate` with `method_id` (AU1: before the first call; AU2: then the call that asked, once more)."""

    method_id: str
    rule: str


def initial_call(inputs: RestoreInputs) -> Call:
    """The first row of §3.1 that applies (R1, R3, R3' or R4)."""
    if not inputs.wants_restore:
        return Call(RestoreMethod.NEW, "R4")
    if inputs.advertises_resume:
        return Call(RestoreMethod.RESUME, "R1")
    if inputs.advertises_load:
        return Call(RestoreMethod.LOAD, "R3")
    return Call(RestoreMethod.NEW, "R3'", fallback=FailureClass.UNSUPPORTED)


def plan_name(inputs: RestoreInputs) -> str:
    """The plan as reported to users: "resume", "load" or "new"."""
    words = {RestoreMethod.RESUME: "resume", RestoreMethod.LOAD: "load", RestoreMethod.NEW: "new"}
    return words[initial_call(inputs).method]


def plan_restore(inputs: RestoreInputs, attempts: tuple[RestoreAttempt, ...] = (), cancelled: bool = False) -> Step:
    """The next step of the negotiation, given everything attempted so far (in order)."""
    step: Step = initial_call(inputs)
    for index, attempt in enumerate(attempts):
        if not isinstance(step, Call):
            raise ValueError(f"attempt {index} ({attempt.method}) made after the negotiation finished")
        if attempt.method != step.method:
            raise ValueError(f"attempt {index} sent {attempt.method}, the plan was {step.method}")
        step = _after(inputs, step, attempt, attempts[:index], cancelled)
    return step


def _after(inputs: RestoreInputs, call: Call, attempt: RestoreAttempt, earlier: tuple[RestoreAttempt, ...],
           cancelled: bool) -> Step:
    failure = attempt.failure
    if call.method is RestoreMethod.NEW:
        if failure is None:
            if call.fallback is not None:
                return Finished(Outcome.FALLBACK_NEW, call.fallback, call.rule)
            return Finished(Outcome.NEW, None, call.rule)
        # The fresh session could not be created. A token we meant to restore is kept.
        cls = classify_restore_failure(failure, token=inputs.resume_token, cancelled=cancelled)
        if inputs.wants_restore:
            return Finished(Outcome.PRESERVED, cls, call.rule)
        return Finished(Outcome.FAILED, cls, call.rule)
    if failure is None:
        return Finished(Outcome.RESTORED, None, call.rule)
    load_tried = any(a.method is RestoreMethod.LOAD for a in earlier)
    if (
        call.method is RestoreMethod.RESUME
        and failure.kind is FailureKind.ERROR
        and failure.code == METHOD_NOT_FOUND
        and inputs.advertises_load
        and not cancelled
        and not load_tried
    ):
        return Call(RestoreMethod.LOAD, "R2")
    cls = classify_restore_failure(failure, token=inputs.resume_token, cancelled=cancelled)
    if cls in FALLBACK_CLASSES:
        return Call(RestoreMethod.NEW, call.rule, fallback=cls)
    return Finished(Outcome.PRESERVED, cls, call.rule)


def authenticate_first(named: str | None) -> Authenticate | None:
    """AU1: the method the owner chose for the session, else the profile's `auth_method`, is sent before the first
    call; None when neither names one. What it answers is kept to tell; the calls go on either way."""
    return Authenticate(named, "AU1") if named else None


def authenticate_then_retry(code: int | None, auth_tried: bool, advertised: Sequence[AuthMethod],
                            named: str | None, environ: Mapping[str, str]) -> Authenticate | None:
    """AU2: a call answered `code` -32000 (authentication required) and no `authenticate` was sent yet in this
    negotiation: sign in with the named method, else the first `env_var` method whose variables are all set in the
    agent's environment (`acp.auth.choose_auth_method`: never an invented credential), then send the same call once
    more. None: the failure stands as the call's (a second -32000 included: `auth_tried` by then)."""
    if code != AUTH_REQUIRED or auth_tried:
        return None
    chosen = choose_auth_method(advertised, named, environ)
    return None if chosen is None else Authenticate(chosen, "AU2")


_NOT_FOUND = re.compile(
    r"not\s*found|unknown|no\s+rollout|does\s*n[o']t\s+exist|not\s+exist|no\s+such|missing|expired",
    re.IGNORECASE,
)
_OTHER_RESOURCE = re.compile(r"config|file|path|directory|model|mcp|server|provider", re.IGNORECASE)
_SESSION_ID_MENTION = re.compile(r"session(?:\s*id)?[\s:=\"'`]+([A-Za-z0-9][\w.\-]{5,})", re.IGNORECASE)


def _error_text(failure: Failure) -> str:
    text = failure.message or ""
    if failure.data is not None:
        try:
            text += " " + json.dumps(failure.data, default=str)
        except (TypeError, ValueError):
            text += " " + repr(failure.data)
    return text


def _names_other_resource(text: str, token: str | None) -> bool:
    """True when the error is about something other than this session (another id, a config)."""
    for match in _SESSION_ID_MENTION.finditer(text):
        if token is None or match.group(1).strip(".") != token:
            return True
    return bool(_OTHER_RESOURCE.search(text))


def classify_restore_failure(failure: Failure, *, token: str | None, cancelled: bool = False) -> FailureClass:
    """The class of §3.1's failure table for one failed restore call.

    `-32601` is "unsupported": the planner has already tried R2 (load) where it applies, so by the
    time a -32601 is classified no further fallback exists.
    """
    if cancelled or failure.kind is FailureKind.CANCELLED:
        return FailureClass.CANCELLATION
    if failure.kind in (FailureKind.TRANSPORT, FailureKind.TIMEOUT):
        return FailureClass.TRANSPORT
    code = failure.code
    if code == REQUEST_CANCELLED:
        return FailureClass.CANCELLATION
    if code == AUTH_REQUIRED:
        return FailureClass.AUTHENTICATION
    if code == METHOD_NOT_FOUND:
        return FailureClass.UNSUPPORTED
    text = _error_text(failure)
    names_token = token is not None and token != "" and token in text
    if code == RESOURCE_NOT_FOUND:
        if names_token or not _names_other_resource(text, token):
            return FailureClass.UNKNOWN_SESSION
        return FailureClass.INCONCLUSIVE
    if names_token and _NOT_FOUND.search(text):
        return FailureClass.UNKNOWN_SESSION
    return FailureClass.INCONCLUSIVE
