"""Turns: started by a command, run by the runtime, ended by the agent's answer, a cancel, the agent's exit or
shutdown — never because a client left. Each started turn ends with exactly one `turn_ended`.

A turn is a task of the runtime; callers await it shielded, so a caller that goes away only stops waiting.
The session row records a floor of the running turn's `turn_started` id before that event can be seen, so a
start-up after a crash (or the next prompt, when a turn's end could not be stored) can close a turn that was
left open as `interrupted`, once: `close_interrupted`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from acp.errors import RpcError, TransportError

from .. import metrics
from ..errors import GatewayError, agent_failed, busy, not_resumable, storage_failed, unexpected
from ..journal import EventBus
from ..store import HistoryEntry, SessionRow, StoreBase
from . import failpoints
from .broker import PermissionBroker
from .commands import Command, CommandDecision, decide
from .diagnosis import limit_said, stderr_said
from .elicitations import ElicitationBroker
from .live import LiveSession
from .resume_context import render_resume_context
from .sign_in_rules import asks_sign_in
from .states import SessionEvent, SessionState
from .writer import SessionWriter, status_data

log = logging.getLogger(__name__)

INTERRUPTED_MESSAGE = "the gateway stopped while this turn ran; the agent's answer, if any, was lost"


def content_blocks(prompt: Any) -> list[dict[str, Any]]:
    """`prompt` as ACP content blocks: a string is one text block; blocks pass through untouched."""
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    return [dict(b) for b in prompt]


def prompt_text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


@dataclass(frozen=True)
class TurnEnd:
    """How a turn ended: what `turn_ended` says, and what the prompt's caller gets."""

    stop_reason: str | None
    error: Any = None  # the `error` of turn_ended
    error_message: str | None = None  # kept on the session row
    raise_: GatewayError | None = None
    sign_in: bool = False  # the agent answered `auth_required` (or "Authentication required"): it wants a sign-in


class TurnRunner:
    def __init__(self, store: StoreBase, bus: EventBus, writer: SessionWriter, broker: PermissionBroker,
                 elicitations: ElicitationBroker,
                 on_agent_gone: Callable[[LiveSession], Awaitable[None]],
                 stop_agent: Callable[[LiveSession, str], Awaitable[None]], cancel_grace: float,
                 stop_grace: float, sign_in_needed: Callable[[LiveSession, str], Awaitable[str]] | None = None,
                 answered: Callable[[LiveSession], None] | None = None) -> None:
        self.store = store
        self.bus = bus
        self.writer = writer
        self.broker = broker
        self.elicitations = elicitations
        self._on_agent_gone = on_agent_gone
        self._stop_agent = stop_agent  # (live, how its executor row records the stop)
        self.cancel_grace = cancel_grace
        self.stop_grace = stop_grace
        # (live, the agent's words) -> what the session says of its sign-in: the agent asked for one mid-session
        self._sign_in_needed = sign_in_needed
        self._answered = answered  # the agent answered a turn: it is signed in (gateway.info's auth_state)
        # (row, the turn_started event's id floor, the prompt's text) -> text blocks the agent gets first: a
        # checkpoint of the session's files is taken before the agent sees the prompt (`session_git`)
        self.before_prompt: Callable[[SessionRow, int | None, str], Awaitable[list[dict[str, Any]]]] | None = None

    def start(self, live: LiveSession, blocks: list[dict[str, Any]], meta: dict[str, Any] | None = None,
              key: str | None = None) -> asyncio.Task[dict[str, Any]]:
        """Start a turn now, or refuse (-32010). Synchronous: nothing can come between the check and the start."""
        decision = decide(Command.PROMPT, live.phase)
        if decision is CommandDecision.REFUSE_ENDED:
            raise not_resumable(live.session_id, live.row.state, f"session {live.session_id} is {live.row.state}: "
                                "start a new session")
        if decision is not CommandDecision.START_TURN:
            # An accepted turn is RUNNING for the caller even before the store says so.
            raise busy(live.session_id, SessionState.RUNNING if live.turn_running else live.row.state)
        live.prompt_sent = live.cancel_requested = False
        turn = asyncio.ensure_future(self._run(live, blocks, meta, key))
        turn.add_done_callback(_retrieve)  # nobody may be waiting any more: the outcome is in the journal
        live.turn = turn
        return turn

    def resume(self, live: LiveSession, prompt_id: int, resend: bool = False) -> asyncio.Task[dict[str, Any]]:
        """The turn a hosted agent went on with while no gateway was attached: its prompt's answer is awaited, and
        it ends as any turn. `resend`: the prompt never reached the agent (the gateway stopped between recording the
        turn and sending it); it is sent now, as the turn's `turn_started` recorded it."""
        live.prompt_sent, live.cancel_requested, live.prompt_id = not resend, False, prompt_id
        turn = asyncio.ensure_future(self._resumed(live, resend))
        turn.add_done_callback(_retrieve)
        live.turn = turn
        return turn

    async def _resumed(self, live: LiveSession, resend: bool) -> dict[str, Any]:
        row = live.row
        sent: list[dict[str, Any]] | None = None
        if resend:
            assert live.prompt_id is not None
            live.client.conn.unexpect(live.prompt_id)
            sent = await self._recorded_prompt(live)
            await self.writer.message(row, "info", "the gateway stopped before this turn's prompt reached agent "
                                      f"{live.profile.id}: sent now")
        end = await self._ask_agent(live, row, sent)
        await self._ended(live, row, end)
        return {"stop_reason": end.stop_reason}

    async def _recorded_prompt(self, live: LiveSession) -> list[dict[str, Any]]:
        """What `_run` would have sent for the running turn: its `turn_started` prompt, with the resume context where
        the session still needs one."""
        row = live.row
        blocks: list[dict[str, Any]] = []
        cursor: int | None = (row.turn_event_id or 1) - 1
        until = self.bus.head(row.owner)
        while cursor is not None and cursor < until and not blocks:
            frames, cursor = await self.store.events.after(row.owner, cursor, until, row.id)
            for frame in frames:
                data = orjson.loads(frame)["params"]
                if data.get("type") == "turn_started":
                    blocks = list(data.get("data", {}).get("prompt") or [])
                    break
        if live.needs_resume_context:
            earlier = (await self.store.history.all(row.id))[:-1]
            blocks = [{"type": "text", "text": render_resume_context(earlier, prompt_text(blocks))},
                      *(b for b in blocks if b.get("type") != "text")]
        return blocks

    async def _ended(self, live: LiveSession, row: SessionRow, end: TurnEnd) -> None:
        """The turn's end recorded; then what its caller is told when it did not end well."""
        await self._close(live, row, end)
        if end.sign_in and self._sign_in_needed is not None and not live.stopping:
            said = await self._sign_in_needed(live, end.error_message or "")
            raise agent_failed(row.id, live.profile.id, said, end.error, False)
        if end.raise_ is not None:
            raise end.raise_

    async def interrupt(self, live: LiveSession, *, stop_unanswered: bool = True) -> None:
        """cancel_turn: pending permissions answered `cancelled`, ACP `session/cancel` if a turn runs, and the
        cancel grace for it to end (docs/architecture.md: The runtime, ending a session). A turn still running after the
        grace ends anyway: its agent is stopped (`stop_unanswered`; the caller that stops the agent itself says no), the
        turn is recorded `cancelled` with what it did, and the next prompt resumes the session by the restore rules. The
        user's stop stops: `interrupt` returns once the turn has ended."""
        decision = decide(Command.CANCEL_TURN, live.phase)
        await self.broker.cancel_all(live.row)
        await self.elicitations.cancel_all(live.row)
        turn = live.turn
        if decision is not CommandDecision.INTERRUPT_TURN or turn is None:
            return
        if live.prompt_sent:  # its session/cancel is written after the prompt (one write lock, in order)
            await live.client.cancel(live.acp_session_id)
        else:  # the prompt has not gone yet: it never will
            live.cancel_requested = True
        done, _ = await asyncio.wait([turn], timeout=self.cancel_grace)
        if done or not stop_unanswered or live.stopping:
            return
        live.cancel_unanswered = True
        log.warning("session %s: agent %s did not end its turn within cancel_grace (%gs) of the cancel: stopping it",
                    live.session_id, live.profile.id, self.cancel_grace,
                    extra={"session_id": live.session_id, "agent": live.profile.id})
        await self._stop_agent(live, "cancel_unanswered")
        # The turn sees its agent gone and ends `cancelled`; stopping took at most the stop grace's stages.
        await asyncio.wait([turn], timeout=self.stop_grace + 5)

    async def _run(self, live: LiveSession, blocks: list[dict[str, Any]], meta: dict[str, Any] | None = None,
                   key: str | None = None) -> dict[str, Any]:
        row = live.row
        try:
            if SessionState(row.state) is SessionState.RUNNING:  # the last turn's end could not be stored
                await self.close_interrupted(row)
                row = live.row
            user_text = prompt_text(blocks)
            await live.history.append_now([HistoryEntry("user_message", user_text)])
            sent = blocks
            if live.needs_resume_context:
                earlier = (await self.store.history.all(row.id))[:-1]
                sent = [{"type": "text", "text": render_resume_context(earlier, user_text)},
                        *(b for b in blocks if b.get("type") != "text")]
            # RUNNING is stored before `turn_started` can be seen, with a floor of its id: a restart then knows
            # whether this turn's `turn_started` was committed (and so owes a `turn_ended`) by reading from there.
            await self.bus.refresh(row.owner)  # on a shared journal, other nodes' events of this owner come first
            updated, agent_live = await self.writer.commit(row, SessionEvent.PROMPT,
                                                           turn_event_id=self.bus.next_id(row.owner))
            # `session_status` (RUNNING) and `turn_started` are queued in one step, so one group commit holds
            # both: a frontend that saw RUNNING before a crash sees the turn end `interrupted` after it. Published
            # one after the other, a crash between the two commits left RUNNING seen, and no turn to close.
            started: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            if live.ledger is not None:  # a hosted agent: a gateway that restarts waits for this prompt's answer
                live.prompt_id = live.client.conn.next_id()
                live.ledger.expect_prompt(live.prompt_id)
            if updated is not row:
                self.writer.enqueue(updated, "session_status", status_data(updated, agent_live))
            self.writer.enqueue(updated, "turn_started", {"prompt": blocks, **({"key": key} if key else {})}, started)
            row = updated
            await started
            failpoints.reached("turn-recorded")
            if self.before_prompt is not None:
                sent = [*sent, *await self.before_prompt(row, row.turn_event_id, user_text)]  # commands stay first
            await self.writer.stage(row, "prompting")
        except Exception as exc:
            # Nothing was sent to the agent; if the row says RUNNING, it must not stay so.
            end = self._internal(row, exc)
            await self._close(live, row, end)
            assert end.raise_ is not None
            raise end.raise_ from None
        lost_before = (self.bus.lost.get(row.id, 0), live.history.failures)
        end = await self._ask_agent(live, row, sent, meta)
        await self._ended(live, row, end)
        if (self.bus.lost.get(row.id, 0), live.history.failures) != lost_before:
            # The agent finished, but the store refused part of what it said: an `end_turn` would claim a
            # turn that nobody can replay. Its end is recorded; its lost output is named here.
            raise storage_failed(f"the turn of session {row.id} ended ({end.stop_reason}), but part of its output "
                                 "is in neither its history nor its events")
        return {"stop_reason": end.stop_reason}

    async def _ask_agent(self, live: LiveSession, row: SessionRow, sent: list[dict[str, Any]] | None,
                         meta: dict[str, Any] | None = None) -> TurnEnd:
        """The prompt sent (`sent`; None: it was sent before the gateway restarted, its answer is awaited) and its
        answer, as the turn's end."""
        agent = live.profile.id
        if live.cancel_requested:
            return TurnEnd("cancelled")
        live.prompt_sent = True  # no await between this and the prompt's write
        stderr_mark = live.client.process.stderr.total_bytes  # what it says on stderr from here is this turn's
        try:
            response = await (live.client.prompt_answer(live.prompt_id) if sent is None and live.prompt_id is not None
                              else live.client.prompt(live.acp_session_id, sent or [], meta, live.prompt_id))
        except RpcError as exc:
            if live.stopping:
                return TurnEnd("cancelled", error=str(exc))
            scrubber = live.config.scrubber()  # an agent's error may repeat a secret it was given
            message = scrubber.text(f"agent {agent!r} failed the turn: {exc.message}") + limit_said(live) + stderr_said(
                live.client.process, live.profile, live.config.secrets(), since=stderr_mark)
            said = scrubber.value(exc.to_dict())
            return TurnEnd(None, said, message, agent_failed(row.id, agent, message, said, False),
                           sign_in=asks_sign_in(exc.code, exc.message))
        except TransportError as exc:
            if live.cancel_unanswered:  # stopped because the cancel went unanswered: the turn is cancelled
                message = (f"agent {agent!r} did not end the turn within {self.cancel_grace:g}s of the cancel "
                           "(cancel_grace), so it was stopped; what the turn did is kept, and the next prompt "
                           "resumes the session")
                return TurnEnd("cancelled", {"message": message}, message)
            if live.stopping:  # the session is being cancelled or stopped
                return TurnEnd("cancelled", error=str(exc))
            await self._on_agent_gone(live)
            await live.client.process.stderr_tail()
            with contextlib.suppress(TimeoutError):  # how it ended names a limit it hit
                await asyncio.wait_for(live.client.process.wait(), 2.0)
            message = (f"agent {agent!r} exited during the turn ({exc}){limit_said(live)}; the session is kept: "
                       "resume it to continue"
                       + stderr_said(live.client.process, live.profile, live.config.secrets(), since=stderr_mark))
            return TurnEnd(None, {"message": message}, message, agent_failed(row.id, agent, message, None, True))
        except Exception as exc:
            return self._internal(row, exc)
        live.needs_resume_context = False
        if self._answered is not None:
            self._answered(live)
        return TurnEnd(response.stopReason)

    @staticmethod
    def _internal(row: SessionRow, exc: Exception) -> TurnEnd:
        failed = unexpected(log, f"turn of session {row.id}", exc)
        data = failed.data or {}
        said = {"message": data["reason"]} if "reason" in data else {"message": "internal error", **data}
        return TurnEnd(None, said, None, failed)

    async def _close(self, live: LiveSession, row: SessionRow, end: TurnEnd) -> None:
        """Every update of the turn is queued and its history written; the session is stored back to input; then
        `turn_ended`, `session_status` and the `ready` stage are queued in one step, together with the turn
        being over — so a client that sees `turn_ended` and prompts at once is never told the session is busy."""
        with contextlib.suppress(Exception):
            live.history.add(live.coalescer.flush())
            await live.history.idle()
        data: dict[str, Any] = {"stop_reason": end.stop_reason}
        metrics.TURNS.labels(live.owner, live.profile.id, end.stop_reason or "error").inc()
        if end.error is not None:
            data["error"] = end.error
            if end.error_message is not None:  # in words, with what the agent said on stderr during the turn
                data["message"] = end.error_message
        fields: dict[str, Any] = {"turn_event_id": None}
        if end.stop_reason is not None or end.error_message is not None:
            fields["error_message"] = end.error_message
        if end.stop_reason is not None and not live.stopping:
            fields["needs_resume_context"] = False
        updated, agent_live = await self.writer.commit(row, SessionEvent.TURN_ENDED, **fields)
        committed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if live.ledger is not None and live.prompt_id is not None:  # its answer is settled with this group
            live.ledger.settle_prompt(live.prompt_id)
            live.prompt_id = None
        self.writer.enqueue(row, "turn_ended", data)
        if live.client.alive and not live.stopping:
            self.writer.enqueue(updated, "session_status", status_data(updated, agent_live))
            self.writer.enqueue(updated, "session_active_stage", {"stage": "ready"}, committed)
        else:
            self.writer.enqueue(updated, "session_status", status_data(updated, agent_live), committed)
        if live.turn is asyncio.current_task():
            live.turn = None  # no await since the events were queued: nobody has seen them yet
        await committed

    async def close_interrupted(self, row: SessionRow) -> None:
        """A session stored RUNNING with no turn running: a crash cut it (at start-up), or its end could not be
        stored (at the next prompt). Its `turn_ended` says `interrupted` (unless no `turn_started` was
        committed, or its `turn_ended` was), history records it, and the session waits for input."""
        floor = row.turn_event_id
        await self.bus.refresh(row.owner)  # another node may have written the turn's events
        if floor is None:  # stored by a gateway before the runtime: a turn_started is there to close
            types = ["turn_started"]
        else:
            types = await self.store.events.types_after(row.owner, row.id, TURN_EVENTS, floor - 1,
                                                        self.bus.head(row.owner))
        if owes_turn_ended(types):
            await self.store.history.append(row.id, [HistoryEntry("turn_interrupted", INTERRUPTED_MESSAGE)])
            await self.writer.publish(row, "turn_ended", {"stop_reason": "interrupted",
                                                          "error": {"message": INTERRUPTED_MESSAGE}})
        await self.writer.apply(row, SessionEvent.TURN_ENDED, turn_event_id=None, error_message=INTERRUPTED_MESSAGE)


TURN_EVENTS = frozenset({"turn_started", "turn_ended"})


def owes_turn_ended(types: list[str]) -> bool:
    """Given the types of a session's turn events from the open turn's floor on: was its (last) turn started and
    not ended? Earlier turns' events are below the floor, or (a floor taken on a node that had not seen another
    node's events yet) before the last `turn_started`."""
    if "turn_started" not in types:
        return False
    last_start = len(types) - 1 - types[::-1].index("turn_started")
    return "turn_ended" not in types[last_start:]


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()
