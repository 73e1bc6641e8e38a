"""The outbox of one WebSocket connection (`/rpc` or `/acp`): everything it is sent, in order, with flow control.

Written straight to the socket while the socket keeps up, queued for one writer task when it does not; bounded in
bytes, with a reader that stops reading cut off (4429). `gateway.api.server` makes one per connection; subscriptions
(`gateway.journal`) and the `/acp` connection (`gateway.api.acp_server`) write to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from ..metrics import outbox_queued
from .wire import text_messages

log = logging.getLogger(__name__)


class Outbox:
    """Everything a connection is sent, in order: written at once while the socket keeps up, queued when not.

    While nothing waits and the socket's write buffer is under its high-water mark, a frame (or a group of
    event frames, as one message) is written straight to the socket: no task wakes for it, which is most
    of the latency a relay adds. Otherwise frames queue and one writer task sends them with flow control.
    Answers to calls go ahead of queued events, on a budget of their own: a slow reader's backlog never holds
    up its calls. Once `limit` event frames or `limit_bytes` bytes wait, the outbox is `full()`: subscriptions
    stop handing it live events and feed it from the journal as it drains (`gateway.journal`), so memory stays
    bounded in bytes whatever the reader's pace. A reader that takes nothing for `stall_timeout` seconds, or
    lets answers pile past `limit_bytes`, is cut off (close code 4429): it reconnects and resubscribes from its
    cursor.
    """

    CLOSE_CODE = 4429
    MAX_BATCH = 1000
    MAX_BATCH_BYTES = 1 << 20

    # Events queued past `limit_bytes` by this much mean a sender ignored `full()`: a bug, not a slow reader; the
    # connection is cut rather than grow without bound.
    OVERSHOOT_BYTES = 16 << 20

    def __init__(self, connection: ServerConnection, limit: int, limit_bytes: int = 4 << 20,
                 stall_timeout: float = 60.0) -> None:
        self.connection = connection
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.stall_timeout = stall_timeout
        self.queued_bytes = 0  # events (and other notifications) waiting in `queue`
        self.queue: deque[tuple[bytes, bool]] = deque()
        self.answers: deque[bytes] = deque()  # answers to calls waiting: they go first
        self.answer_bytes = 0
        self.written = 0  # bytes handed to the socket's transport
        self.closed = False
        self._busy = False  # the writer task holds frames it has not finished sending
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()  # nothing queued or being sent
        self._idle.set()
        self._closer: asyncio.Future[None] | None = None
        self._task = asyncio.ensure_future(self._run())

    def send(self, frame: bytes, batchable: bool = True, answer: bool = False) -> None:
        """One frame. Answers to requests are not batchable: they always go out as their own message; with `answer`,
        ahead of the events that wait (on /rpc; ACP orders a prompt's answer after its updates, so /acp does not)."""
        if self.closed:
            return
        if self._can_write_now():
            self._write_messages([frame])
        elif answer:
            self._enqueue_answer(frame)
        else:
            self._enqueue(frame, batchable)

    def taken(self) -> int:
        """Bytes the OS has taken from this connection's transport: it grows only while the reader reads."""
        transport = self.connection.transport
        return self.written - (transport.get_write_buffer_size() if transport is not None else 0)

    def full(self) -> bool:
        """As many events wait as may: a subscription gives it no more live events, the journal feeds it later."""
        return self.closed or len(self.queue) >= self.limit or self.queued_bytes >= self.limit_bytes

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        """Event notifications in order, one message each. With `batch` (the subscriber asked for it), more than
        one go out as one JSON array (a JSON-RPC batch of notifications): one WebSocket message instead of
        hundreds, so a burst costs the reader one receive. `message` is that array when the caller has it
        joined already (shared by every subscriber)."""
        start = 0
        if not batch:
            while start < len(frames) and not self.closed and self._can_write_now():
                end = self._group_end(frames, start)
                if start == 0 and end == len(frames):
                    self._write_messages(frames, shared)
                else:
                    self._write_messages(frames[start:end])
                start = end
            for frame in frames[start:]:
                self._enqueue(frame, False)
            return
        while start < len(frames) and not self.closed and self._can_write_now():
            end = self._group_end(frames, start)
            if end - start == 1:
                self._write_messages([frames[start]])
            elif message is not None and start == 0 and end == len(frames):
                self._write_messages([message], shared, "websocket-array")
            else:
                self._write_messages([b"[" + b",".join(frames[start:end]) + b"]"])
            start = end
        for frame in frames[start:]:
            self._enqueue(frame, True)

    def _group_end(self, frames: list[bytes], start: int) -> int:
        """Where the message starting at `start` ends: at most MAX_BATCH frames, about MAX_BATCH_BYTES."""
        rest = frames if start == 0 else frames[start:]
        if len(rest) <= self.MAX_BATCH and sum(map(len, rest)) <= self.MAX_BATCH_BYTES:
            return len(frames)  # the usual case, counted in C rather than frame by frame
        end, size = start, 0
        while end < len(frames) and end - start < self.MAX_BATCH and size < self.MAX_BATCH_BYTES:
            size += len(frames[end])
            end += 1
        return end

    def _can_write_now(self) -> bool:
        if self.queue or self.answers or self._busy:
            return False  # order: whatever waits goes first
        transport = self.connection.transport
        return transport is not None and transport.get_write_buffer_size() < transport.get_write_buffer_limits()[1]

    def _write_messages(self, frames: list[bytes], shared: dict[str, Any] | None = None,
                        key: str = "websocket") -> None:
        """Frames as messages of their own, written to the socket at once (the only way the outbox writes): what
        websockets' `broadcast` does for one message, with one write for all of them (a write per message cost
        half the relay rate of an array, measured). A server's frames carry no mask and this gateway negotiates
        no extension, so they are the same bytes for every client: with `shared` they are encoded once for all
        subscribers (ten subscribers each encoding every frame relayed at a sixth of one subscriber's rate)."""
        connection = self.connection
        protocol = connection.protocol
        if protocol.state is not State.OPEN or connection.send_in_progress is not None:
            return  # closing, as `broadcast` skips it
        try:
            if protocol.extensions:  # never negotiated here (`compression=None`); kept correct if it ever is
                for frame in frames:
                    protocol.send_text(frame)
                data = protocol.data_to_send()
                connection.transport.writelines([chunk for chunk in data if chunk])
                self.written += sum(map(len, data))
                return
            wire = shared.get(key) if shared is not None else None
            if wire is None:
                wire = text_messages(frames)
                if shared is not None:
                    shared[key] = wire
            connection.transport.write(wire)
            self.written += len(wire)
        except Exception as exc:
            log.debug("write failed, closing the connection: %s", exc)
            self.cut("write failed")

    def _enqueue(self, frame: bytes, batchable: bool) -> None:
        if self.closed:
            return
        if self.queued_bytes + len(frame) > self.limit_bytes + self.OVERSHOOT_BYTES:
            log.error("closing a connection: %d bytes of events queued for it, past its limit (%d) and a group",
                      self.queued_bytes, self.limit_bytes)
            self.cut("too slow: reconnect and resubscribe")
            return
        self.queue.append((frame, batchable))
        self.queued_bytes += len(frame)
        outbox_queued(self.queued_bytes)
        self._idle.clear()
        self._ready.set()

    def _enqueue_answer(self, frame: bytes) -> None:
        if self.answer_bytes + len(frame) > self.limit_bytes:
            log.warning("closing a connection that reads none of its %d bytes of answers", self.answer_bytes)
            self.cut("too slow: answers are not read; reconnect")
            return
        self.answers.append(frame)
        self.answer_bytes += len(frame)
        self._idle.clear()
        self._ready.set()

    def end(self, reason: str) -> None:
        """A subscription on this connection cannot go on in order (`EventBus._end`): the connection is closed (4429)
        and its client resubscribes from its cursor, as after any cut."""
        self.cut(reason)

    def cut(self, reason: str, code: int = CLOSE_CODE) -> None:
        """Nothing more is sent or queued; the connection is closed with `code` (by default 4429, too slow)."""
        if self.closed and self._closer is not None:
            return
        self.closed = True
        self.queue.clear()
        self.answers.clear()
        self.queued_bytes = self.answer_bytes = 0
        self._idle.set()
        self._closer = asyncio.ensure_future(self.connection.close(code, reason))

    async def _run(self) -> None:
        try:
            await self._write_queued()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a writer that stopped would leave the client waiting for nothing: close instead
            log.debug("writer failed, closing the connection: %s", exc)
            if not self.closed:
                self.cut("write failed: reconnect and resubscribe")

    async def _write_queued(self) -> None:
        """Write what queues up, a run of frames at a time, pacing by the socket (flow control)."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            while (self.queue or self.answers) and not self.closed:
                self._busy = True
                if self.answers:
                    answers = list(self.answers)
                    self.answers.clear()
                    self.answer_bytes = 0
                    self._write_messages(answers)
                    await self._drained()
                    continue
                # A run of frames of one kind: joinable ones go as one array, the others as messages of their
                # own written at once; then wait until the socket takes more.
                joinable = self.queue[0][1]
                chunk: list[bytes] = []
                size = 0
                while (self.queue and self.queue[0][1] == joinable and len(chunk) < self.MAX_BATCH
                       and size < self.MAX_BATCH_BYTES):
                    frame = self.queue.popleft()[0]
                    self.queued_bytes -= len(frame)
                    chunk.append(frame)
                    size += len(frame)
                if joinable and len(chunk) > 1:
                    self._write_messages([b"[" + b",".join(chunk) + b"]"])
                else:
                    self._write_messages(chunk)
                await self._drained()
            self._busy = False
            self._idle.set()

    async def _drained(self) -> None:
        """Wait until the socket takes more; a reader that takes nothing for `stall_timeout` is cut off (4429)."""
        try:
            await asyncio.wait_for(self.connection.drain(), self.stall_timeout)
        except TimeoutError:
            log.warning("closing a connection that read nothing for %gs", self.stall_timeout)
            self.cut(f"stopped reading for {self.stall_timeout:g}s: reconnect and resubscribe")

    async def drain(self) -> None:
        """Wait until nothing is queued for this connection (or it is closed)."""
        if self.closed or self._idle.is_set():
            return
        idle = asyncio.ensure_future(self._idle.wait())
        try:  # the writer task ends when the connection breaks: stop waiting then too
            await asyncio.wait([idle, self._task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            idle.cancel()

    def close(self) -> None:
        self.closed = True
        self._task.cancel()
