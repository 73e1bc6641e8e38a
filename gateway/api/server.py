"""The network edge: HTTP and JSON-RPC over WebSocket on one port, with authentication at the handshake.

Frames enter in `_connection`, are decided on in `gateway.api.rpc` (`/rpc`) or `gateway.api.acp_server` (`/acp`),
and answers leave through the connection's outbox (`gateway.api.outbox`). Tokens are compared in constant time; a
bad token is refused with HTTP 401 before any WebSocket exists; a browser's `Origin` must be this gateway's own (or
configured). Frames over the size limit close the connection with 1009 (websockets does this from `max_size`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import ipaddress
import logging
import socket
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from http import HTTPStatus
from importlib import resources
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import orjson
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers, MultipleValuesError
from websockets.http11 import Request, Response

from .. import __version__
from . import openrpc
from .eager import start_eagerly
from .http_front import front_connection
from .liveness import CLOSE_CODE as HEARTBEAT_CLOSE_CODE
from .liveness import Liveness
from .outbox import Outbox
from .rpc import RpcAdapter, RpcContext

log = logging.getLogger(__name__)


class AcpPeer(Protocol):
    """The gateway side of one `/acp` connection (gateway.api.acp_server.AcpConnection)."""

    async def handle(self, frame: str | bytes) -> None: ...

    def closed(self) -> None: ...


# (owner, the connection's outbox, its Acp-Connection-Id) -> its peer
AcpFactory = Callable[[str, Outbox, str], AcpPeer]


class AcpHttp(Protocol):
    """ACP's Streamable HTTP at `/acp` (gateway.api.acp_server.http_endpoint.AcpHttpEndpoint)."""

    def protocol(self) -> asyncio.Protocol: ...

    async def close(self) -> None: ...


def find_owner(tokens: Mapping[str, str], presented: str | None) -> str | None:
    """The owner of a presented token; every configured token is compared, in constant time."""
    if not presented:
        return None
    found = None
    candidate = presented.encode()
    for token, owner in tokens.items():
        if hmac.compare_digest(token.encode(), candidate):
            found = owner
    return found


def presented_token(request: Request) -> str | None:
    values = parse_qs(urlsplit(request.path).query).get("token")
    return token_of(request.headers.get("Authorization"), values[0] if values else None)


def token_of(authorization: str | None, query_token: str | None) -> str | None:
    """The token a request presents: `Authorization: Bearer TOKEN`, else `?token=TOKEN` (every HTTP stack's rule)."""
    auth = authorization or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query_token


DEFAULT_PORTS = {"http": 80, "https": 443}
OWN_SCHEME = "http"  # the gateway serves plain HTTP; behind a TLS proxy, its https origin goes in allowed_origins


def _authority(netloc: str, scheme: str) -> tuple[str, int] | None:
    """(host name, port) of `host[:port]`, the scheme's default port when none is given; None when malformed."""
    try:
        parts = urlsplit("//" + netloc)
        name, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not name:
        return None
    return name.lower(), port if port is not None else DEFAULT_PORTS.get(scheme, -1)


def origin_allowed(origin: str | None, host_header: str | None, allowed: list[str]) -> bool:
    """Non-browser clients send no Origin. A browser's must be this gateway's own page — the same scheme, host and
    port (`https://127.0.0.1:PORT` is another origin than `http://127.0.0.1:PORT`) — or configured."""
    if origin is None:
        return True
    if origin.rstrip("/") in (a.rstrip("/") for a in allowed):
        return True
    parts = urlsplit(origin)
    if parts.scheme.lower() != OWN_SCHEME or not host_header or parts.path not in ("", "/"):
        return False
    own = _authority(host_header, OWN_SCHEME)
    return own is not None and _authority(parts.netloc, OWN_SCHEME) == own


def is_loopback(name: str) -> bool:
    """`localhost`, or an IP literal (IPv6 in brackets or not) of the loopback range."""
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def host_allowed(host_header: str | None, bind_host: str) -> bool:
    """A gateway bound to loopback answers only loopback host names: a web page on another name that DNS points
    at 127.0.0.1 (DNS rebinding) is refused. A gateway bound elsewhere is reached by whatever name its users
    give it; its token and Origin checks stand alone there."""
    if not is_loopback(bind_host):
        return True
    if not host_header:
        return False  # HTTP/1.1 requires it (refused with 400 before this is asked)
    try:
        name = urlsplit("//" + host_header).hostname  # without the port; IPv6 without its brackets
    except ValueError:
        return False
    return name is not None and is_loopback(name)


class GatewayServer:
    def __init__(self, adapter: RpcAdapter, tokens: Mapping[str, str], *, host: str, port: int,
                 max_frame_bytes: int, allowed_origins: list[str], ui: Any = None,
                 outbox_limit: int = 100_000, max_connections_per_owner: int = 64,
                 outbox_limit_bytes: int = 4 << 20, slow_reader_timeout: float = 60.0,
                 socket_send_buffer: int = 128 << 10,
                 health: Callable[[], str | None] | None = None,
                 healthy: Callable[[], str] | None = None, acp: AcpFactory | None = None,
                 metrics: Callable[[str | None], tuple[bytes, str]] | None = None,
                 metrics_token: str | None = None, acp_http: AcpHttp | None = None) -> None:
        self.acp = acp  # makes the peer of each `/acp` connection; None: no `/acp` endpoint
        self.acp_http = acp_http  # `/acp`'s Streamable HTTP (POST, DELETE, event streams); None: WebSocket only
        self.acp_ids: dict[int, str] = {}
        self.health = health  # None when the gateway can serve; else what is wrong and what to do
        self.healthy = healthy  # what /healthz says when all is well
        self.outbox_limit = outbox_limit
        self.outbox_limit_bytes = outbox_limit_bytes
        self.slow_reader_timeout = slow_reader_timeout
        self.socket_send_buffer = socket_send_buffer
        self.max_connections_per_owner = max_connections_per_owner
        self.per_owner: dict[str, int] = {}
        self.adapter = adapter
        self.tokens = dict(tokens)
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.allowed_origins = allowed_origins
        self.ui = ui
        # `/metrics`: an owner's token reads that owner's series; `metrics_token` (the operator's), or the token of
        # a gateway's only owner, reads everything (gateway.metrics says why).
        self.metrics = metrics
        self.metrics_token = metrics_token
        self.server: Server | None = None
        self.owners: dict[int, str] = {}
        self.connections: set[ServerConnection] = set()

    async def start(self) -> None:
        self.server = await serve(self._connection, self.host, self.port, process_request=self._http,
                                  process_response=self._upgraded,
                                  # Our own keepalive (`_keepalive`): a slow reader's pong waits behind its
                                  # backlog, and websockets' ping timeout would close a reader that is there.
                                  max_size=self.max_frame_bytes, ping_interval=None,
                                  # Deflate cost ~11% of a relayed update's CPU; events are small and the
                                  # gateway is on loopback or a LAN. Throughput wins.
                                  compression=None,
                                  server_header=f"acp-gateway/{__version__}",
                                  # A connection for `/acp`'s Streamable HTTP is handed to aiohttp (http_front)
                                  create_connection=(front_connection(self.acp_http.protocol)
                                                     if self.acp_http is not None else None))
        sock = next(iter(self.server.sockets))
        self.port = sock.getsockname()[1]

    async def close(self) -> None:
        if self.acp_http is not None:
            await self.acp_http.close()
        if self.server is not None:
            self.server.close(close_connections=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        try:
            return self._route(connection, request)
        except MultipleValuesError as exc:  # two Authorization, Origin or Host headers: which one counts?
            return _plain(connection, HTTPStatus.BAD_REQUEST, f"duplicate {exc} header\n")

    def _route(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if not request.headers.get("Host"):  # HTTP/1.1 requires it; the Origin and rebinding rules need it
            return _plain(connection, HTTPStatus.BAD_REQUEST, "a Host header is required\n")
        if not host_allowed(request.headers.get("Host"), self.host):
            return _plain(connection, HTTPStatus.MISDIRECTED_REQUEST,
                          "this gateway listens on loopback and answers only loopback host names\n")
        if path == "/healthz":
            fault = self.health() if self.health is not None else None
            if fault is not None:
                return _plain(connection, HTTPStatus.SERVICE_UNAVAILABLE, f"{fault}\n")
            return _plain(connection, HTTPStatus.OK, f"{self.healthy()}\n" if self.healthy is not None else "ok\n")
        if path == "/metrics" and self.metrics is not None:
            presented = presented_token(request)
            operator = bool(self.metrics_token and presented and hmac.compare_digest(
                self.metrics_token.encode(), presented.encode()))
            owner = find_owner(self.tokens, presented)
            if owner is None and not operator:
                return _plain(connection, HTTPStatus.UNAUTHORIZED,
                              "a valid token is required: Authorization: Bearer TOKEN, or ?token=TOKEN\n")
            whole = operator or len(set(self.tokens.values())) == 1
            body, content_type = self.metrics(None if whole else owner)
            return typed_response(connection, content_type, body)
        if path == "/whoami":
            owner = find_owner(self.tokens, presented_token(request))
            if owner is None:
                return _plain(connection, HTTPStatus.UNAUTHORIZED,
                              "a valid token is required: Authorization: Bearer TOKEN, or ?token=TOKEN\n")
            # lets a page tell a refused token from a gateway that is down
            return typed_response(connection, "application/json", orjson.dumps({"owner": owner}))
        if path in ("/rpc", "/acp") and not (path == "/acp" and self.acp is None):
            return self._admit(connection, request, path)
        if self.ui is not None:
            answer: Response | None = self.ui(connection, request, path)
            if answer is not None:
                return answer
        return _plain(connection, HTTPStatus.NOT_FOUND, "not found\n")

    def _admit(self, connection: ServerConnection, request: Request, path: str) -> Response | None:
        """The WebSocket endpoints, `/rpc` and `/acp`, alike: the Origin rule, a token, the owner's connection limit."""
        if not origin_allowed(request.headers.get("Origin"), request.headers.get("Host"), self.allowed_origins):
            return _plain(connection, HTTPStatus.FORBIDDEN, "origin not allowed\n")
        owner = find_owner(self.tokens, presented_token(request))
        if owner is None:
            return _plain(connection, HTTPStatus.UNAUTHORIZED,
                          "a valid token is required: Authorization: Bearer TOKEN, or ?token=TOKEN\n")
        if self.per_owner.get(owner, 0) >= self.max_connections_per_owner:
            return _plain(connection, HTTPStatus.TOO_MANY_REQUESTS,
                          f"at most {self.max_connections_per_owner} connections per owner: close one first\n")
        self.owners[id(connection)] = owner
        if path == "/acp":
            self.acp_ids[id(connection)] = uuid.uuid4().hex
        return None

    def _upgraded(self, connection: ServerConnection, request: Request, response: Response) -> Response:
        """An `/acp` upgrade names its connection (`Acp-Connection-Id`, the RFD's WebSocket mode)."""
        acp_id = self.acp_ids.get(id(connection))
        if acp_id is not None and response.status_code == HTTPStatus.SWITCHING_PROTOCOLS:
            response.headers["Acp-Connection-Id"] = acp_id
        return response

    async def _connection(self, connection: ServerConnection) -> None:
        owner = self.owners.pop(id(connection), None)
        acp_id = self.acp_ids.pop(id(connection), None)
        if owner is None:
            await connection.close(1008, "unauthorized")
            return
        self.per_owner[owner] = self.per_owner.get(owner, 0) + 1
        try:
            if acp_id is not None:
                await self._serve_acp(connection, owner, acp_id)
            else:
                await self._serve_connection(connection, owner)
        finally:
            self.per_owner[owner] -= 1

    async def _serve_acp(self, connection: ServerConnection, owner: str, acp_id: str) -> None:
        """A remote ACP client: each frame answered by its `AcpPeer` (gateway.api.acp_server)."""
        assert self.acp is not None
        outbox = Outbox(connection, self.outbox_limit, self.outbox_limit_bytes, self.slow_reader_timeout)
        peer = self.acp(owner, outbox, acp_id)
        await self._serve_frames(connection, outbox, peer.handle, peer.closed)

    async def _serve_connection(self, connection: ServerConnection, owner: str) -> None:
        """A frontend of the API: each frame answered by the JSON-RPC adapter."""
        outbox = Outbox(connection, self.outbox_limit, self.outbox_limit_bytes, self.slow_reader_timeout)
        liveness = Liveness(time.monotonic())
        promised = asyncio.Event()
        ctx = RpcContext(owner=owner, sink=outbox, liveness=liveness, liveness_changed=promised.set)
        watchdog = asyncio.ensure_future(self._watch_heartbeats(ctx, liveness, promised, outbox))
        try:
            await self._serve_frames(connection, outbox, functools.partial(self._answer, outbox, ctx),
                                     lambda: self.adapter.connection_closed(ctx), liveness)
        finally:
            watchdog.cancel()

    async def _keepalive(self, connection: ServerConnection, outbox: Outbox) -> None:
        """A WebSocket ping every KEEPALIVE_INTERVAL: a link whose pong does not come within KEEPALIVE_TIMEOUT is
        dead and closed (1011) — unless its socket took bytes meanwhile: then a reader is there, slowly working
        through a backlog the pong waits behind (it is closed only if it stops reading: `slow_reader_timeout`)."""
        while not outbox.closed:
            await asyncio.sleep(KEEPALIVE_INTERVAL)
            taken = outbox.taken()
            try:
                pong = await connection.ping()
                await asyncio.wait_for(asyncio.shield(pong), KEEPALIVE_TIMEOUT)
            except TimeoutError:
                if outbox.taken() > taken:
                    continue
                log.info("closing a connection whose keepalive ping went unanswered for %gs", KEEPALIVE_TIMEOUT)
                outbox.cut("keepalive ping timeout", 1011)
                return
            except Exception:  # closed meanwhile
                return

    async def _watch_heartbeats(self, ctx: RpcContext, liveness: Liveness, promised: asyncio.Event,
                                outbox: Outbox) -> None:
        """A client that promised heartbeats and went silent is gone: its subscriptions end now (nothing more is
        queued for it) and its socket is closed (4408), rather than waiting minutes for TCP to notice."""
        while True:
            delay = liveness.next_check(time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(promised.wait(), delay)
            promised.clear()
            if liveness.overdue(time.monotonic()):
                log.info("closing a connection of owner %s: %s", ctx.owner, liveness.reason())
                self.adapter.connection_closed(ctx)
                outbox.cut(liveness.reason(), HEARTBEAT_CLOSE_CODE)
                return

    async def _serve_frames(self, connection: ServerConnection, outbox: Outbox,
                            handle: Callable[[str | bytes], Coroutine[Any, Any, None]],
                            closed: Callable[[], None], liveness: Liveness | None = None) -> None:
        """Every frame of a connection, in arrival order, handed to `handle`; `closed` once the connection is gone.
        Meanwhile the connection's outgoing bytes in the OS are capped and its keepalive runs."""
        self.connections.add(connection)
        cap_in_flight(connection, self.socket_send_buffer)
        keepalive = asyncio.ensure_future(self._keepalive(connection, outbox))
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for frame in connection:
                if liveness is not None:
                    liveness.heard_at = time.monotonic()
                # Most calls never suspend: they are answered now, without a task (see gateway.api.eager).
                task = start_eagerly(handle(frame))
                if task is not None:
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        except Exception as exc:  # a broken connection is that client's problem only
            log.debug("connection closed: %s", exc)
        finally:
            self.connections.discard(connection)
            keepalive.cancel()
            closed()
            outbox.close()
            for task in tasks:
                task.cancel()

    async def _answer(self, outbox: Outbox, ctx: RpcContext, frame: str | bytes) -> None:
        try:
            answer = await self.adapter.handle_frame(frame, ctx)
        except Exception:  # handle_frame answers every error itself; this is a bug, and only this frame's
            log.exception("answering a frame failed")
            return
        if answer is not None:
            outbox.send(answer, batchable=False, answer=True)
        hooks, ctx.after_response = ctx.after_response, []
        for hook in hooks:
            hook()


def cap_in_flight(connection: ServerConnection, send_buffer: int) -> None:
    """Cap what the OS may hold of a connection's outgoing bytes (`socket_send_buffer`; 0 leaves it to the OS).
    Left to autotuning it grew to megabytes on loopback, and a reader working through a backlog met its own
    keepalive's pong (and any answer) only after all of them: tens of seconds at 200 messages a second, when its
    WebSocket client gave up (20 s). The backlog waits in the journal instead."""
    sock = connection.transport.get_extra_info("socket") if connection.transport is not None else None
    if sock is not None and send_buffer > 0:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)


KEEPALIVE_INTERVAL = 20.0
KEEPALIVE_TIMEOUT = 20.0


def _plain(connection: ServerConnection, status: HTTPStatus, body: str) -> Response:
    response = connection.respond(status, body)
    return response


def typed_response(connection: ServerConnection, content_type: str, body: bytes,
                   extra: Sequence[tuple[str, str]] = ()) -> Response:
    base = connection.respond(HTTPStatus.OK, "")
    headers = Headers([("Content-Type", content_type), ("Content-Length", str(len(body))),
                       ("Cache-Control", "no-store"), *extra])
    return Response(base.status_code, base.reason_phrase, headers, body)


UI_HEADERS = [
    # Everything the page needs comes from this origin, as files (no inline script or style): an agent's message
    # that slipped past the sanitiser still could not run a script or load anything from elsewhere.
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]


UI_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
            ".css": "text/css; charset=utf-8"}


def ui_files() -> dict[str, tuple[bytes, str]]:
    """The web UI's files, read once from the package: URL path -> (body, content type). Nothing else is served."""
    base = resources.files("gateway") / "ui"
    files = {"/": (base / "index.html").read_bytes()}
    # Every script and stylesheet the package ships under ui/ (the ES modules app.js imports among them), and nothing
    # else: the set is read from the package once, so a new module needs no list kept in step here.
    for folder in (base, base / "vendor"):
        for entry in folder.iterdir():
            if entry.is_file() and entry.name.endswith((".js", ".css")):
                prefix = "vendor/" if folder is not base else ""
                files[f"/ui/{prefix}{entry.name}"] = entry.read_bytes()
    return {path: (body, UI_TYPES[".html" if path == "/" else path[path.rfind("."):]]) for path, body in files.items()}


def ui_pages(files: dict[str, tuple[bytes, str]]) -> Any:
    """The HTTP side besides /rpc, /healthz and /metrics: the web UI at `/` (and its files under `/ui/`), the API's
    OpenRPC document at `/openrpc.json`."""

    def route(connection: ServerConnection, request: Request, path: str) -> Response | None:
        page = files.get("/" if path == "/index.html" else path)
        if page is not None:
            return typed_response(connection, page[1], page[0], UI_HEADERS)
        if path == "/openrpc.json":
            return typed_response(connection, "application/json", orjson.dumps(openrpc.document()))
        return None

    return route
