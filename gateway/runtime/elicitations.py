"""The elicitation broker: an agent's `elicitation/create` goes to every frontend of its owner; the first valid
answer wins, whoever asked and whoever is still connected; an answer that does not fit the requested schema is
refused and the question stays open.

Routed like permission requests (`broker.py`), in the same table (ids `elic-…`): persisted before they are
offered (so a reconnecting frontend is offered them again), resolved in the store first (so two answers cannot both
win), answered `cancel` with the turn. What a person typed goes to the agent only: `elicitation_resolved` says
how it was answered, never with what (a form may ask for a token).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from acp.elicitation import Elicitation, Refusal, check_answer, check_request
from acp.errors import RpcError

from ..errors import already_terminal, invalid_params, permission_not_found
from ..events import Subscription, synthetic_frame
from ..store import SessionRow, StoreBase
from .writer import SessionWriter

PREFIX = "elic-"
CANCEL: dict[str, Any] = {"action": "cancel"}


def offer(request_id: str, elicitation: Elicitation, params: dict[str, Any]) -> dict[str, Any]:
    """What `elicitation_requested` says of a question: everything a frontend needs to ask it."""
    return {"request_id": request_id, "mode": elicitation.mode, "message": elicitation.message,
            "requested_schema": elicitation.schema, "url": elicitation.url,
            "elicitation_id": elicitation.elicitation_id, "tool_call_id": elicitation.tool_call_id,
            "acp_session_id": params.get("sessionId")}


class ElicitationBroker:
    def __init__(self, store: StoreBase, writer: SessionWriter) -> None:
        self.store = store
        self.writer = writer
        self._waiters: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}  # request id -> (session, answer)
        self._resolving: set[asyncio.Task[bool]] = set()

    def waiting(self) -> bool:
        """Whether any request waits in this process for an answer."""
        return bool(self._waiters)

    def pending_count(self, session_id: str) -> int:
        return sum(1 for sid, _ in self._waiters.values() if sid == session_id)

    def handler(self, row_of: Callable[[], SessionRow]) -> SessionElicitations:
        """The `acp.client.ElicitationHandler` of one session (`row_of`: its current row)."""
        return SessionElicitations(self, row_of)

    async def ask(self, row: SessionRow, elicitation: Elicitation, params: dict[str, Any]) -> dict[str, Any]:
        request_id = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = (row.id, waiter)
        try:
            await self.store.permissions.add(request_id, row.id, row.owner, params)
            event = await self.writer.publish(row, "elicitation_requested", offer(request_id, elicitation, params))
            await self.store.permissions.set_event(request_id, event.id)
            return await waiter
        except asyncio.CancelledError:  # the agent gave up (its turn cancelled, it stopped): recorded as cancel
            if not waiter.done():
                task = asyncio.ensure_future(self._resolve(row, request_id, dict(CANCEL), "cancel"))
                self._resolving.add(task)
                task.add_done_callback(self._resolving.discard)
            raise
        finally:
            self._waiters.pop(request_id, None)

    async def respond(self, row: SessionRow, request_id: str, action: str, content: Any) -> dict[str, Any]:
        """A frontend answers; an answer that does not fit is refused (-32602, naming the field) and the question
        stays open; the first answer that fits wins, a later one gets -32009."""
        stored = await self.store.permissions.get(request_id) if request_id.startswith(PREFIX) else None
        if stored is None or stored[0] != row.id:
            raise permission_not_found(row.id, request_id)
        _, _, state, params = stored
        if state != "pending":
            raise already_terminal(row.id, row.state, f"elicitation {request_id} was already answered "
                                   "(first answer wins)")
        try:
            elicitation = check_request(params)
        except RpcError:  # it was checked when it was asked: a stored request that no longer parses is a bug
            raise invalid_params("request_id", f"elicitation {request_id} cannot be answered") from None
        answer = check_answer(elicitation, action, content)
        if isinstance(answer, Refusal):
            raise invalid_params(answer.field, f"elicitation {request_id}: {answer.field}: {answer.message}; the "
                                 "question stays open")
        if not await self._resolve(row, request_id, answer, "user"):
            raise already_terminal(row.id, row.state, f"elicitation {request_id} was already answered "
                                   "(first answer wins)")
        return {"request_id": request_id, "action": answer["action"]}

    async def cancel_all(self, row: SessionRow) -> None:
        """Every question of the session still open is answered `cancel` (a cancel, a stop)."""
        for request_id, (session_id, _) in list(self._waiters.items()):
            if session_id == row.id:
                await self._resolve(row, request_id, dict(CANCEL), "cancel")

    async def _resolve(self, row: SessionRow, request_id: str, answer: dict[str, Any], by: str) -> bool:
        if not await self.store.permissions.resolve(request_id, {"action": answer["action"]}):  # never the content
            return False
        entry = self._waiters.get(request_id)
        if entry is not None and not entry[1].done():
            entry[1].set_result(answer)
        await self.writer.publish(row, "elicitation_resolved", {"request_id": request_id, "action": answer["action"],
                                                                "by": by})
        return True

    async def reoffer(self, sub: Subscription, cursor: int,
                      pending: list[tuple[str, str, int | None, dict[str, Any]]]) -> None:
        """Open questions whose offer the subscriber did not just replay are offered again."""
        for request_id, session_id, event_id, params in pending:
            if request_id not in self._waiters or (event_id is not None and event_id > cursor):
                continue
            row = await self.store.sessions.get(session_id)
            sub.sink.send(synthetic_frame("elicitation_requested", {
                **offer(request_id, check_request(params), params), "reoffered": True, "event_id": event_id,
            }, session_id, row.task_id if row else None))


class SessionElicitations:
    """One live session's `acp.client.ElicitationHandler`."""

    def __init__(self, broker: ElicitationBroker, row_of: Callable[[], SessionRow]) -> None:
        self.broker = broker
        self.row_of = row_of

    async def ask(self, elicitation: Elicitation, params: dict[str, Any]) -> dict[str, Any]:
        return await self.broker.ask(self.row_of(), elicitation, params)

    def completed(self, params: dict[str, Any]) -> None:
        row = self.row_of()
        self.broker.writer.enqueue(row, "elicitation_completed", {"elicitation_id": params["elicitationId"]})
