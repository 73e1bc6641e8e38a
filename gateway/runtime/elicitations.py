"""The elicitation broker: an agent's `elicitation/create` goes to every frontend of its owner; the first valid
answer wins, whoever asked and whoever is still connected; an answer that does not fit the requested schema is
refused and the question stays open.

Routed like permission requests, in the same table (ids `elic-…`; what they share: `questions.QuestionBroker`),
answered `cancel` with the turn. What a person typed goes to the agent only: `elicitation_resolved` says how it was
answered, never with what (a form may ask for a token).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from acp.elicitation import AnswerRefusal, Elicitation, check_answer, check_request
from acp.errors import RpcError

from ..errors import invalid_params
from ..store import SessionRow
from .questions import QuestionBroker

PREFIX = "elic-"
CANCEL: dict[str, Any] = {"action": "cancel"}


def offer(request_id: str, elicitation: Elicitation, params: dict[str, Any]) -> dict[str, Any]:
    """What `elicitation_requested` says of a question: everything a frontend needs to ask it."""
    return {"request_id": request_id, "mode": elicitation.mode, "message": elicitation.message,
            "requested_schema": elicitation.schema, "url": elicitation.url,
            "elicitation_id": elicitation.elicitation_id, "tool_call_id": elicitation.tool_call_id,
            "acp_session_id": params.get("sessionId")}


def pending_elicitation(request_id: str, elicitation: Elicitation) -> dict[str, Any]:
    """An elicitation as the status view lists it: its id, the agent's message, how it is answered."""
    return {"request_id": request_id, "title": elicitation.message, "mode": elicitation.mode,
            "requested_schema": elicitation.schema, "url": elicitation.url}


class ElicitationBroker(QuestionBroker):
    KIND = "elicitation"
    REQUESTED = "elicitation_requested"
    RESOLVED = "elicitation_resolved"
    CANCELLED = CANCEL

    def owns(self, request_id: str) -> bool:
        return request_id.startswith(PREFIX)

    def offer(self, request_id: str, params: dict[str, Any]) -> dict[str, Any]:
        return offer(request_id, check_request(params), params)

    def stored_answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        return {"action": answer["action"]}  # never the content

    def resolved_data(self, request_id: str, answer: dict[str, Any], by: str) -> dict[str, Any]:
        return {"request_id": request_id, "action": answer["action"], "by": by}

    def pending_view(self, request_id: str, params: dict[str, Any]) -> dict[str, Any]:
        return pending_elicitation(request_id, check_request(params))

    def handler(self, row_of: Callable[[], SessionRow]) -> SessionElicitations:
        """The `acp.client.ElicitationHandler` of one session (`row_of`: its current row)."""
        return SessionElicitations(self, row_of)

    async def ask(self, row: SessionRow, elicitation: Elicitation, params: dict[str, Any]) -> dict[str, Any]:
        request_id = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        with self._waiting(row, request_id) as waiter:
            await self._offered(row, request_id, params)
            return await waiter

    async def respond(self, row: SessionRow, request_id: str, action: str, content: Any) -> dict[str, Any]:
        """A frontend answers; an answer that does not fit is refused (-32602, naming the field) and the question
        stays open; the first answer that fits wins, a later one gets -32009."""
        params = await self._pending_params(row, request_id)
        try:
            elicitation = check_request(params)
        except RpcError:  # it was checked when it was asked: a stored request that no longer parses is a bug
            raise invalid_params("request_id", f"elicitation {request_id} cannot be answered") from None
        answer = check_answer(elicitation, action, content)
        if isinstance(answer, AnswerRefusal):
            raise invalid_params(answer.field, f"elicitation {request_id}: {answer.field}: {answer.message}; the "
                                 "question stays open")
        if not await self._resolve(row, request_id, answer, "user"):
            raise self._answered(row, request_id)
        return {"request_id": request_id, "action": answer["action"]}


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
