"""Forwarding commands between the nodes of a cluster (DESIGN §10): a call on one node, run on another.

Every command is sealed with the cluster secret and checked before it runs (`command_seal`): a row someone else
wrote into the table is discarded and logged. `Forwarder.call` sends a request to a node and waits for its answer:
the result, or the GatewayError the other node answered (code, message and data as they were). It stops waiting,
with a clear error, when `still_there` says the target is gone (its lease on the session expired: it died
mid-call). The same forwarder runs what is sent to this node with `run`, each request once, however often it is
woken. Rows in the store carry the requests
(`CommandRepo`); NOTIFY wakes both sides and a poll stands behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..command_seal import SeenCommands, judge
from ..errors import GatewayError, unexpected
from ..store.commands import COMMANDS_CHANNEL
from ..store.postgres import PostgresStore

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class TargetGone(Exception):
    """The node a call was sent to stopped holding what it was asked about before it answered."""


class Forwarder:
    def __init__(self, store: PostgresStore, node: str, run: Handler, secret: bytes, poll: float = 0.5) -> None:
        self.store = store
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
        try:
            while True:
                answer = await self.store.commands.take_answer(command_id)
                if answer is not None:
                    if "error" in answer:
                        error = answer["error"]
                        raise GatewayError(int(error["code"]), str(error["message"]), error.get("data"))
                    return answer.get("result")
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
            await self.store.commands.answer(command_id, sender, answer)
        except Exception as exc:
            log.warning("answering forwarded command %s failed: %s", command_id, exc)
