"""docs/restore.md as tables: one row per row of the planning table, of the sign-in table and of the failure
table."""

from __future__ import annotations

import pytest

from acp.models import AuthMethod
from acp.restore import (
    Authenticate,
    Call,
    Failure,
    FailureClass,
    FailureKind,
    Finished,
    Outcome,
    RestoreAttempt,
    RestoreInputs,
    RestoreMethod,
    authenticate_first,
    authenticate_then_retry,
    classify_restore_failure,
    plan_name,
    plan_restore,
)

M = RestoreMethod
Tried = RestoreAttempt  # a call made, and how it failed (if it did)

TOKEN = "sess-1234abcd"


def inputs(native: bool = True, token: str | None = TOKEN, resume: bool = True, load: bool = True) -> RestoreInputs:
    return RestoreInputs(native_session_resume=native, resume_token=token, advertises_resume=resume,
                         advertises_load=load)


def err(code: int, message: str = "", data: object = None, auth_tried: bool = False) -> Failure:
    return Failure(FailureKind.ERROR, code, message, data, auth_tried)


NOT_FOUND = err(-32601, "Method not found")

# One row per row of the planning table (§3.1), plus the rows' boundaries.
PLAN_TABLE = [
    # rule, inputs, attempts so far, cancelled, expected next step
    ("R1", inputs(), (), False, Call(M.RESUME, "R1")),
    ("R2", inputs(), (Tried(M.RESUME, NOT_FOUND),), False, Call(M.LOAD, "R2")),
    ("R2 not when cancelled", inputs(), (Tried(M.RESUME, NOT_FOUND),), True,
     Finished(Outcome.PRESERVED, FailureClass.CANCELLATION, "R1")),
    ("R2 not without load", inputs(load=False), (Tried(M.RESUME, NOT_FOUND),), False,
     Call(M.NEW, "R1", fallback=FailureClass.UNSUPPORTED)),
    ("R3", inputs(resume=False), (), False, Call(M.LOAD, "R3")),
    ("R3'", inputs(resume=False, load=False), (), False, Call(M.NEW, "R3'", fallback=FailureClass.UNSUPPORTED)),
    ("R4 no native resume", inputs(native=False), (), False, Call(M.NEW, "R4")),
    ("R4 no token", inputs(token=None), (), False, Call(M.NEW, "R4")),
]


@pytest.mark.parametrize(
    ("rule", "given", "attempts", "cancelled", "expected"), PLAN_TABLE, ids=[r[0] for r in PLAN_TABLE]
)
def test_plan_table(rule: str, given: RestoreInputs, attempts: tuple[RestoreAttempt, ...], cancelled: bool,
                    expected: object) -> None:
    assert plan_restore(given, attempts, cancelled) == expected


# Complete negotiations: attempts in order -> final outcome.
OUTCOMES = [
    ("resume works", inputs(), [Tried(M.RESUME)], Outcome.RESTORED, None),
    ("load works (R3)", inputs(resume=False), [Tried(M.LOAD)], Outcome.RESTORED, None),
    ("R2 load works", inputs(), [Tried(M.RESUME, NOT_FOUND), Tried(M.LOAD)], Outcome.RESTORED, None),
    ("R2 load unsupported too", inputs(),
     [Tried(M.RESUME, NOT_FOUND), Tried(M.LOAD, NOT_FOUND), Tried(M.NEW)],
     Outcome.FALLBACK_NEW, FailureClass.UNSUPPORTED),
    ("unknown session", inputs(), [Tried(M.RESUME, err(-32002, "Resource not found")), Tried(M.NEW)],
     Outcome.FALLBACK_NEW, FailureClass.UNKNOWN_SESSION),
    ("R3' new", inputs(resume=False, load=False), [Tried(M.NEW)], Outcome.FALLBACK_NEW,
     FailureClass.UNSUPPORTED),
    ("R4 new", inputs(native=False), [Tried(M.NEW)], Outcome.NEW, None),
    ("R4 new fails", inputs(token=None), [Tried(M.NEW, err(-32000, "auth"))], Outcome.FAILED,
     FailureClass.AUTHENTICATION),
    ("fallback new fails: keep the token", inputs(),
     [Tried(M.RESUME, err(-32002)), Tried(M.NEW, err(-32603, "boom"))],
     Outcome.PRESERVED, FailureClass.INCONCLUSIVE),
    ("transport preserves", inputs(), [Tried(M.RESUME, Failure(FailureKind.TRANSPORT, message="exit"))],
     Outcome.PRESERVED, FailureClass.TRANSPORT),
]


@pytest.mark.parametrize(("name", "given", "attempts", "outcome", "cls"), OUTCOMES, ids=[r[0] for r in OUTCOMES])
def test_negotiation_outcomes(name: str, given: RestoreInputs, attempts: list[RestoreAttempt], outcome: Outcome,
                              cls: FailureClass | None) -> None:
    for i in range(len(attempts)):
        step = plan_restore(given, tuple(attempts[:i]))
        assert isinstance(step, Call) and step.method is attempts[i].method
    final = plan_restore(given, tuple(attempts))
    assert isinstance(final, Finished)
    assert (final.outcome, final.failure_class) == (outcome, cls)


def test_attempt_off_plan_raises() -> None:
    with pytest.raises(ValueError, match="the plan was session/resume"):
        plan_restore(inputs(), (Tried(M.LOAD),))
    with pytest.raises(ValueError, match="after the negotiation finished"):
        plan_restore(inputs(), (Tried(M.RESUME), Tried(M.LOAD)))


def test_plan_names() -> None:
    assert [plan_name(i) for i in (inputs(), inputs(resume=False), inputs(resume=False, load=False),
                                   inputs(native=False))] == ["resume", "load", "new", "new"]


# One row per row of the failure table (§3.1), with each example it names.
CLASS_TABLE = [
    ("unsupported: -32601", err(-32601, "Method not found"), False, FailureClass.UNSUPPORTED),
    ("unknown session: -32002", err(-32002, "Resource not found"), False, FailureClass.UNKNOWN_SESSION),
    ("unknown session: -32002 naming the id", err(-32002, f"session {TOKEN} not found"), False,
     FailureClass.UNKNOWN_SESSION),
    ("unknown session: -32602 naming the id", err(-32602, f"Invalid params: session {TOKEN} not found"), False,
     FailureClass.UNKNOWN_SESSION),
    ("unknown session: -32603 no rollout", err(-32603, f"no rollout found for thread id {TOKEN}"), False,
     FailureClass.UNKNOWN_SESSION),
    ("unknown session: id in data", err(-32603, "Internal error", {"sessionId": TOKEN, "reason": "unknown session"}),
     False, FailureClass.UNKNOWN_SESSION),
    ("transport: process exited", Failure(FailureKind.TRANSPORT, message="process exited"), False,
     FailureClass.TRANSPORT),
    ("transport: timeout", Failure(FailureKind.TIMEOUT, message="no answer"), False, FailureClass.TRANSPORT),
    ("authentication: -32000 after authenticate", err(-32000, "Authentication required", auth_tried=True), False,
     FailureClass.AUTHENTICATION),
    ("cancellation: -32800", err(-32800, "Request cancelled"), False, FailureClass.CANCELLATION),
    ("cancellation: the gateway cancelled", Failure(FailureKind.CANCELLED), False, FailureClass.CANCELLATION),
    ("cancellation: cancelled flag wins", err(-32002, "Resource not found"), True, FailureClass.CANCELLATION),
    ("inconclusive: -32603 generic", err(-32603, "Internal error"), False, FailureClass.INCONCLUSIVE),
    ("inconclusive: not found naming another id", err(-32603, "session other-session-99 not found"), False,
     FailureClass.INCONCLUSIVE),
    ("inconclusive: -32002 naming another session", err(-32002, "session other-session-99 not found"), False,
     FailureClass.INCONCLUSIVE),
    ("inconclusive: config resource", err(-32002, "config file /etc/agent.toml not found"), False,
     FailureClass.INCONCLUSIVE),
    ("inconclusive: -32602 without the id", err(-32602, "Invalid params: cwd must be absolute"), False,
     FailureClass.INCONCLUSIVE),
]


@pytest.mark.parametrize(("name", "failure", "cancelled", "expected"), CLASS_TABLE, ids=[r[0] for r in CLASS_TABLE])
def test_failure_classes(name: str, failure: Failure, cancelled: bool, expected: FailureClass) -> None:
    assert classify_restore_failure(failure, token=TOKEN, cancelled=cancelled) is expected


# One row per row of the sign-in table (AU1, AU2), with the boundaries of AU2: once, and never an invented credential.
ADVERTISED = [AuthMethod.model_validate(m) for m in [
    {"id": "login", "name": "Log in"},
    {"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "VENDOR_KEY"}]},
]]
KEY_SET = {"VENDOR_KEY": "k"}


@pytest.mark.parametrize(("named", "expected"), [("login", Authenticate("login", "AU1")), (None, None), ("", None)])
def test_authenticate_first(named: str | None, expected: Authenticate | None) -> None:
    assert authenticate_first(named) == expected


AUTH_TABLE: list[tuple[str, int | None, bool, str | None, dict[str, str], Authenticate | None]] = [
    # name, the call's error code, authenticate sent already, the named method, the agent's environment -> step
    ("AU2 the named method", -32000, False, "login", {}, Authenticate("login", "AU2")),
    ("AU2 an env_var method whose variables are set", -32000, False, None, KEY_SET, Authenticate("key", "AU2")),
    ("AU2 the named method wins over a set env_var one", -32000, False, "login", KEY_SET, Authenticate("login", "AU2")),
    ("no credential invented: nothing named, variables unset", -32000, False, None, {}, None),
    ("no credential invented: a variable set empty", -32000, False, None, {"VENDOR_KEY": ""}, None),
    ("once: authenticate already sent", -32000, True, "login", KEY_SET, None),
    ("another error: -32603", -32603, False, "login", KEY_SET, None),
    ("another error: -32601", -32601, False, "login", KEY_SET, None),
    ("no code: a transport failure", None, False, "login", KEY_SET, None),
]


@pytest.mark.parametrize(("name", "code", "tried", "named", "environ", "expected"), AUTH_TABLE,
                         ids=[r[0] for r in AUTH_TABLE])
def test_authenticate_then_retry(name: str, code: int | None, tried: bool, named: str | None,
                                 environ: dict[str, str], expected: Authenticate | None) -> None:
    assert authenticate_then_retry(code, tried, ADVERTISED, named, environ) == expected
