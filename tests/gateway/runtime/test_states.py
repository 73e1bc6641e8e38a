"""gateway.runtime.states: the session and task tables, the pairing of their events, and what is illegal."""

from __future__ import annotations

import pytest

from gateway.runtime.states import (
    SESSION_TRANSITIONS,
    TASK_EVENT_OF,
    TERMINAL_SESSION_STATES,
    IllegalTransition,
    SessionEvent,
    SessionState,
    TaskState,
    transition,
    transition_session,
)

S, E, T = SessionState, SessionEvent, TaskState

# (session, task, event) -> (session, task): the paths a session really takes.
PAIRED = [
    ((S.CREATED, T.TODO, E.LAUNCH), (S.STARTING, T.IN_PROGRESS)),
    ((S.STARTING, T.IN_PROGRESS, E.READY), (S.WAITING_FOR_INPUT, T.REVIEW)),
    ((S.STARTING, T.IN_PROGRESS, E.PROMPT), (S.RUNNING, T.IN_PROGRESS)),  # the initial prompt
    ((S.WAITING_FOR_INPUT, T.REVIEW, E.PROMPT), (S.RUNNING, T.IN_PROGRESS)),
    ((S.RUNNING, T.IN_PROGRESS, E.TURN_ENDED), (S.WAITING_FOR_INPUT, T.REVIEW)),
    ((S.RUNNING, T.IN_PROGRESS, E.LAUNCH), (S.STARTING, T.IN_PROGRESS)),  # the agent died mid-turn
    ((S.WAITING_FOR_INPUT, T.REVIEW, E.LAUNCH), (S.STARTING, T.IN_PROGRESS)),  # a resume
    ((S.STARTING, T.IN_PROGRESS, E.TURN_ENDED), (S.WAITING_FOR_INPUT, T.REVIEW)),  # a preserved failure
    ((S.CREATED, T.TODO, E.FAIL), (S.FAILED, T.FAILED)),
    ((S.STARTING, T.IN_PROGRESS, E.FAIL), (S.FAILED, T.FAILED)),
    ((S.RUNNING, T.IN_PROGRESS, E.CANCEL), (S.CANCELLED, T.CANCELLED)),
    ((S.WAITING_FOR_INPUT, T.REVIEW, E.CANCEL), (S.CANCELLED, T.CANCELLED)),
    ((S.WAITING_FOR_INPUT, T.REVIEW, E.COMPLETE), (S.COMPLETED, T.COMPLETED)),
    # terminal states absorb what a winding-down turn or launch still reports
    ((S.CANCELLED, T.CANCELLED, E.TURN_ENDED), (S.CANCELLED, T.CANCELLED)),
    ((S.FAILED, T.FAILED, E.READY), (S.FAILED, T.FAILED)),
    ((S.COMPLETED, T.COMPLETED, E.TURN_ENDED), (S.COMPLETED, T.COMPLETED)),
    # a task's end is final even when another of its sessions goes on
    ((S.WAITING_FOR_INPUT, T.CANCELLED, E.LAUNCH), (S.STARTING, T.CANCELLED)),
]

ILLEGAL = [
    (S.RUNNING, E.PROMPT),  # a second turn: the runtime answers -32010 before it gets here
    (S.CREATED, E.PROMPT),
    (S.CREATED, E.READY),
    (S.CANCELLED, E.PROMPT),
    (S.CANCELLED, E.LAUNCH),
    (S.CANCELLED, E.CANCEL),
    (S.FAILED, E.LAUNCH),
    (S.COMPLETED, E.CANCEL),
]


@pytest.mark.parametrize(("given", "expected"), PAIRED)
def test_paired_transitions(given: tuple[SessionState, TaskState, SessionEvent],
                            expected: tuple[SessionState, TaskState]) -> None:
    assert transition(*given) == expected


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_illegal_transitions_raise(state: SessionState, event: SessionEvent) -> None:
    with pytest.raises(IllegalTransition, match=f"from {state} on {event}"):
        transition_session(state, event)


def test_every_session_event_has_a_paired_task_event() -> None:
    assert set(TASK_EVENT_OF) == set(SessionEvent)


def test_no_way_out_of_a_terminal_state() -> None:
    for (state, _event), target in SESSION_TRANSITIONS.items():
        if state in TERMINAL_SESSION_STATES:
            assert target == state
