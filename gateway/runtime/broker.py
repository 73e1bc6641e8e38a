"""The permission broker: an agent's `session/request_permission` goes to the profile's policy, else to every
frontend; the first answer wins, whoever asked and whoever is still connected (what it shares with elicitations:
`questions.QuestionBroker`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from agents.profiles import AgentProfile

from ..errors import invalid_params
from ..store import SessionRow, StoreBase
from .elicitations import PREFIX as ELICITATION_PREFIX
from .permissions import CANCELLED, decide_permission, option_ids, refusal, selected
from .questions import QuestionBroker
from .writer import SessionWriter


def pending_permission(request_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """A permission request as the status view lists it: its id, the tool call's title, the options to answer with."""
    found = params.get("toolCall")
    call: dict[str, Any] = found if isinstance(found, dict) else {}
    options = [o for o in params.get("options") or [] if isinstance(o, dict)]
    title = call.get("title")
    return {"request_id": request_id, "title": title if isinstance(title, str) else None,
            "tool_call_id": call.get("toolCallId") if isinstance(call.get("toolCallId"), str) else None,
            "options": [{"option_id": str(o.get("optionId")), "name": str(o.get("name") or o.get("optionId")),
                         "kind": str(o.get("kind") or "")} for o in options]}


class PermissionBroker(QuestionBroker):
    KIND = "permission request"
    REQUESTED = "permission_requested"
    RESOLVED = "permission_resolved"
    CANCELLED = CANCELLED

    def __init__(self, store: StoreBase, writer: SessionWriter, profiles: Callable[[str], AgentProfile | None]) -> None:
        super().__init__(store, writer)
        self.profiles = profiles

    def owns(self, request_id: str) -> bool:
        return not request_id.startswith(ELICITATION_PREFIX)  # (the table holds elicitations too)

    def offer(self, request_id: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"request_id": request_id, "tool_call": params.get("toolCall"), "options": params.get("options"),
                "acp_session_id": params.get("sessionId")}

    def resolved_data(self, request_id: str, answer: dict[str, Any], by: str) -> dict[str, Any]:
        return {"request_id": request_id, "outcome": answer, "by": by}

    def pending_view(self, request_id: str, params: dict[str, Any]) -> dict[str, Any]:
        return pending_permission(request_id, params)

    async def ask(self, row: SessionRow, params: dict[str, Any]) -> dict[str, Any]:
        """An agent asks (called on the agent's request task): the answer to send back to it."""
        profile = self.profiles(row.agent)
        policy = profile.permission_policy if profile else "ask"
        request_id = f"perm-{uuid.uuid4().hex[:12]}"
        decided = decide_permission(policy, params)
        if decided is not None:
            await self.writer.publish(row, "permission_resolved", {
                "request_id": request_id, "outcome": decided, "by": "policy", "policy": policy,
                "tool_call": params.get("toolCall")})
            return decided
        with self._waiting(row, request_id) as waiter:
            await self._offered(row, request_id, params)
            timeout = profile.permission_timeout if profile else None
            if timeout is not None:
                try:
                    return await asyncio.wait_for(asyncio.shield(waiter), timeout)
                except TimeoutError:
                    answer = refusal(params)
                    if await self._resolve(row, request_id, answer, "timeout"):
                        return answer
            return await waiter

    async def respond(self, row: SessionRow, request_id: str, option_id: str | None,
                      cancelled: bool) -> dict[str, Any]:
        """A frontend answers; the first answer wins, a later one gets -32009."""
        params = await self._pending_params(row, request_id)
        if cancelled == (option_id is not None):
            raise invalid_params("option_id", "give exactly one of option_id or cancelled: true")
        if option_id is not None and option_id not in option_ids(params):
            raise invalid_params("option_id", f'option_id "{option_id}" is not one of: {", ".join(option_ids(params))}')
        answer = dict(CANCELLED) if cancelled else selected(option_id or "")
        if not await self._resolve(row, request_id, answer, "user"):
            raise self._answered(row, request_id)
        return {"request_id": request_id, "outcome": answer}
