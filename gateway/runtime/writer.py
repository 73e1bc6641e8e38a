"""The write path: every change of a session is persisted first, then published as the event announcing it.

`SessionWriter.apply` is the one place a session's state changes: the pure tables of `states` decide,
the store commits, the live session's in-memory view is refreshed, and only then is `session_status`
published. `HistoryWriter` appends a live session's history off the update path.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any, Literal

from ..errors import log_fault
from ..journal import EventBus
from ..store import EventRow, HistoryEntry, SessionRow, StoreBase
from .states import SessionEvent, SessionState, TaskState, transition
from .status import ResumeReason, committed_status

log = logging.getLogger(__name__)

# `session_message` codes (docs/api.md): what a message says, for frontends that show it other than as text.
MessageCode = Literal["agent_kept_running", "files_rewound", "branch_merged"]
KEPT_RUNNING: MessageCode = "agent_kept_running"  # an agent host kept the agent (and its turn) through a restart
REWOUND: MessageCode = "files_rewound"  # the session's files were put back as at a checkpoint (docs/worktrees.md)
MERGED: MessageCode = "branch_merged"  # its worktree's branch was merged into its base


class SessionWriter:
    def __init__(self, store: StoreBase, bus: EventBus, on_row: Callable[[SessionRow], bool]) -> None:
        self.store = store
        self.bus = bus
        # Called with each committed row; answers whether the session's agent is live (and keeps its view).
        self._on_row = on_row
        # A lock per session while anyone holds or waits for it (whoever does keeps it alive): no map that
        # grows with every session ever touched.
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def apply(self, row: SessionRow, event: SessionEvent | None, **fields: Any) -> SessionRow:
        """Apply one transition (and the task event paired with it), persist it, then publish `session_status`.
        A session deleted meanwhile is left as it is."""
        updated, live = await self.commit(row, event, **fields)
        if updated is not row:
            await self.publish(updated, "session_status", status_data(updated, live))
        return updated

    async def commit(self, row: SessionRow, event: SessionEvent | None, **fields: Any) -> tuple[SessionRow, bool]:
        """The store half of `apply`: the committed row, and whether its agent is live. The caller publishes."""
        lock = self._locks.get(row.id)
        if lock is None:
            lock = self._locks[row.id] = asyncio.Lock()
        async with lock:
            current = await self.store.sessions.get(row.id)
            if current is None:
                return row, False
            state = task_state = None
            if event is not None:
                state, task_state = transition(SessionState(current.state), TaskState(current.task_state), event)
            await self.store.sessions.update(row.id, state=state, task_state=task_state, **fields)
            updated = await self.store.sessions.get(row.id)
            assert updated is not None
            return updated, self._on_row(updated)

    async def publish(self, row: SessionRow, type_: str, data: dict[str, Any]) -> EventRow:
        return await self.bus.publish(type_, row.owner, row.id, row.task_id, data)

    def enqueue(self, row: SessionRow, type_: str, data: dict[str, Any],
                committed: asyncio.Future[EventRow] | None = None) -> int:
        """Queue an event without waiting for its commit; its id is fixed now and returned. `committed`, when
        given, is resolved once the event is committed and handed out."""
        return self.bus.enqueue(type_, row.owner, row.id, row.task_id, data, committed)

    async def stage(self, row: SessionRow, stage: str) -> None:
        await self.publish(row, "session_active_stage", {"stage": stage})

    async def message(self, row: SessionRow, level: str, text: str, code: MessageCode | None = None) -> None:
        """A `session_message`; `code` names what it says for frontends that show it other than as text."""
        await self.publish(row, "session_message", {"level": level, "text": text, **({"code": code} if code else {})})


def status_data(row: SessionRow, live: bool, has_token: bool | None = None) -> dict[str, Any]:
    """What `session_status` says of a committed row: its states, and — one shape for every such event — whether it
    needs a resume and why, by the status rules (`status.evaluate_status`). `has_token`: whether an ACP session is
    saved for it (None: not read; a session launched before has one)."""
    data = {"state": row.state, "task_state": row.task_state, "error_message": row.error_message,
            "is_agent_running": live}
    if live:  # case 1 of the rules, written out: this is on every turn's path
        return {**data, "needs_resume": False, "resume_reason": ResumeReason.AGENT_RUNNING.value}
    decision = committed_status(SessionState(row.state), False, row.launched if has_token is None else has_token,
                                row.launched, row.recovery_pending)
    return {**data, "needs_resume": decision.needs_resume, "resume_reason": decision.resume_reason.value}


class HistoryWriter:
    """Appends a session's history entries in order, off the update path; `idle()` waits for the writes."""

    def __init__(self, store: StoreBase, session_id: str, on_written: Callable[[int], None] | None = None) -> None:
        self.store = store
        self.session_id = session_id
        self.on_written = on_written  # the bytes of each batch written (the owner's history quota counts them)
        self._pending: list[HistoryEntry] = []
        self._task: asyncio.Task[None] | None = None
        self.failures = 0  # writes the store refused: a turn that lost history says so

    def add(self, entries: list[HistoryEntry]) -> None:
        if not entries:
            return
        self._pending.extend(entries)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self.append_now(batch)
            except Exception as exc:
                self.failures += 1
                log_fault(log, f"session {self.session_id}: history not written", exc)

    async def append_now(self, entries: list[HistoryEntry]) -> None:
        """Append `entries` at once (not queued behind the others), counted like the rest."""
        await self.store.history.append(self.session_id, entries)
        if self.on_written is not None:
            self.on_written(sum(len(e.content.encode()) + len(e.name.encode()) for e in entries))

    async def idle(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
