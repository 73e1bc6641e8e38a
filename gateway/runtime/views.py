"""The read side: session views, status, list and history. A live session is answered from its in-memory
view (no store round-trip); any other from the store, in one read per call."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..errors import invalid_params, not_found
from ..journal import EventBus
from ..store import SessionRow, StoreBase
from .broker import pending_permission
from .config import SessionConfig
from .elicitations import PREFIX as ELICITATION
from .live import LiveSession
from .states import SessionState
from .status import StatusFacts, committed_status, evaluate_status


def session_view(row: SessionRow, token: str | None, live: bool) -> dict[str, Any]:
    """A session as a list shows it; one session's view (`detail_view`) adds its `config`. Whether it needs a resume
    is said as its `session_status` events say it (a list after a restart shows which sessions do)."""
    decision = committed_status(SessionState(row.state), live, bool(token), row.launched, row.recovery_pending)
    return {
        "session_id": row.id,
        "name": row.name,
        "forked_from": row.forked_from,
        "task_id": row.task_id,
        "agent": row.agent,
        "agent_version": row.agent_version,
        "cwd": row.cwd,
        "worktree": {k: row.worktree.get(k) for k in ("repo", "path", "branch", "base")} if row.worktree else None,
        "host": row.host,
        "title": row.title,
        "state": row.state,
        "task_state": row.task_state,
        "error_message": row.error_message,
        "is_agent_running": live,
        "has_resume_token": bool(token),
        "acp_session_id": token,
        "needs_resume": decision.needs_resume,
        "resume_reason": decision.resume_reason.value,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def detail_view(row: SessionRow, token: str | None, live: bool, config: SessionConfig) -> dict[str, Any]:
    return {**session_view(row, token, live), "config": config.view()}


def live_summary(live: LiveSession) -> dict[str, Any]:
    """A live session as a list shows it, from memory: its row as last committed and the token its agent runs."""
    return session_view(live.row, live.acp_session_id, True)


def live_view(live: LiveSession) -> dict[str, Any]:
    """A live session's view, from memory (its configuration's view is made once per change)."""
    return detail_view(live.row, live.acp_session_id, True, live.config)


class SessionViews:
    def __init__(self, store: StoreBase, bus: EventBus, live: dict[str, LiveSession], instance_id: str,
                 stale_window: float, pending_permissions: Callable[[str], list[dict[str, Any]]],
                 pending_elicitations: Callable[[str], list[dict[str, Any]]],
                 held_elsewhere: Callable[[str], Awaitable[str | None]] | None = None,
                 running_elsewhere: Callable[[list[str]], Awaitable[set[str]]] | None = None) -> None:
        self.store = store
        self.bus = bus
        self.live = live
        self.instance_id = instance_id
        self.stale_window = stale_window
        self._pending_permissions = pending_permissions  # a live session's questions, as the status lists them
        self._pending_elicitations = pending_elicitations  # open only while the agent waits: live sessions only
        self._held_elsewhere = held_elsewhere  # a cluster: the node holding a session's lease, if another
        self._running_elsewhere = running_elsewhere  # a cluster: which of these sessions run on other nodes

    def _live(self, owner: str, session_id: str) -> LiveSession | None:
        live = self.live.get(session_id)
        return live if live is not None and live.owner == owner else None

    async def row(self, owner: str, session_id: str) -> SessionRow:
        live = self._live(owner, session_id)
        if live is not None:
            return live.row
        row = await self.store.sessions.get(session_id, owner)
        if row is None:
            raise not_found(session_id)
        return row

    async def get(self, owner: str, session_id: str) -> dict[str, Any]:
        return await self.view(await self.row(owner, session_id))  # a live session's without I/O

    async def view(self, row: SessionRow) -> dict[str, Any]:
        live = self.live.get(row.id)
        if live is not None:
            return live_view(live)
        executor = await self.store.executors.get(row.id)
        config = SessionConfig.from_row(await self.store.configs.get(row.id))
        return detail_view(row, executor.resume_token if executor else None, await self._elsewhere(row.id), config)

    async def _elsewhere(self, session_id: str) -> bool:
        """In a cluster: the session's agent runs on another node."""
        return self._held_elsewhere is not None and await self._held_elsewhere(session_id) is not None

    async def status(self, owner: str, session_id: str) -> dict[str, Any]:
        live = self._live(owner, session_id)
        if live is not None:
            # Case 1 of `evaluate_status`, written out: building its frozen facts and decision cost ~8% of a
            # live status call under 8 clients (measured with `make bench`), the frontends' most frequent call.
            return {**live_view(live), "needs_resume": False, "is_resumable": True,
                    "resume_reason": "agent_running", "pending_permissions": self._pending_permissions(session_id),
                    "pending_elicitations": self._pending_elicitations(session_id)}
        found = await self.store.sessions.with_status_facts(session_id, owner)
        if found is None:
            raise not_found(session_id)
        row, executor, pending_count, config = found
        other_seen_ago = None
        elsewhere = await self._elsewhere(session_id)
        if self._held_elsewhere is not None:  # case 2 in a cluster: another node holds an unexpired lease
            other_seen_ago = 0.0 if elsewhere else None
        elif (executor is not None and executor.status == "running" and executor.instance_id
                and executor.instance_id != self.instance_id
                and await self.store.instances.is_alive(executor.instance_id)):
            other_seen_ago = time.time() - executor.last_seen
        token = executor.resume_token if executor else None
        decision = evaluate_status(StatusFacts(
            state=SessionState(row.state), has_token=bool(token), executor_exists=executor is not None and row.launched,
            live_here=False, other_owner_seen_ago=other_seen_ago, stale_window=self.stale_window,
            recovery_pending=row.recovery_pending))
        return {**detail_view(row, token, elsewhere, SessionConfig.from_row(config)),
                "needs_resume": decision.needs_resume,
                "is_resumable": decision.is_resumable, "resume_reason": decision.resume_reason.value,
                "pending_permissions": await self._stored_pending(owner, session_id) if pending_count else [],
                "pending_elicitations": []}

    async def _stored_pending(self, owner: str, session_id: str) -> list[dict[str, Any]]:
        """The permission requests the store holds open for a session whose agent does not run here (another node
        of a cluster waits for their answers), as the status lists them."""
        return [pending_permission(request_id, params) for request_id, _, _, params
                in await self.store.permissions.pending(owner, session_id) if not request_id.startswith(ELICITATION)]

    async def list(self, owner: str, *, states: list[str] | None, limit: int, cursor: str | None,
                   cwd: str | None = None) -> dict[str, Any]:
        before = None
        if cursor is not None:
            try:
                before = int(cursor)
            except ValueError:
                before = -1
            if not 0 <= before < 2**63:  # SQLite's integers: anything else is not a cursor we issued
                raise invalid_params("cursor", "cursor is not one this gateway issued")
        event_cursor = self.bus.head(owner)  # committed and handed out: subscribing from it misses nothing
        rows = await self.store.sessions.list(owner, states=states, before_seq=before, limit=limit + 1, cwd=cwd)
        more = len(rows) > limit
        rows = rows[:limit]
        elsewhere = (await self._running_elsewhere([row.id for row, _ in rows if row.id not in self.live])
                     if self._running_elsewhere is not None else set())
        views = []
        for row, executor in rows:
            live = self.live.get(row.id)
            views.append(live_summary(live) if live is not None
                         else session_view(row, executor.resume_token if executor else None, row.id in elsewhere))
        return {"sessions": views, "next_cursor": str(rows[-1][0].seq) if more and rows else None,
                "event_cursor": event_cursor}

    # At most this many of the owner's event ids are looked through per call: a session's events are spread over
    # the owner's journal, and one call must not read all of it (the caller asks again from `next`).
    EVENTS_SCAN_IDS = 50_000
    # A page holds at most this many bytes of events (and always one): an agent's message may be megabytes, and
    # 2000 of them must not be one answer.
    EVENTS_PAGE_BYTES = 8 << 20

    async def events(self, owner: str, session_id: str, after: int, limit: int) -> dict[str, Any]:
        """The session's events from the journal, oldest first: one ordered source a frontend renders its transcript
        from, then goes on with live events past `cursor`."""
        row = await self.row(owner, session_id)
        head = self.bus.head(owner)
        horizon = await self.store.events.horizon(owner)
        cursor: int | None = max(after, horizon)
        budget_end = min(head, (cursor or 0) + self.EVENTS_SCAN_IDS)
        events: list[dict[str, Any]] = []
        size = 0
        next_after: int | None = None
        while cursor is not None and cursor < budget_end:
            frames, following = await self.store.events.after(owner, cursor, budget_end, session_id=row.id)
            for frame in frames:
                if len(events) == limit or (events and size + len(frame) > self.EVENTS_PAGE_BYTES):
                    next_after = events[-1]["id"]
                    break
                size += len(frame)
                events.append(orjson.loads(frame)["params"])
            if next_after is not None:
                break
            cursor = following
        if next_after is None and budget_end < head:
            next_after = budget_end
        complete = horizon == 0 or (after == 0 and bool(events) and events[0]["type"] == "session_created")
        return {"events": events, "next": next_after, "cursor": head, "complete": complete}

    async def history(self, owner: str, session_id: str, after: int, limit: int) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        entries = await self.store.history.page(row.id, after, limit + 1)
        more = len(entries) > limit
        entries = entries[:limit]
        return {
            "entries": [{"id": e.id, "kind": e.kind, "name": e.name, "content": e.content, "ts": e.ts}
                        for e in entries],
            "next": entries[-1].id if more and entries else None,
        }
