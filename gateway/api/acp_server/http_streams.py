"""Where what the gateway sends on a Streamable HTTP `/acp` connection goes: the connection's event stream, or a
session's (the RFD routes by `Acp-Session-Id`), each a channel that keeps what its reader has not taken yet.

The `AcpConnection` writes JSON-RPC frames to this outbox as it would to a WebSocket; each frame is routed once:
  ST-1  a response to a request that named a session (`params.sessionId`)        -> that session's channel
  ST-2  a request or notification naming a session                               -> that session's channel
  ST-3  anything else (answers of session/new, session/list; errors of bad input) -> the connection's channel
  ST-4  the answer of the `initialize` that opened the connection                 -> the POST's own response body
A channel holds frames until a GET of its stream takes them, so nothing is lost between an answer and the client
opening the stream it announces (session/new's answer, then the session's stream). What every channel holds
together is bounded in bytes: past the bound the connection ends (its client initializes again and resumes), as a
WebSocket client that stops reading is closed. A journal frame carries its event id (`id:` of its event), so a
client that lost a stream asks for what it missed with `Last-Event-ID` (http_endpoint.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .protocol import META_KEY


@dataclass
class Channel:
    """One stream's frames not yet taken: (journal event id or None, frame)."""

    frames: deque[tuple[int | None, bytes]] = field(default_factory=deque)
    size: int = 0
    reader: int = 0  # which GET reads it now (a later GET takes over: the earlier one ends)
    readers: int = 0  # GETs made of it so far
    active: int = 0  # GETs of it being answered now
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def put(self, event_id: int | None, frame: bytes) -> None:
        self.frames.append((event_id, frame))
        self.size += len(frame)
        self.wake.set()

    def take(self) -> tuple[int | None, bytes] | None:
        if not self.frames:
            return None
        item = self.frames.popleft()
        self.size -= len(item[1])
        return item

    def put_back(self, item: tuple[int | None, bytes]) -> None:
        self.frames.appendleft(item)
        self.size += len(item[1])

    def keep_answers(self) -> list[bytes]:
        """A stream resumed from a cursor: the journal's frames are sent again from there, a question put again by
        its broker; what stays is the answers (the only frames nothing else sends again). Returns them, emptied."""
        answers = [frame for event_id, frame in self.frames if event_id is None and b'"method"' not in frame]
        self.frames.clear()
        self.size = 0
        return answers


class HttpOutbox:
    """The `AcpOutbox` of one HTTP connection (gateway.api.acp_server.connection.AcpOutbox)."""

    def __init__(self, limit_bytes: int, on_end: Callable[[str], None]) -> None:
        self.limit_bytes = limit_bytes
        self.on_end = on_end
        self.channels: dict[str | None, Channel] = {None: Channel()}  # None: the connection's own stream
        self.request_sessions: dict[int | str, str] = {}  # a client request's id -> the session it named (ST-1)
        self.captured: dict[int | str, asyncio.Future[bytes]] = {}  # ST-4
        self.ended = False
        self.drained = asyncio.Event()
        self.drained.set()

    # -- routing ----------------------------------------------------------------------------------------------
    def request_in(self, message: dict[str, Any]) -> None:
        """A client request arrived: its answer goes where its session is (ST-1)."""
        params = message.get("params")
        session = params.get("sessionId") if isinstance(params, dict) else None
        msg_id = message.get("id")
        if isinstance(session, str) and isinstance(msg_id, int | str) and not isinstance(msg_id, bool):
            if len(self.request_sessions) < 10_000:  # bounded: the connection's in-flight limit is far lower
                self.request_sessions[msg_id] = session

    def capture(self, msg_id: int | str) -> asyncio.Future[bytes]:
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.captured[msg_id] = future
        return future

    def channel(self, session_id: str | None) -> Channel:
        found = self.channels.get(session_id)
        if found is None:
            found = self.channels[session_id] = Channel()
        return found

    def forget(self, session_id: str | None, channel: Channel, began: bool = True) -> None:
        """A stream's reader ended: its channel goes if nothing waits in it (a frame routed later makes it again),
        so GETs of made-up session ids leave nothing behind."""
        if began:
            channel.active -= 1
        if session_id is not None and not channel.frames and not channel.active \
                and self.channels.get(session_id) is channel:
            del self.channels[session_id]

    def _route(self, frame: bytes) -> None:
        if self.ended:
            return
        message = orjson.loads(frame)
        msg_id = message.get("id")
        session: str | None = None
        event_id: int | None = None
        if "method" not in message:  # a response
            if msg_id in self.captured:  # ST-4
                future = self.captured.pop(msg_id)
                if not future.done():
                    future.set_result(frame)
                return
            session = self.request_sessions.pop(msg_id, None) if isinstance(msg_id, int | str) else None
        else:
            params = message.get("params")
            if isinstance(params, dict):
                named = params.get("sessionId")
                session = named if isinstance(named, str) else None
                meta = params.get("_meta")
                said = meta.get(META_KEY) if isinstance(meta, dict) else None
                found = said.get("eventId") if isinstance(said, dict) else None
                event_id = found if isinstance(found, int) and not isinstance(found, bool) else None
        self.channel(session).put(event_id, frame)
        if self.size() > self.limit_bytes:
            self.end(f"more than {self.limit_bytes} bytes waiting for this connection's event streams to be read")

    def size(self) -> int:
        return sum(channel.size for channel in self.channels.values())

    # -- the AcpOutbox of the connection ------------------------------------------------------------------------
    def send(self, frame: bytes, batchable: bool = True) -> None:
        self._route(frame)

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        for frame in frames:
            self._route(frame)

    def full(self) -> bool:
        return self.size() > self.limit_bytes // 2

    async def drain(self) -> None:
        """Once what waits is under half the bound (a replay paces itself by it), or the connection ended."""
        while not self.ended and self.full():
            self.drained.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.drained.wait(), 1.0)

    def taken(self) -> None:
        """A stream's reader took frames."""
        if not self.full():
            self.drained.set()

    def end(self, reason: str) -> None:
        if self.ended:
            return
        self.ended = True
        for channel in self.channels.values():
            channel.frames.clear()
            channel.size = 0
            channel.wake.set()
        for future in self.captured.values():
            if not future.done():
                future.set_exception(ConnectionResetError(reason))
        self.drained.set()
        self.on_end(reason)
