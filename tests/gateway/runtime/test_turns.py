"""gateway.runtime.turns: whether a turn left open by a crash still owes its `turn_ended`, by table."""

from __future__ import annotations

import pytest

from gateway.runtime.turns import owes_turn_ended

S, E = "turn_started", "turn_ended"
ROWS = [
    # the session's turn events from the open turn's floor on -> owes a turn_ended?
    ([], False),  # the crash came before turn_started was committed
    ([S], True),  # started, never ended
    ([S, E], False),  # ended, but the state change after it was lost
    ([E], False),  # an earlier turn's end cannot be above the floor; nothing of this turn was committed
    # a floor taken on a node that had not seen another node's events yet: an earlier turn is above it
    ([S, E, S], True),
    ([S, E, S, E], False),
]


@pytest.mark.parametrize(("types", "owed"), ROWS)
def test_owes_turn_ended(types: list[str], owed: bool) -> None:
    assert owes_turn_ended(types) is owed
