"""Session and task state machines (docs/architecture.md: The runtime, states): every state change goes through
`transition_*`.

Rules of this file:
- The transitions are tables; nothing else in the gateway decides what state follows another. A session
  event always moves its task by the paired event of `TASK_EVENT_OF`.
- An event not in the table for the current state is a bug: `IllegalTransition` is raised and
  nothing is applied.
- Pure: no storage, no agents, no clocks.
"""

from __future__ import annotations

from enum import StrEnum


class SessionState(StrEnum):
    CREATED = "CREATED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    WAITING_FOR_INPUT = "WAITING_FOR_INPUT"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class TaskState(StrEnum):
    TODO = "TODO"
    IN_PROGRESS = "IN_PROGRESS"
    REVIEW = "REVIEW"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class SessionEvent(StrEnum):
    LAUNCH = "launch"  # an agent process is being started for the session (first launch or resume)
    READY = "ready"  # the agent is up and idle
    PROMPT = "prompt"  # a turn starts
    TURN_ENDED = "turn_ended"  # a turn ended (or failed, or its agent vanished): back to input
    FAIL = "fail"  # the session cannot go on (launch failure)
    CANCEL = "cancel"  # ended for good by the user
    COMPLETE = "complete"


class TaskEvent(StrEnum):
    START = "start"
    WORK = "work"  # a turn runs
    REVIEW = "review"  # the agent waits for the user
    FAIL = "fail"
    CANCEL = "cancel"
    COMPLETE = "complete"


ACTIVE_SESSION_STATES = frozenset({SessionState.STARTING, SessionState.RUNNING, SessionState.WAITING_FOR_INPUT})
TERMINAL_SESSION_STATES = frozenset({SessionState.COMPLETED, SessionState.FAILED, SessionState.CANCELLED})
TERMINAL_TASK_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED})

S, E = SessionState, SessionEvent
SESSION_TRANSITIONS: dict[tuple[SessionState, SessionEvent], SessionState] = {
    (S.CREATED, E.LAUNCH): S.STARTING,
    (S.CREATED, E.FAIL): S.FAILED,
    (S.CREATED, E.CANCEL): S.CANCELLED,
    (S.STARTING, E.LAUNCH): S.STARTING,  # a resume after a crash during start-up
    (S.STARTING, E.READY): S.WAITING_FOR_INPUT,
    (S.STARTING, E.PROMPT): S.RUNNING,  # the initial prompt of a first launch
    (S.STARTING, E.TURN_ENDED): S.WAITING_FOR_INPUT,
    (S.STARTING, E.FAIL): S.FAILED,
    (S.STARTING, E.CANCEL): S.CANCELLED,
    (S.WAITING_FOR_INPUT, E.LAUNCH): S.STARTING,
    (S.WAITING_FOR_INPUT, E.READY): S.WAITING_FOR_INPUT,
    (S.WAITING_FOR_INPUT, E.PROMPT): S.RUNNING,
    (S.WAITING_FOR_INPUT, E.TURN_ENDED): S.WAITING_FOR_INPUT,
    (S.WAITING_FOR_INPUT, E.FAIL): S.FAILED,
    (S.WAITING_FOR_INPUT, E.CANCEL): S.CANCELLED,
    (S.WAITING_FOR_INPUT, E.COMPLETE): S.COMPLETED,
    (S.RUNNING, E.LAUNCH): S.STARTING,  # the agent died mid-turn; a resume brings it back
    (S.RUNNING, E.TURN_ENDED): S.WAITING_FOR_INPUT,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.RUNNING, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.COMPLETE): S.COMPLETED,
    # Terminal states absorb what a turn or a launch still reports as it winds down (a turn that ends after
    # the session was cancelled stays cancelled); a new launch, prompt or second cancel is still illegal.
    **{(terminal, late): terminal for terminal in (S.COMPLETED, S.FAILED, S.CANCELLED)
       for late in (E.TURN_ENDED, E.READY)},
}

T, TE = TaskState, TaskEvent
TASK_TRANSITIONS: dict[tuple[TaskState, TaskEvent], TaskState] = {
    (T.TODO, TE.START): T.IN_PROGRESS,
    (T.TODO, TE.WORK): T.IN_PROGRESS,
    (T.TODO, TE.REVIEW): T.REVIEW,
    (T.TODO, TE.FAIL): T.FAILED,
    (T.TODO, TE.CANCEL): T.CANCELLED,
    (T.IN_PROGRESS, TE.START): T.IN_PROGRESS,
    (T.IN_PROGRESS, TE.WORK): T.IN_PROGRESS,
    (T.IN_PROGRESS, TE.REVIEW): T.REVIEW,
    (T.IN_PROGRESS, TE.FAIL): T.FAILED,
    (T.IN_PROGRESS, TE.CANCEL): T.CANCELLED,
    (T.IN_PROGRESS, TE.COMPLETE): T.COMPLETED,
    (T.REVIEW, TE.START): T.IN_PROGRESS,
    (T.REVIEW, TE.WORK): T.IN_PROGRESS,
    (T.REVIEW, TE.REVIEW): T.REVIEW,
    (T.REVIEW, TE.FAIL): T.FAILED,
    (T.REVIEW, TE.CANCEL): T.CANCELLED,
    (T.REVIEW, TE.COMPLETE): T.COMPLETED,
}


# What each session event does to the session's task: the pairing every state change goes through.
TASK_EVENT_OF: dict[SessionEvent, TaskEvent] = {
    E.LAUNCH: TE.START,
    E.READY: TE.REVIEW,
    E.PROMPT: TE.WORK,
    E.TURN_ENDED: TE.REVIEW,
    E.FAIL: TE.FAIL,
    E.CANCEL: TE.CANCEL,
    E.COMPLETE: TE.COMPLETE,
}


class IllegalTransition(RuntimeError):
    """A state change the tables do not allow: a bug in the caller, never silently applied."""


def transition_session(state: SessionState, event: SessionEvent) -> SessionState:
    try:
        return SESSION_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"session cannot go from {state} on {event}") from None


def transition_task(state: TaskState, event: TaskEvent) -> TaskState:
    try:
        return TASK_TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(f"task cannot go from {state} on {event}") from None


def transition(session: SessionState, task: TaskState, event: SessionEvent) -> tuple[SessionState, TaskState]:
    """A session event and the task event paired with it, applied together. A task's end is final: a
    terminal task (a task may have several sessions) is not moved by its sessions' later events."""
    new_session = transition_session(session, event)
    if task in TERMINAL_TASK_STATES:
        return new_session, task
    return new_session, transition_task(task, TASK_EVENT_OF[event])
