"""What a live session does with a command, decided from its phase alone: the runtime's table.

A command (a client's prompt or cancel_turn) is decided here without I/O; `turns` performs the decision.
Each decision is taken synchronously on the event loop, so no other command can come between the check
and the start of what it decided: this, plus turns that are tasks of the runtime rather than of a
client's call, is what a per-session actor with a command queue would give, without a queue hop per call.
"""

from __future__ import annotations

from enum import StrEnum


class Command(StrEnum):
    PROMPT = "prompt"
    CANCEL_TURN = "cancel_turn"


class Phase(StrEnum):
    IDLE = "idle"  # the agent waits for a prompt
    TURN = "turn"  # a turn runs
    STOPPING = "stopping"  # the agent is being stopped (shutdown, delete, recover)
    ENDED = "ended"  # the session is terminal: nothing starts any more


class Decision(StrEnum):
    START_TURN = "start_turn"
    REFUSE_BUSY = "refuse_busy"  # -32010: a turn runs, or the agent is being stopped: try again later
    REFUSE_ENDED = "refuse_ended"  # -32013: the session is terminal: start a new one
    INTERRUPT_TURN = "interrupt_turn"  # ACP session/cancel, pending permissions answered cancelled
    ANSWER_PERMISSIONS = "answer_permissions"  # no turn runs: only pending permissions are cancelled


def phase_of(*, terminal: bool, turn_running: bool, stopping: bool) -> Phase:
    """The phase a session is in; the first that holds wins."""
    if terminal:
        return Phase.ENDED
    if turn_running:
        return Phase.TURN
    if stopping:
        return Phase.STOPPING
    return Phase.IDLE


TABLE: dict[tuple[Command, Phase], Decision] = {
    (Command.PROMPT, Phase.IDLE): Decision.START_TURN,
    (Command.PROMPT, Phase.TURN): Decision.REFUSE_BUSY,
    (Command.PROMPT, Phase.STOPPING): Decision.REFUSE_BUSY,
    (Command.PROMPT, Phase.ENDED): Decision.REFUSE_ENDED,
    (Command.CANCEL_TURN, Phase.IDLE): Decision.ANSWER_PERMISSIONS,
    (Command.CANCEL_TURN, Phase.TURN): Decision.INTERRUPT_TURN,
    (Command.CANCEL_TURN, Phase.STOPPING): Decision.ANSWER_PERMISSIONS,
    (Command.CANCEL_TURN, Phase.ENDED): Decision.ANSWER_PERMISSIONS,
}


def decide(command: Command, phase: Phase) -> Decision:
    return TABLE[(command, phase)]
