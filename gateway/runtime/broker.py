"""The permission broker: an agent's `session/request_permission` goes to the profile's policy, else to every
frontend; the first answer wins, whoever asked and whoever is still connected.

Requests are persisted before they are offered (so a reconnecting frontend is offered them again) and
resolved in the store first (so two answers cannot both win). A pending request waits in this process
only: after a restart no agent waits for it, and the store expires it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from agents.profiles import AgentProfile

from ..errors import already_terminal, invalid_params, permission_not_found
from ..events import Subscription, synthetic_frame
from ..store import SessionRow, StoreBase
from .permissions import CANCELLED, decide_permission, option_ids, refusal, selected
from .writer import SessionWriter


class PermissionBroker:
    def __init__(self, store: StoreBase, writer: SessionWriter, profiles: Callable[[str], AgentProfile | None]) -> None:
        self.store = store
        self.writer = writer
        self.profiles = profiles
        self._waiters: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}  # request id -> (session, answer)
        self._resolving: set[asyncio.Task[bool]] = set()

    def waiting(self) -> bool:
        """Whether any request waits in this process for an answer."""
        return bool(self._waiters)

    def pending_count(self, session_id: str) -> int:
        return sum(1 for sid, _ in self._waiters.values() if sid == session_id)

    async def ask(self, row: SessionRow, params: dict[str, Any]) -> dict[str, Any]:
        """An agent asks (called on the agent's request task): the answer to send back to it."""
        profile = self.profiles(row.agent)
        policy = profile.permission_policy if profile else "ask"
        request_id = f"perm-{uuid.uuid4().hex[:12]}"
        tool_call = params.get("toolCall")
        decided = decide_permission(policy, params)
        if decided is not None:
            await self.writer.publish(row, "permission_resolved", {
                "request_id": request_id, "outcome": decided, "by": "policy", "policy": policy,
                "tool_call": tool_call})
            return decided
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[request_id] = (row.id, waiter)
        try:
            await self.store.permissions.add(request_id, row.id, row.owner, params)
            event = await self.writer.publish(row, "permission_requested", {
                "request_id": request_id, "tool_call": tool_call, "options": params.get("options"),
                "acp_session_id": params.get("sessionId")})
            await self.store.permissions.set_event(request_id, event.id)
            timeout = profile.permission_timeout if profile else None
            if timeout is not None:
                try:
                    return await asyncio.wait_for(asyncio.shield(waiter), timeout)
                except TimeoutError:
                    answer = refusal(params)
                    if await self._resolve(row, request_id, answer, "timeout"):
                        return answer
            return await waiter
        except asyncio.CancelledError:
            # The ACP client gave up on the request (the agent is gone or the turn was cancelled):
            # record it as answered `cancelled` on a task of its own, since this one is being cancelled.
            if not waiter.done():
                task = asyncio.ensure_future(self._resolve(row, request_id, dict(CANCELLED), "cancel"))
                self._resolving.add(task)
                task.add_done_callback(self._resolving.discard)
            raise
        finally:
            self._waiters.pop(request_id, None)

    async def respond(self, row: SessionRow, request_id: str, option_id: str | None,
                      cancelled: bool) -> dict[str, Any]:
        """A frontend answers; the first answer wins, a later one gets -32009."""
        stored = None if request_id.startswith("elic-") else await self.store.permissions.get(request_id)
        if stored is None or stored[0] != row.id:  # (the table holds elicitations too: `elic-…`)
            raise permission_not_found(row.id, request_id)
        _, _, state, params = stored
        if state != "pending":
            raise already_terminal(row.id, row.state, f"permission request {request_id} was already answered "
                                   "(first answer wins)")
        if cancelled == (option_id is not None):
            raise invalid_params("option_id", "give exactly one of option_id or cancelled: true")
        if option_id is not None and option_id not in option_ids(params):
            raise invalid_params("option_id", f"option_id {option_id!r} is not one of {option_ids(params)}")
        answer = dict(CANCELLED) if cancelled else selected(option_id or "")
        if not await self._resolve(row, request_id, answer, "user"):
            raise already_terminal(row.id, row.state, f"permission request {request_id} was already answered "
                                   "(first answer wins)")
        return {"request_id": request_id, "outcome": answer}

    async def cancel_all(self, row: SessionRow) -> None:
        """Every request of the session still waiting is answered `cancelled` (a cancel, a stop)."""
        for request_id, (session_id, _) in list(self._waiters.items()):
            if session_id == row.id:
                await self._resolve(row, request_id, dict(CANCELLED), "cancel")

    async def _resolve(self, row: SessionRow, request_id: str, answer: dict[str, Any], by: str) -> bool:
        if not await self.store.permissions.resolve(request_id, answer):
            return False
        entry = self._waiters.get(request_id)
        if entry is not None and not entry[1].done():
            entry[1].set_result(answer)
        await self.writer.publish(row, "permission_resolved", {"request_id": request_id, "outcome": answer, "by": by})
        return True

    async def reoffer(self, sub: Subscription, cursor: int,
                      pending: list[tuple[str, str, int | None, dict[str, Any]]]) -> None:
        """Pending requests whose offer the subscriber did not just replay are offered again."""
        for request_id, session_id, event_id, params in pending:
            if request_id not in self._waiters:
                continue
            if event_id is not None and event_id > cursor:
                continue  # still to come live, or just replayed
            row = await self.store.sessions.get(session_id)
            sub.sink.send(synthetic_frame("permission_requested", {
                "request_id": request_id, "tool_call": params.get("toolCall"), "options": params.get("options"),
                "acp_session_id": params.get("sessionId"), "reoffered": True, "event_id": event_id,
            }, session_id, row.task_id if row else None))
