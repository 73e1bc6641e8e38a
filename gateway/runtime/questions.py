"""What an agent's questions to people share — permission requests (`broker.py`) and elicitations
(`elicitations.py`): one table, the answer waited for in this process, the first answer wins, a question the agent
gave up on recorded as cancelled, re-offered to every new subscriber while it is open.

A question is persisted before it is offered (so a reconnecting frontend is offered it again) and resolved in the
store first (so two answers cannot both win). It waits in this process only: after a restart no agent waits for it,
and the store expires it. Each kind says how it is offered (`offer`), what is stored and published of an answer
(`stored_answer`, `resolved_data`), what a cancel answers, and which ids of the shared table are its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import GatewayError, already_terminal, permission_not_found
from ..journal import Subscription, synthetic_frame
from ..store import SessionRow, StoreBase
from .writer import SessionWriter

Pending = tuple[str, str, int | None, dict[str, Any]]  # (request id, session id, offer's event id, params)


class QuestionBroker:
    KIND = ""  # how messages name one ("permission request", "elicitation")
    REQUESTED = ""  # its events' types
    RESOLVED = ""
    CANCELLED: dict[str, Any] = {}  # what a cancel answers

    def __init__(self, store: StoreBase, writer: SessionWriter) -> None:
        self.store = store
        self.writer = writer
        self._waiters: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}  # request id -> (session, answer)
        self._asked: dict[str, dict[str, Any]] = {}  # request id -> its `pending_view`, while it waits here
        self._resolving: set[asyncio.Task[bool]] = set()

    # -- what each kind says ------------------------------------------------------------------------------------
    def owns(self, request_id: str) -> bool:
        raise NotImplementedError

    def offer(self, request_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """What the `REQUESTED` event says of a question."""
        raise NotImplementedError

    def stored_answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        return answer

    def resolved_data(self, request_id: str, answer: dict[str, Any], by: str) -> dict[str, Any]:
        raise NotImplementedError

    def pending_view(self, request_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """What the status view's list of pending questions says of one: its id, a title, what answers it."""
        raise NotImplementedError

    # -- shared -------------------------------------------------------------------------------------------------
    def waiting(self) -> bool:
        """Whether any question waits in this process for an answer."""
        return bool(self._waiters)

    def pending(self, session_id: str) -> list[dict[str, Any]]:
        """The session's questions waiting here for an answer, oldest first (the status view's list)."""
        return [self._asked[rid] for rid, (sid, _) in self._waiters.items() if sid == session_id and rid in self._asked]

    @contextlib.contextmanager
    def _waiting(self, row: SessionRow, request_id: str) -> Iterator[asyncio.Future[dict[str, Any]]]:
        """The answer to wait for. If the waiting is cancelled (the agent gave up: it is gone, or its turn was
        cancelled), the question is recorded as answered with a cancel, on a task of its own, since this one is
        being cancelled."""
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = (row.id, waiter)
        try:
            yield waiter
        except asyncio.CancelledError:
            if not waiter.done():
                task = asyncio.ensure_future(self._resolve(row, request_id, dict(self.CANCELLED), "cancel"))
                self._resolving.add(task)
                task.add_done_callback(self._resolving.discard)
            raise
        finally:
            self._waiters.pop(request_id, None)
            self._asked.pop(request_id, None)

    async def _offered(self, row: SessionRow, request_id: str, params: dict[str, Any]) -> None:
        """Persisted, then offered to every subscriber (the event's id kept for re-offers)."""
        await self.store.permissions.add(request_id, row.id, row.owner, params)
        self._asked[request_id] = self.pending_view(request_id, params)
        event = await self.writer.publish(row, self.REQUESTED, self.offer(request_id, params))
        await self.store.permissions.set_event(request_id, event.id)

    async def _pending_params(self, row: SessionRow, request_id: str) -> dict[str, Any]:
        """The params of a question of this session still open: -32002 for another's (or another kind's), -32009
        for one already answered."""
        stored = await self.store.permissions.get(request_id) if self.owns(request_id) else None
        if stored is None or stored[0] != row.id:
            raise permission_not_found(row.id, request_id)
        _, _, state, params = stored
        if state != "pending":
            raise self._answered(row, request_id)
        return params

    def _answered(self, row: SessionRow, request_id: str) -> GatewayError:
        return already_terminal(row.id, row.state, f"{self.KIND} {request_id} was already answered (first answer "
                                "wins)")

    async def cancel_all(self, row: SessionRow) -> None:
        """Every question of the session still waiting is answered with a cancel (a cancel, a stop)."""
        for request_id, (session_id, _) in list(self._waiters.items()):
            if session_id == row.id:
                await self._resolve(row, request_id, dict(self.CANCELLED), "cancel")

    async def _resolve(self, row: SessionRow, request_id: str, answer: dict[str, Any], by: str) -> bool:
        """First answer wins: True for the one that did (the agent gets it, every subscriber hears of it)."""
        if not await self.store.permissions.resolve(request_id, self.stored_answer(answer)):
            return False
        entry = self._waiters.get(request_id)
        if entry is not None and not entry[1].done():
            entry[1].set_result(answer)
        await self.writer.publish(row, self.RESOLVED, self.resolved_data(request_id, answer, by))
        return True

    async def reoffer(self, sub: Subscription, cursor: int, pending: list[Pending]) -> None:
        """Open questions whose offer the subscriber did not just replay are offered again."""
        for request_id, session_id, event_id, params in pending:
            if request_id not in self._waiters or (event_id is not None and event_id > cursor):
                continue  # nobody waits for it here; or its offer is still to come live, or was just replayed
            row = await self.store.sessions.get(session_id)
            sub.sink.send(synthetic_frame(self.REQUESTED, {
                **self.offer(request_id, params), "reoffered": True, "event_id": event_id,
            }, session_id, row.task_id if row else None))
