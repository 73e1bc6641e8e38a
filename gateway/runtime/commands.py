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


class CommandPhase(StrEnum):
    IDLE = "idle"  # the agent waits for a prompt
    TURN = "turn"  # a turn runs
    STOPPING = "stopping"  # the agent is being stopped (shutdown, delete, recover)
    ENDED = "ended"  # the session is terminal: nothing starts any more


class CommandDecision(StrEnum):
    START_TURN = "start_turn"
    REFUSE_BUSY = "refuse_busy"  # -32010: a turn runs, or the agent is being stopped: try again later
    REFUSE_ENDED = "refuse_ended"  # -32013: the session is terminal: start a new one
    INTERRUPT_TURN = "interrupt_turn"  # ACP session/cancel, pending permissions answered cancelled
    ANSWER_PERMISSIONS = "answer_permissions"  # no turn runs: only pending permissions are cancelled


def phase_of(*, terminal: bool, turn_running: bool, stopping: bool) -> CommandPhase:
    """The phase a session is in; the first that holds wins."""
    if terminal:
        return CommandPhase.ENDED
    if turn_running:
        return CommandPhase.TURN
    if stopping:
        return CommandPhase.STOPPING
    return CommandPhase.IDLE


TABLE: dict[tuple[Command, CommandPhase], CommandDecision] = {
    (Command.PROMPT, CommandPhase.IDLE): CommandDecision.START_TURN,
    (Command.PROMPT, CommandPhase.TURN): CommandDecision.REFUSE_BUSY,
    (Command.PROMPT, CommandPhase.STOPPING): CommandDecision.REFUSE_BUSY,
    (Command.PROMPT, CommandPhase.ENDED): CommandDecision.REFUSE_ENDED,
    (Command.CANCEL_TURN, CommandPhase.IDLE): CommandDecision.ANSWER_PERMISSIONS,
    (Command.CANCEL_TURN, CommandPhase.TURN): CommandDecision.INTERRUPT_TURN,
    (Command.CANCEL_TURN, CommandPhase.STOPPING): CommandDecision.ANSWER_PERMISSIONS,
    (Command.CANCEL_TURN, CommandPhase.ENDED): CommandDecision.ANSWER_PERMISSIONS,
}


def decide(command: Command, phase: CommandPhase) -> CommandDecision:
    return TABLE[(command, phase)]
