"""A `session/prompt` asked again under its key after a lost connection: the turn the first ask started, and its end.

A client that lost its connection while a prompt was under way (the gateway restarted, the network dropped) does not
know whether the prompt reached the gateway, nor how its turn ended. It asks again with the same
`_meta.acpGateway.promptId` and `retry: true` (docs/acp.md, "Coming back after a lost connection"); the answer is:
  PK-1  the prompt's answer is being worked out on this gateway (the first ask, or
        another retry, of the same key)                                              -> that answer, when it comes
  PK-2  the session's journal has a turn started under that key                      -> that turn's end (awaited if it
                                                                                         still runs)
  PK-3  neither                                                                     -> the prompt never arrived: run it
A turn's end is its `turn_ended`: an ACP stop reason is answered as such; `interrupted` (the gateway stopped under a
turn it could not keep) and a failed turn are the error a failed turn gets (-32015), saying what to do.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson

from ...errors import agent_failed
from ...journal import EventBus

ACP_STOP_REASONS = frozenset({"end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"})

# (owner, session, key) -> the answer of that prompt being worked out on this gateway now (PK-1): registered before
# anything is awaited, so that asks of one key at once share one answer (the turn runs once). It outlives the
# connection that asked: the retry on a new connection awaits the same answer.
ASKING: dict[tuple[str, str, str], asyncio.Future[dict[str, Any]]] = {}


def prompt_answer(session_id: str, agent: str, ended: dict[str, Any]) -> dict[str, Any]:
    """A `turn_ended` as the answer to the `session/prompt` that started the turn (raises a failed turn's error)."""
    reason = ended.get("stop_reason")
    if reason in ACP_STOP_REASONS:
        return {"stopReason": reason}
    if reason == "interrupted":
        message = (f"the turn of session {session_id} was interrupted: the gateway stopped while it ran and its agent "
                   "did not outlive it; what the turn did is kept: prompt again to go on")
    else:
        message = str(ended.get("message") or (ended.get("error") or {}).get("message")
                      or f"agent {agent!r} failed the turn of session {session_id}")
    error = ended.get("error")
    raise agent_failed(session_id, agent, message, error if isinstance(error, dict) else None, True)


class _TurnEndSink:
    """A journal subscription's sink that waits for the first `turn_ended` of a session."""

    def __init__(self) -> None:
        self.ended: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def send(self, frame: bytes) -> None:
        pass  # caught_up, heartbeats, re-offers: nothing to wait for

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        for frame in frames:
            if b'"turn_ended"' in frame and not self.ended.done():
                event = orjson.loads(frame)["params"]
                if event["type"] == "turn_ended":
                    self.ended.set_result(event["data"])

    def full(self) -> bool:
        return False

    async def drain(self) -> None:
        pass

    def end(self, reason: str) -> None:
        if not self.ended.done():
            self.ended.set_exception(ConnectionResetError(reason))


async def turn_of_key(bus: EventBus, owner: str, session_id: str, key: str) -> dict[str, Any] | None:
    """PK-2: the `turn_ended` of the session's turn started under `key` (waiting for it while the turn runs); None
    when the journal has no such turn."""
    await bus.refresh(owner)
    head = bus.head(owner)
    cursor: int | None = await bus.store.events.horizon(owner)
    started: int | None = None
    needle = orjson.dumps(key)
    while cursor is not None and cursor < head:
        frames, cursor = await bus.store.events.after(owner, cursor, head, session_id)
        for frame in frames:
            if started is None:
                if b'"turn_started"' in frame and needle in frame:
                    event = orjson.loads(frame)["params"]
                    if event["type"] == "turn_started" and event["data"].get("key") == key:
                        started = int(event["id"])
            elif b'"turn_ended"' in frame:
                event = orjson.loads(frame)["params"]
                if event["type"] == "turn_ended":
                    return dict(event["data"])
    if started is None:
        return None
    sink = _TurnEndSink()
    sub = await bus.subscribe(owner, sink, head, session_id)
    try:
        await bus.start_replay(sub)
        return await sink.ended
    finally:
        with contextlib.suppress(Exception):
            bus.unsubscribe(sub.id)
