"""ACP's Streamable HTTP at `/acp` (the remote-transport RFD's HTTP mode): POST carries the client's messages, GET
streams the gateway's as server-sent events, DELETE ends a connection. The connections are `AcpConnection`s, as on
WebSocket: only the transport differs.

A request enters in `handle` (aiohttp, handed over by gateway/api/http_front.py), is decided on by `http_rules`, and
what the gateway sends leaves through the connection's `HttpOutbox` (http_streams.py) into its event streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol

import orjson
from aiohttp import ClientPayloadError, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from ..server import find_owner, host_allowed, origin_allowed, token_of
from .http_rules import (
    EVENT_STREAM,
    HEADER_CONNECTION_ID,
    HEADER_SESSION_ID,
    HttpAction,
    HttpRefusal,
    HttpRequest,
    decide_http,
    last_event_id,
    sse_event,
)
from .http_streams import Channel, HttpOutbox

log = logging.getLogger(__name__)

BODY_TIMEOUT = 30.0  # seconds a request's body may take to arrive whole
MAX_STREAMS = 65  # event streams one connection may have: its own and 64 sessions' (as many as it may open)
KEEPALIVE = 15.0  # seconds between comments on a quiet event stream: a dead reader is noticed, proxies keep it open
IDLE_AFTER = 600.0  # a connection with no event stream open and no request for this long ends
MAX_ID = 200  # the length of an Acp-Connection-Id or Acp-Session-Id this endpoint looks up


class HttpPeer(Protocol):
    """What this endpoint needs of an `AcpConnection`."""

    async def handle(self, frame: str | bytes) -> None: ...

    def closed(self) -> None: ...

    async def resume_stream(self, session_id: str, since: int, then: Callable[[], None]) -> None: ...


# (owner, the connection's outbox, its Acp-Connection-Id) -> its peer
HttpPeerFactory = Callable[[str, HttpOutbox, str], HttpPeer]


@dataclass
class HttpConnection:
    id: str
    owner: str
    peer: HttpPeer
    outbox: HttpOutbox
    last_seen: float = field(default_factory=time.monotonic)
    streams_open: int = 0
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)


class AcpHttpEndpoint:
    def __init__(self, factory: HttpPeerFactory, tokens: Mapping[str, str], *, bind_host: str,
                 allowed_origins: list[str], max_body: int, limit_bytes: int, max_per_owner: int,
                 server_header: str) -> None:
        self.factory = factory
        self.tokens = dict(tokens)
        self.bind_host = bind_host
        self.allowed_origins = allowed_origins
        self.max_body = max_body
        self.limit_bytes = limit_bytes
        self.max_per_owner = max_per_owner
        self.server_header = server_header
        self.connections: dict[str, HttpConnection] = {}
        self.reading: dict[str, int] = {}  # owner -> bytes of its request bodies being read now
        self.max_reading = max(4 * max_body, 32 << 20)
        self._server: web.Server | None = None
        self._reaper: asyncio.Task[None] | None = None

    def protocol(self) -> asyncio.Protocol:
        """The aiohttp request handler of one connection handed over (http_front.FrontConnection)."""
        if self._server is None:
            # aiohttp logs a malformed request (a line too long, too many headers) with its traceback at ERROR:
            # anyone could fill the log with them. They are answered 400 and told at DEBUG.
            # handler_cancellation: a client gone ends its request's handling (an event stream's at once, not at
            # the next write), so what the stream held goes with it.
            self._server = web.Server(self.handle, access_log=None, logger=_QUIET, keepalive_timeout=5,
                                      handler_cancellation=True)
            self._reaper = asyncio.ensure_future(self._reap())
        handler: RequestHandler = self._server()
        return handler

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for connection in list(self.connections.values()):
            connection.outbox.end("the gateway is stopping")
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.shutdown(2.0)

    # -- one request ----------------------------------------------------------------------------------------
    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            response = await self._handle(request)
        except web.HTTPException as exc:
            response = exc
        except Exception:
            log.exception("answering %s %s on /acp", request.method, request.path)
            response = _plain(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error: the gateway's log has it")
        if not response.prepared:
            # One request per connection (http_front FR-1): the next one is looked at again by the front.
            response.force_close()
            response.headers["Server"] = self.server_header
        return response

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        headers = request.headers
        if any(len(headers.getall(name, [])) > 1 for name in ("Host", "Authorization", "Origin")):
            return _plain(HTTPStatus.BAD_REQUEST, "a Host, Authorization or Origin header given twice: which counts?")
        if not headers.get("Host"):
            return _plain(HTTPStatus.BAD_REQUEST, "a Host header is required")
        if not host_allowed(headers.get("Host"), self.bind_host):
            return _plain(HTTPStatus.MISDIRECTED_REQUEST, "this gateway listens on loopback and answers only "
                          "loopback host names")
        if not request.raw_path.startswith("/"):  # an absolute-form target: a proxy's request, not ours
            return _plain(HTTPStatus.BAD_REQUEST, "request /acp by its path")
        if request.path != "/acp":
            return _plain(HTTPStatus.NOT_FOUND, "not found")
        if not origin_allowed(headers.get("Origin"), headers.get("Host"), self.allowed_origins):
            return _plain(HTTPStatus.FORBIDDEN, "origin not allowed")
        owner = find_owner(self.tokens, token_of(headers.get("Authorization"), request.query.get("token")))
        if owner is None:
            return _plain(HTTPStatus.UNAUTHORIZED, "a valid token is required: Authorization: Bearer TOKEN, or "
                          "?token=TOKEN")
        connection_id = headers.get(HEADER_CONNECTION_ID)
        if connection_id is not None and len(connection_id) > MAX_ID:
            connection_id = "?"
        connection = self.connections.get(connection_id or "")
        if connection is not None and connection.owner != owner:
            connection = None  # another owner's connection is one this owner cannot know of (HT-3)
        body = b""
        if request.method == "POST":
            if (request.content_length or 0) > self.max_body:
                return _plain(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a message is at most {self.max_body} bytes")
            # What one owner's bodies being read may hold at once, in bytes (an unknown length counts as the most
            # a body may be): many large POSTs at once are refused, not buffered.
            expected = request.content_length if request.content_length is not None else self.max_body
            if self.reading.get(owner, 0) + expected > self.max_reading:
                return _plain(HTTPStatus.TOO_MANY_REQUESTS, f"more than {self.max_reading} bytes of this owner's "
                              "requests being read at once: wait for answers first")
            self.reading[owner] = self.reading.get(owner, 0) + expected
            try:
                body = await asyncio.wait_for(_read_body(request, self.max_body), BODY_TIMEOUT)
            except (ConnectionError, HttpProcessingError, ClientPayloadError, asyncio.IncompleteReadError,
                    TimeoutError):
                return _plain(HTTPStatus.BAD_REQUEST, f"the body did not come whole within {BODY_TIMEOUT:g}s")
            finally:
                self.reading[owner] -= expected
                if not self.reading[owner]:
                    del self.reading[owner]
        message: Any = None
        if body:
            try:
                message = orjson.loads(body)  # orjson refuses what is not UTF-8: `body.decode()` below cannot fail
            except orjson.JSONDecodeError:
                message = None
        initialize = (isinstance(message, dict) and message.get("method") == "initialize"
                      and isinstance(message.get("id"), int | str) and not isinstance(message.get("id"), bool))
        decision = decide_http(HttpRequest(
            request.method, connection_id, connection is not None, headers.get("Content-Type"),
            headers.get("Accept"), len(body), initialize), self.max_body)
        if isinstance(decision, HttpRefusal):
            return _plain(decision.status, decision.text)
        if decision is HttpAction.INITIALIZE:
            return await self._initialize(owner, body, message)
        assert connection is not None
        connection.last_seen = time.monotonic()
        if decision is HttpAction.MESSAGE:
            return self._message(connection, body, message)
        if decision is HttpAction.END:
            connection.outbox.end("the client ended the connection (DELETE)")
            return web.Response(status=HTTPStatus.NO_CONTENT)
        return await self._stream(request, connection)

    async def _initialize(self, owner: str, body: bytes, message: dict[str, Any]) -> web.StreamResponse:
        if sum(1 for c in self.connections.values() if c.owner == owner) >= self.max_per_owner:
            return _plain(HTTPStatus.TOO_MANY_REQUESTS, f"at most {self.max_per_owner} connections per owner: "
                          "DELETE one first")
        connection_id = uuid.uuid4().hex
        outbox = HttpOutbox(self.limit_bytes, lambda reason: self._ended(connection_id, reason))
        connection = HttpConnection(connection_id, owner, self.factory(owner, outbox, connection_id), outbox)
        self.connections[connection_id] = connection
        answer = outbox.capture(message["id"])
        answered = False
        try:
            await connection.peer.handle(body.decode())  # text: a WebSocket's binary frame is ignored (F4)
            frame = await asyncio.wait_for(answer, 30)
            answered = True
        except (TimeoutError, ConnectionResetError):
            return _plain(HTTPStatus.SERVICE_UNAVAILABLE, "initialize was not answered: try again")
        finally:
            if not answered:  # refused, timed out, or its client went away: nobody can name this connection
                outbox.end("initialize was not answered")
        return web.Response(body=frame, content_type="application/json",
                            headers={HEADER_CONNECTION_ID: connection_id})

    def _message(self, connection: HttpConnection, body: bytes, message: Any) -> web.StreamResponse:
        if message is None:
            return web.Response(status=HTTPStatus.BAD_REQUEST, content_type="application/json", body=orjson.dumps(
                {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: the body is not "
                                                                                    "valid JSON"}}))
        if isinstance(message, dict) and "method" in message and "id" in message:
            connection.outbox.request_in(message)
        task = asyncio.ensure_future(connection.peer.handle(body.decode()))  # answered on the event streams (HT-5)
        connection.tasks.add(task)
        task.add_done_callback(connection.tasks.discard)
        return web.Response(status=HTTPStatus.ACCEPTED)

    async def _stream(self, request: web.BaseRequest, connection: HttpConnection) -> web.StreamResponse:
        session = request.headers.get(HEADER_SESSION_ID)
        if session is not None and not 0 < len(session) <= MAX_ID:
            return _plain(HTTPStatus.BAD_REQUEST, f"{HEADER_SESSION_ID} is 1 to {MAX_ID} characters")
        if session not in connection.outbox.channels and len(connection.outbox.channels) >= MAX_STREAMS:
            return _plain(HTTPStatus.TOO_MANY_REQUESTS, f"at most {MAX_STREAMS - 1} sessions' event streams on one "
                          "connection: close one (session/close) first")
        channel = connection.outbox.channel(session)
        since = last_event_id(request.headers.get("Last-Event-ID")) if session is not None else None
        response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM, "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no", HEADER_CONNECTION_ID: connection.id,
                                               "Server": self.server_header})
        response.force_close()
        try:
            await response.prepare(request)
        except ConnectionError:  # gone before its stream began
            connection.outbox.forget(session, channel, began=False)
            return response
        channel.readers += 1
        channel.active += 1
        channel.reader = me = channel.readers
        channel.wake.set()  # an earlier reader of this stream stops
        connection.streams_open += 1
        try:
            if since is not None and session is not None:  # HT-9
                answers = channel.keep_answers()

                def answers_again() -> None:  # after the replay: the answers its updates come before
                    for frame in answers:
                        channel.put(None, frame)

                resuming = asyncio.ensure_future(connection.peer.resume_stream(session, since, answers_again))
                connection.tasks.add(resuming)
                resuming.add_done_callback(connection.tasks.discard)
                resuming.add_done_callback(lambda t: _resume_failed(t, channel, connection.id, session))
            await self._write(response, connection, channel, me)
        finally:
            connection.streams_open -= 1
            connection.last_seen = time.monotonic()
            connection.outbox.forget(session, channel)
        return response

    async def _write(self, response: web.StreamResponse, connection: HttpConnection, channel: Channel,
                     me: int) -> None:
        outbox = connection.outbox
        while channel.reader == me and not outbox.ended:
            item = channel.take()
            if item is None:
                channel.wake.clear()
                try:
                    await asyncio.wait_for(channel.wake.wait(), KEEPALIVE)
                except TimeoutError:
                    item_bytes = b": keepalive\n\n"
                    try:
                        await response.write(item_bytes)
                    except (ConnectionError, RuntimeError):
                        return
                continue
            try:
                await response.write(sse_event(item[1], item[0]))
            except (ConnectionError, RuntimeError):  # the reader is gone: the frame waits for the next one
                channel.put_back(item)
                return
            outbox.taken()

    def _ended(self, connection_id: str, reason: str) -> None:
        connection = self.connections.pop(connection_id, None)
        if connection is None:
            return
        log.info("ACP HTTP connection %s of %s ended: %s", connection_id, connection.owner, reason)
        connection.peer.closed()
        for task in connection.tasks:
            task.cancel()

    async def _reap(self) -> None:
        """Connections nobody reads or writes any more end (their sessions do not)."""
        while True:
            await asyncio.sleep(IDLE_AFTER / 10)
            now = time.monotonic()
            for connection in list(self.connections.values()):
                if connection.streams_open == 0 and now - connection.last_seen > IDLE_AFTER:
                    connection.outbox.end(f"no request and no event stream for {IDLE_AFTER:g}s")


def _resume_failed(task: asyncio.Task[None], channel: Channel, connection_id: str, session: str) -> None:
    if task.cancelled() or task.exception() is None:
        return
    error = task.exception()
    message = getattr(error, "message", None) or str(error)
    log.info("ACP HTTP connection %s: resuming the stream of session %s failed: %s", connection_id, session, message)
    channel.put(None, orjson.dumps({"jsonrpc": "2.0", "method": "_acpGateway/stream_refused", "params": {
        "sessionId": session, "message": message, "data": getattr(error, "data", None)}}))


class _QuietLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger for connections handed over: its errors of malformed input, without traceback."""

    def exception(self, msg: object, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            text = str(msg)
        self.logger.debug("%s: %s", text, exc_info if isinstance(exc_info, BaseException) else "")


_QUIET: Any = _QuietLogger(logging.getLogger("gateway.api.acp_server.http"))


async def _read_body(request: web.BaseRequest, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
        chunks.append(chunk)
    return b"".join(chunks)


def _plain(status: HTTPStatus, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain")
