"""gateway.runtime.status: the status cases of docs/architecture.md: The runtime, status and the initial-prompt switch,
by table."""

from __future__ import annotations

import pytest

from gateway.runtime.states import SessionState
from gateway.runtime.status import Boot, BootFacts, ResumeReason, StatusFacts, decide_boot, evaluate_status

S, R = SessionState, ResumeReason
W = S.WAITING_FOR_INPUT

STATUS = [
    # state, token, executor, live here, other owner seen ago, recovery pending -> needs_resume, resumable, reason
    (W, True, True, True, None, False, (False, True, R.AGENT_RUNNING)),  # case 1
    (S.RUNNING, True, True, True, None, False, (False, True, R.AGENT_RUNNING)),
    (W, True, True, False, 10.0, False, (False, False, R.STALE_EXECUTION)),  # case 2
    (W, True, True, False, 61.0, False, (True, True, R.AGENT_NOT_RUNNING)),  # case 2 expired -> case 3
    (W, True, True, False, None, False, (True, True, R.AGENT_NOT_RUNNING)),  # case 3
    (S.STARTING, True, True, False, None, False, (True, True, R.AGENT_NOT_RUNNING)),
    (W, False, True, False, None, False, (True, True, R.AGENT_NOT_RUNNING_FRESH_START)),  # case 4
    (S.CANCELLED, True, True, False, None, False, (False, False, R.TERMINAL_STATE)),
    (S.FAILED, True, True, True, None, False, (False, False, R.TERMINAL_STATE)),
    (S.COMPLETED, False, False, False, None, False, (False, False, R.TERMINAL_STATE)),
    (W, True, True, False, None, True, (False, True, R.ERROR_RECOVERY)),
    (S.CREATED, False, False, False, None, False, (False, True, R.NOT_STARTED)),
    (W, False, False, False, None, False, (False, True, R.NOT_STARTED)),
]


@pytest.mark.parametrize(("state", "token", "executor", "live", "seen_ago", "recovery", "expected"), STATUS)
def test_evaluate_status(state: SessionState, token: bool, executor: bool, live: bool, seen_ago: float | None,
                         recovery: bool, expected: tuple[bool, bool, ResumeReason]) -> None:
    decision = evaluate_status(StatusFacts(state, token, executor, live, seen_ago, 60.0, recovery))
    assert (decision.needs_resume, decision.is_resumable, decision.resume_reason) == expected


BOOT = [
    # first launch, description, started fresh, injection, history -> boot
    (True, True, True, False, False, Boot.INITIAL_PROMPT),
    (True, False, True, True, False, Boot.IDLE),
    (False, True, False, True, True, Boot.IDLE),  # natively restored: never the resume context
    (False, True, True, True, True, Boot.IDLE_INJECT_CONTEXT),
    (False, True, True, False, True, Boot.IDLE),
    (False, True, True, True, False, Boot.IDLE),
]


@pytest.mark.parametrize(("first", "description", "fresh", "injection", "history", "expected"), BOOT)
def test_decide_boot(first: bool, description: bool, fresh: bool, injection: bool, history: bool,
                     expected: Boot) -> None:
    assert decide_boot(BootFacts(first, description, fresh, injection, history)) is expected
