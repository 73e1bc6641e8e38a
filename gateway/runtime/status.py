"""Status evaluation (docs/architecture.md: The runtime, status) and the initial-prompt switch: pure functions of stored
facts.

Rules of this file: no I/O, no clocks (the caller passes `now`), no knowledge of WebSockets.
`evaluate_status` is what `task.session.status` reports; `decide_boot` is what a freshly launched
agent does first.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .states import ACTIVE_SESSION_STATES, TERMINAL_SESSION_STATES, SessionState


class ResumeReason(StrEnum):
    AGENT_RUNNING = "agent_running"
    STALE_EXECUTION = "stale_execution"
    AGENT_NOT_RUNNING = "agent_not_running"
    AGENT_NOT_RUNNING_FRESH_START = "agent_not_running_fresh_start"
    TERMINAL_STATE = "terminal_state"
    ERROR_RECOVERY = "error_recovery"
    NOT_STARTED = "not_started"


@dataclass(frozen=True)
class StatusFacts:
    state: SessionState
    has_token: bool
    executor_exists: bool
    live_here: bool
    # The executor row's owner is another gateway instance still believed alive, seen this long ago.
    other_owner_seen_ago: float | None
    stale_window: float
    recovery_pending: bool


@dataclass(frozen=True)
class StatusDecision:
    needs_resume: bool
    is_resumable: bool
    resume_reason: ResumeReason


def evaluate_status(f: StatusFacts) -> StatusDecision:
    if f.state in TERMINAL_SESSION_STATES:
        return StatusDecision(False, False, ResumeReason.TERMINAL_STATE)
    if f.live_here:  # case 1
        return StatusDecision(False, True, ResumeReason.AGENT_RUNNING)
    if f.other_owner_seen_ago is not None and f.other_owner_seen_ago <= f.stale_window:  # case 2
        return StatusDecision(False, False, ResumeReason.STALE_EXECUTION)
    if f.recovery_pending:  # a preserved-identity failure: resumable, but not automatically
        return StatusDecision(False, True, ResumeReason.ERROR_RECOVERY)
    if f.state in ACTIVE_SESSION_STATES:
        if f.has_token:  # case 3
            return StatusDecision(True, True, ResumeReason.AGENT_NOT_RUNNING)
        if f.executor_exists:  # case 4
            return StatusDecision(True, True, ResumeReason.AGENT_NOT_RUNNING_FRESH_START)
    return StatusDecision(False, True, ResumeReason.NOT_STARTED)


def committed_status(state: SessionState, live: bool, has_token: bool, launched: bool,
                     recovery_pending: bool) -> StatusDecision:
    """The status rules on what one gateway knows of a committed row without asking the cluster (no other node's
    lease: case 2 is `task.session.status`'s alone): what `session_status` events and list summaries say."""
    return evaluate_status(StatusFacts(state=state, has_token=has_token, executor_exists=launched, live_here=live,
                                       other_owner_seen_ago=None, stale_window=0.0,
                                       recovery_pending=recovery_pending))


class Boot(StrEnum):
    INITIAL_PROMPT = "initial_prompt"  # send the task description as the first prompt
    IDLE = "idle"  # wait for the user
    IDLE_INJECT_CONTEXT = "idle_inject_context"  # wait; the next prompt carries the resume context


@dataclass(frozen=True)
class BootFacts:
    first_launch: bool
    has_description: bool
    started_fresh: bool  # the agent session came from session/new (R4 or a fallback), not a restore
    history_context_injection: bool
    has_history: bool


def decide_boot(f: BootFacts) -> Boot:
    """The initial-prompt switch of docs/architecture.md: The runtime, status."""
    if f.first_launch and f.has_description:
        return Boot.INITIAL_PROMPT
    if f.started_fresh and f.history_context_injection and f.has_history:
        return Boot.IDLE_INJECT_CONTEXT
    return Boot.IDLE
