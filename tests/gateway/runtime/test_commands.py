"""gateway.runtime.commands: what a live session does with a prompt or a cancel_turn, from its phase alone."""

from __future__ import annotations

import itertools

import pytest

from gateway.runtime.commands import TABLE, Command, CommandDecision, CommandPhase, decide, phase_of

C, D, P = Command, CommandDecision, CommandPhase

DECISIONS = [
    (C.PROMPT, P.IDLE, D.START_TURN),
    (C.PROMPT, P.TURN, D.REFUSE_BUSY),
    (C.PROMPT, P.STOPPING, D.REFUSE_BUSY),
    (C.PROMPT, P.ENDED, D.REFUSE_ENDED),
    (C.CANCEL_TURN, P.IDLE, D.ANSWER_PERMISSIONS),
    (C.CANCEL_TURN, P.TURN, D.INTERRUPT_TURN),
    (C.CANCEL_TURN, P.STOPPING, D.ANSWER_PERMISSIONS),
    (C.CANCEL_TURN, P.ENDED, D.ANSWER_PERMISSIONS),
]

PHASES = [
    # terminal, turn running, stopping -> phase
    (False, False, False, P.IDLE),
    (False, True, False, P.TURN),
    (False, True, True, P.TURN),  # a turn that runs while its agent is stopped is still interrupted
    (False, False, True, P.STOPPING),
    (True, True, True, P.ENDED),
    (True, False, False, P.ENDED),
]


@pytest.mark.parametrize(("command", "phase", "expected"), DECISIONS)
def test_decide(command: Command, phase: CommandPhase, expected: CommandDecision) -> None:
    assert decide(command, phase) is expected


@pytest.mark.parametrize(("terminal", "turn_running", "stopping", "expected"), PHASES)
def test_phase_of(terminal: bool, turn_running: bool, stopping: bool, expected: CommandPhase) -> None:
    assert phase_of(terminal=terminal, turn_running=turn_running, stopping=stopping) is expected


def test_the_table_is_total() -> None:
    assert set(TABLE) == set(itertools.product(Command, CommandPhase))
