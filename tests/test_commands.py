"""gateway.runtime.commands: what a live session does with a prompt or a cancel_turn, from its facts alone."""

from __future__ import annotations

import itertools

import pytest

from gateway.runtime.commands import TABLE, Command, Decision, decide

C, D = Command, Decision

ROWS = [
    # command, turn running, stopping -> decision
    (C.PROMPT, False, False, D.START_TURN),
    (C.PROMPT, True, False, D.REFUSE_BUSY),
    (C.PROMPT, False, True, D.REFUSE_BUSY),
    (C.PROMPT, True, True, D.REFUSE_BUSY),
    (C.CANCEL_TURN, True, False, D.INTERRUPT_TURN),
    (C.CANCEL_TURN, True, True, D.INTERRUPT_TURN),
    (C.CANCEL_TURN, False, False, D.ANSWER_PERMISSIONS),
    (C.CANCEL_TURN, False, True, D.ANSWER_PERMISSIONS),
]


@pytest.mark.parametrize(("command", "turn_running", "stopping", "expected"), ROWS)
def test_decide(command: Command, turn_running: bool, stopping: bool, expected: Decision) -> None:
    assert decide(command, turn_running=turn_running, stopping=stopping) is expected


def test_the_table_is_total() -> None:
    assert set(TABLE) == set(itertools.product(Command, (False, True), (False, True)))
