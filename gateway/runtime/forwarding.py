"""Forwarding commands between the nodes of a cluster (docs/architecture.md: Cluster): a call on one node, run on
another.

Every command is sealed with the cluster secret and checked before it runs (`command_seal`): a row someone else
wrote into the table is discarded and logged. `Forwarder.call` sends a request to a node and waits for its answer:
the result, or the GatewayError the other node answered (code, message and data as they were). It stops waiting,
with a clear error, when `still_there` says the target is gone (its lease on the session expired: it died
mid-call), when the target has not taken the command within `claim_timeout` (it is down, or holds another
`cluster_secret` and refuses what this node seals), when the command's row disappears (refused, or deleted by
someone else), or when its answer does not verify as the target's (written by someone else): never a hang, never a
forged answer. The same forwarder runs what is sent to this node with `run`, each request once, however often it is
woken. Rows in the store carry the requests
(`CommandRepo`); NOTIFY wakes both sides and a poll stands behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import GatewayError, unexpected
from ..store.command_seal import SeenCommands, judge
from ..store.commands import COMMANDS_CHANNEL

if TYPE_CHECKING:  # the PostgreSQL store (asyncpg) is loaded only when a cluster opens one
    from ..store.postgres import PostgresStore

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class TargetGone(Exception):
    """The node a call was sent to stopped holding what it was asked about before it answered."""


class ForwardFailed(Exception):
    """A forwarded command that came to no answer the caller may believe: why, in words for the caller."""


class Forwarder:
    def __init__(self, store: PostgresStore, node: str, run: Handler, secret: bytes, poll: float = 0.5,
                 claim_timeout: float = 30.0) -> None:
        self.store = store
        self.claim_timeout = claim_timeout
        self.node = node
        self.secret = secret
        self.seen = SeenCommands()
        self.run = run
        self.poll = poll
        self._commands = asyncio.Event()
        self._answers: dict[str, asyncio.Event] = {}
        self._serving: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.store.commands.sweep()
        await self.store.hear(COMMANDS_CHANNEL, self._heard)
        self._serving = asyncio.ensure_future(self._serve())

    async def close(self) -> None:
        if self._serving is not None:
            self._serving.cancel()
            with contextlib.suppress(BaseException):
                await self._serving
        for task in list(self._running):
            task.cancel()

    def _heard(self, payload: str) -> None:
        kind, _, rest = payload.partition(" ")
        if kind == "command" and rest == self.node:
            self._commands.set()
        elif kind == "answer":
            sender, _, command_id = rest.partition(" ")
            if sender == self.node and command_id in self._answers:
                self._answers[command_id].set()

    # -- sending -----------------------------------------------------------------------------------------------
    async def call(self, target: str, request: dict[str, Any],
                   still_there: Callable[[], Awaitable[bool]] | None = None) -> Any:
        command_id = await self.store.commands.submit(target, self.node, request, self.secret)
        woken = self._answers[command_id] = asyncio.Event()
        sent = time.monotonic()
        method = request.get("method")
        try:
            while True:
                found = await self.store.commands.take_answer(command_id, target, self.node, self.secret)
                if found.state == "done":
                    if not found.sealed or found.answer is None:
                        log.warning("the answer to forwarded command %s (%s, run by %s) is not sealed by that node: "
                                    "not believed", command_id, method, target)
                        raise ForwardFailed(f"the answer node {target} gave to {method} did not verify (it was not "
                                            "written by that node): it is not believed; check the session's state")
                    answer = found.answer
                    if "error" in answer:
                        error = answer["error"]
                        raise GatewayError(int(error["code"]), str(error["message"]), error.get("data"))
                    return answer.get("result")
                if found.state == "missing":
                    raise ForwardFailed(f"node {target} refused {method} (or its command was removed from the "
                                        "database before it was answered): do the nodes share one cluster_secret?")
                if found.state == "pending" and time.monotonic() - sent > self.claim_timeout:
                    if await self.store.commands.withdraw(command_id):
                        raise ForwardFailed(f"node {target} did not take {method} within forward_timeout "
                                            f"({self.claim_timeout:g} s): is it running, with this node's "
                                            "cluster_secret?")
                if still_there is not None and not await still_there():
                    await self.store.commands.withdraw(command_id)
                    raise TargetGone(target)
                woken.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), self.poll)
        except asyncio.CancelledError:
            await asyncio.shield(self.store.commands.withdraw(command_id))
            raise
        finally:
            self._answers.pop(command_id, None)

    # -- running what was sent here ----------------------------------------------------------------------------
    async def _serve(self) -> None:
        while True:
            try:
                claimed = await self.store.commands.claim(self.node)
            except Exception as exc:
                log.warning("claiming forwarded commands failed (retrying): %s", exc)
                claimed = []
            for command in claimed:
                refused = judge(self.secret, command.id, command.target, command.sender, command.request,
                                command.mac, command.expires_at, time.time(), self.seen)
                if refused is not None or command.target != self.node:
                    log.warning("forwarded command %s (from %r) not run: %s", command.id, command.sender,
                                refused or "addressed to another node")
                    await self.store.commands.discard(command.id)
                    continue
                task = asyncio.ensure_future(self._run_one(command.id, command.sender, orjson.loads(command.request)))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            if not claimed:
                self._commands.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._commands.wait(), self.poll)

    async def _run_one(self, command_id: str, sender: str, request: dict[str, Any]) -> None:
        try:
            answer: dict[str, Any] = {"result": await self.run(request)}
        except GatewayError as err:
            answer = {"error": {"code": err.code, "message": err.message, "data": err.data}}
        except Exception as exc:
            bug = unexpected(log, f"forwarded {request.get('method')} failed", exc)
            answer = {"error": {"code": bug.code, "message": bug.message, "data": bug.data}}
        try:
            await self.store.commands.answer(command_id, self.node, sender, answer, self.secret)
        except Exception as exc:
            log.warning("answering forwarded command %s failed: %s", command_id, exc)
