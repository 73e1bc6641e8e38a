"""One bidirectional JSON-RPC 2.0 peer over NDJSON streams: ids, pending futures, handlers.

Both sides use it: the client talking to an agent's stdio, and the reference agent talking to its
client. Incoming requests run as tasks (a permission request may wait on a human); notifications
are delivered in arrival order on the read loop, because `session/update` order is meaning.
When the stream ends every pending request fails at once with TransportError.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .budget import RequestBudget
from .errors import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    LIMIT_EXCEEDED,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    RequestTimeout,
    RpcError,
    TransportError,
)
from .framing import DEFAULT_MAX_LINE, READ_CHUNK, FrameStats, LineSplitter, encode_frame, parse_frame
from .process import ByteSink, ByteSource

log = logging.getLogger(__name__)

CANCEL_REQUEST = "$/cancel_request"  # either side withdraws a request it sent (ACP's cancellation, stable)

RequestHandler = Callable[[str, Any], Awaitable[Any]]
NotificationHandler = Callable[[str, Any], None]
# Observes every frame in and out (direction, message); used for traces, recording and checks.
FrameObserver = Callable[[str, dict[str, Any]], None]


REQUESTS_PER_WAKEUP = 16


async def _no_requests(method: str, params: Any) -> Any:
    raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")


def _ignore_notification(method: str, params: Any) -> None:
    return None


class Connection:
    def __init__(
        self,
        reader: asyncio.StreamReader | ByteSource,
        writer: ByteSink,
        *,
        on_request: RequestHandler = _no_requests,
        on_notification: NotificationHandler = _ignore_notification,
        max_line: int = DEFAULT_MAX_LINE,
        name: str = "peer",
        budget: RequestBudget | None = None,
        first_id: int = 0,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.on_request = on_request
        self.on_notification = on_notification
        self.name = name
        self.budget = budget  # how many of the peer's requests may wait for answers at once (None: no limit)
        self._refused = 0  # refusals since the reader last paced them (budget.paced)
        self.stats = FrameStats()
        self._splitter = LineSplitter(max_line, self.stats)
        self._ids = itertools.count(first_id)  # a later attach to a hosted agent counts above the earlier ones' ids
        self._pending: dict[int | str, asyncio.Future[Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._answering: dict[int | str, asyncio.Task[None]] = {}  # the peer's requests being handled, by id
        self._peer_cancelled: set[int | str] = set()  # of those, the ones it withdrew ($/cancel_request)
        self._closed_reason: str | None = None
        self._closed = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self.observers: list[FrameObserver] = []
        # Told as each line is taken from a chunk, before it is handled (a hosted agent's reader then knows which
        # line the observers see: gateway.agenthost.client.AgentStdout.line_done). Set before the peer starts.
        self.on_line: Callable[[], None] | None = None
        # Told as a request of the peer's is dispatched, before its answering task starts (which copies the context
        # this sets: a hosted agent's request is named by its line, `acp.terminals.request_key`).
        self.naming_request: Callable[[], None] | None = None
        self._read_task: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        if self._read_task is None:
            self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    @property
    def closed_reason(self) -> str | None:
        return self._closed_reason

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def close(self, reason: str = "connection closed") -> None:
        """Fail every pending request now and stop handling input."""
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(TransportError(f"{self.name}: {reason}"))
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            self._writer.close()
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()
        self._closed.set()

    # -- outgoing ------------------------------------------------------------------
    async def _send(self, msg: dict[str, Any]) -> None:
        if self._closed_reason is not None or self._writer.is_closing():
            raise TransportError(f"{self.name}: {self._closed_reason or 'pipe closed'}")
        for observe in self.observers:
            observe("out", msg)
        data = encode_frame(msg)
        async with self._write_lock:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, RuntimeError, OSError) as exc:
                self.close(f"write failed: {exc}")
                raise TransportError(f"{self.name}: write failed: {exc}") from exc

    async def send_raw(self, msg: dict[str, Any]) -> None:
        """Send a message exactly as given (used by proxies and fault injection)."""
        await self._send(msg)

    async def request(self, method: str, params: Any = None, *, timeout: float | None = None,
                      request_id: int | str | None = None) -> Any:
        """`request_id`: an id of the caller's choosing (a conformance check sends string ids, and ids past any
        counter); otherwise the next of this connection's own."""
        if self._closed_reason is not None:
            raise TransportError(f"{self.name}: {self._closed_reason}")
        req_id = next(self._ids) if request_id is None else request_id
        if req_id in self._pending:
            raise ValueError(f"request id {req_id!r} is in use")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
        if params is not None:
            msg["params"] = params
        sent = False
        try:
            sent = True  # from here the peer may have it (a withdrawal of an id it never saw is ignored)
            await self._send(msg)
            if timeout is None:
                return await fut
            try:
                return await asyncio.wait_for(fut, timeout)
            except TimeoutError as exc:
                raise RequestTimeout(f"{self.name}: no answer to {method} within {timeout:g}s") from exc
        except RequestTimeout:
            # Nobody waits for the answer any more: the peer is told, so it can stop the work ($/cancel_request),
            # before anything this side sends next.
            if sent and self._closed_reason is None:
                await self._withdraw(req_id)
            raise
        except asyncio.CancelledError:  # the same, from a task being cancelled: told on a task of its own
            answered = fut.done() and not fut.cancelled()  # (cancelling the task cancels the future it awaited)
            if sent and not answered and self._closed_reason is None:
                self._spawn(self._withdraw(req_id))
            raise
        finally:
            self._pending.pop(req_id, None)

    def next_id(self) -> int:
        """An id for a request the caller sends later with `request_id` (and may name before it goes)."""
        return next(self._ids)

    def expect(self, req_id: int | str) -> None:
        """A request an earlier connection to the same peer sent (a hosted agent reattached after the gateway
        restarted): its response, when it comes, is this one's (`answer_to`). Called before anything is read."""
        if req_id not in self._pending:
            self._pending[req_id] = asyncio.get_running_loop().create_future()

    def unexpect(self, req_id: int | str) -> None:
        """A request `expect`ed that never reached the peer after all: forgotten, so it can be sent now with its id."""
        fut = self._pending.get(req_id)
        if fut is not None and not fut.done():
            del self._pending[req_id]

    async def answer_to(self, req_id: int | str) -> Any:
        """The result of a request `expect`ed."""
        if self._closed_reason is not None:
            raise TransportError(f"{self.name}: {self._closed_reason}")
        self.expect(req_id)
        try:
            return await self._pending[req_id]
        finally:
            self._pending.pop(req_id, None)

    async def _withdraw(self, req_id: int | str) -> None:
        with contextlib.suppress(TransportError):
            await self.notify(CANCEL_REQUEST, {"requestId": req_id})

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        """A task of this connection's (cancelled when it closes)."""
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def notify(self, method: str, params: Any = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self._send(msg)

    # -- incoming ------------------------------------------------------------------
    async def _read_loop(self) -> None:
        reason = "peer closed its output"
        reader, splitter, stats, dispatch = self._reader, self._splitter, self.stats, self._dispatch
        on_line = self.on_line
        try:
            # A plain loop over chunks, not an async generator of lines: a flooding agent sends
            # hundreds of thousands of lines a second, and each `async for` step costs a coroutine.
            # A reader that hands out whole lines (an agent in a host: gateway.agenthost.client.AgentStdout) is not
            # joined into bytes only to be split again here.
            read_lines = getattr(reader, "read_lines", None)
            while True:
                if read_lines is not None:
                    if not (lines := await read_lines(READ_CHUNK)):
                        break
                else:
                    if not (chunk := await reader.read(READ_CHUNK)):
                        break
                    lines = splitter.feed(chunk)
                requests = 0
                for line in lines:
                    if on_line is not None:
                        on_line()
                    msg = parse_frame(line, stats)
                    if msg is not None:
                        dispatch(msg, len(line))
                        # Each request is a task (its answer, or its refusal): a chunk of them at once is one long
                        # stretch of the loop for whoever waits on it (another owner's call took 9x its idle p99
                        # while an agent sent 3000 questions). So every few, the loop serves the others.
                        if "id" in msg and "method" in msg:
                            requests += 1
                            if self._refused:  # past its budget: what it sends next waits in its pipe
                                await asyncio.sleep(self._pace_refusals())
                            elif requests % REQUESTS_PER_WAKEUP == 0:
                                await asyncio.sleep(0)
                line, lines = b"", []  # the last line (up to 64 MiB) is not kept alive while the next one arrives
                # Bounded work per wake-up: `read` returns at once while the stream holds data, so a flooding agent
                # would keep the loop here; one chunk at a time, every other connection is served between.
                await asyncio.sleep(0)
            tail = splitter.tail()
            if tail is not None and tail.strip():
                msg = parse_frame(tail, stats)
                if msg is not None:
                    dispatch(msg, len(tail))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken pipe or reader must never hang callers
            reason = f"read failed: {exc}"
        self.close(reason)

    def _dispatch(self, msg: dict[str, Any], size: int = 0) -> None:
        """One message of the peer's; `size`: its line's bytes (what a request holds of its budget)."""
        if self.observers:
            for observe in self.observers:
                observe("in", msg)
        method = msg.get("method")
        if isinstance(method, str):
            params = msg.get("params")
            if "id" in msg:
                msg_id = msg["id"]
                budget = self.budget
                if budget is not None:
                    refused = budget.take(size)
                    if refused is not None:  # answered now; nothing of it is kept
                        self._refused += 1
                        self._spawn(self._reply_error(msg_id, RpcError(LIMIT_EXCEEDED, f"{method}: {refused}")))
                        return
                if self.naming_request is not None:
                    self.naming_request()
                task = self._spawn(self._answer(msg_id, method, params))
                if budget is not None:
                    task.add_done_callback(lambda _: budget.give(size))
                if isinstance(msg_id, (int, str)):
                    self._answering[msg_id] = task
                    task.add_done_callback(lambda done: self._answered(msg_id, method, done))
            else:
                if method == CANCEL_REQUEST and isinstance(params, dict):
                    self._withdrawn(params.get("requestId"))
                try:
                    self.on_notification(method, params)
                except Exception:
                    log.exception("%s: notification handler failed for %s", self.name, method)
            return
        msg_id = msg.get("id")
        if isinstance(msg_id, (int, str)) and ("result" in msg or "error" in msg):
            fut = self._pending.get(msg_id)
            if fut is None or fut.done():
                self.stats.note_noise("non_jsonrpc", b"response to unknown id " + repr(msg_id).encode())
                return
            if "error" in msg:
                fut.set_exception(RpcError.from_dict(msg["error"]))
            else:
                fut.set_result(msg.get("result"))
            return
        self.stats.note_noise("non_jsonrpc", repr(msg)[:200].encode())
        if msg_id is not None:
            self._spawn(self._reply_error(msg_id, RpcError(INVALID_REQUEST, "Invalid Request")))

    def _pace_refusals(self) -> float:
        refused, self._refused = self._refused, 0
        return self.budget.paced(time.monotonic(), refused) if self.budget is not None else 0.0

    def _withdrawn(self, msg_id: Any) -> None:
        """The peer no longer waits for its request `msg_id`: its handler is stopped and answers -32800."""
        task = self._answering.get(msg_id) if isinstance(msg_id, (int, str)) else None
        if task is not None and not task.done():
            self._peer_cancelled.add(msg_id)
            task.cancel()

    def _answered(self, msg_id: int | str, method: str, task: asyncio.Task[None]) -> None:
        """A handler is done. One the peer withdrew still gets an answer, as ACP says (-32800) — also when it was
        withdrawn before its handler even started."""
        self._answering.pop(msg_id, None)
        if msg_id in self._peer_cancelled:
            self._peer_cancelled.discard(msg_id)
            if task.cancelled() and self._closed_reason is None:
                self._spawn(self._reply_error(msg_id, RpcError(REQUEST_CANCELLED, f"{method}: cancelled by its "
                                                               "sender ($/cancel_request)")))

    async def _answer(self, msg_id: Any, method: str, params: Any) -> None:
        try:
            result = await self.on_request(method, params)
        except RpcError as err:
            await self._reply_error(msg_id, err)
            return
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            # The file system changed under the call (a link swapped, a directory removed, a disk full): expected
            # when a peer races its own files, so one line, and an answer without the host's paths.
            log.warning("%s: %s failed: %s", self.name, method, exc.strerror or type(exc).__name__)
            await self._reply_error(msg_id, RpcError(INTERNAL_ERROR, f"{method} failed: "
                                                     f"{exc.strerror or type(exc).__name__}"))
            return
        except Exception as exc:
            log.exception("%s: request handler failed for %s", self.name, method)
            await self._reply_error(msg_id, RpcError(INTERNAL_ERROR, f"Internal error handling {method}: {exc}"))
            return
        with contextlib.suppress(TransportError):
            await self._send({"jsonrpc": "2.0", "id": msg_id, "result": result})

    async def _reply_error(self, msg_id: Any, err: RpcError) -> None:
        with contextlib.suppress(TransportError):
            await self._send({"jsonrpc": "2.0", "id": msg_id, "error": err.to_dict()})
