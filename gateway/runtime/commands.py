"""What a live session does with a command, decided from its facts alone: the runtime's table.

A command (a client's prompt, cancel_turn, a stop) is decided here without I/O; `turns` and the facade
perform the decision. Each decision is taken synchronously on the event loop, so no other command can
come between the check and the start of what it decided (a turn, an interrupt).
"""

from __future__ import annotations

from enum import StrEnum


class Command(StrEnum):
    PROMPT = "prompt"
    CANCEL_TURN = "cancel_turn"


class Decision(StrEnum):
    START_TURN = "start_turn"
    REFUSE_BUSY = "refuse_busy"  # -32010: a turn runs, or the agent is being stopped
    INTERRUPT_TURN = "interrupt_turn"  # ACP session/cancel, pending permissions answered cancelled
    ANSWER_PERMISSIONS = "answer_permissions"  # no turn runs: only pending permissions are cancelled


# (command, a turn runs, the agent is being stopped) -> decision
TABLE: dict[tuple[Command, bool, bool], Decision] = {
    (Command.PROMPT, False, False): Decision.START_TURN,
    (Command.PROMPT, True, False): Decision.REFUSE_BUSY,
    (Command.PROMPT, False, True): Decision.REFUSE_BUSY,
    (Command.PROMPT, True, True): Decision.REFUSE_BUSY,
    (Command.CANCEL_TURN, True, False): Decision.INTERRUPT_TURN,
    (Command.CANCEL_TURN, True, True): Decision.INTERRUPT_TURN,
    (Command.CANCEL_TURN, False, False): Decision.ANSWER_PERMISSIONS,
    (Command.CANCEL_TURN, False, True): Decision.ANSWER_PERMISSIONS,
}


def decide(command: Command, *, turn_running: bool, stopping: bool) -> Decision:
    return TABLE[(command, turn_running, stopping)]
