"""The network edge: HTTP and JSON-RPC over WebSocket on one port, with authentication at the handshake.

Frames enter in `_connection`, are decided on in `gateway.rpc`, and answers leave here. Tokens
are compared in constant time; a bad token is refused with HTTP 401 before any WebSocket exists;
a browser's `Origin` must be this gateway's own (or configured). Frames over the size limit close
the connection with 1009 (websockets does this from `max_size`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from . import __version__
from .rpc import RpcAdapter, RpcContext

log = logging.getLogger(__name__)


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
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    query = parse_qs(urlsplit(request.path).query)
    values = query.get("token")
    return values[0] if values else None


def origin_allowed(origin: str | None, host_header: str | None, allowed: list[str]) -> bool:
    """Non-browser clients send no Origin. A browser's must be this gateway's own page, or configured."""
    if origin is None:
        return True
    if origin in allowed:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not host_header:
        return False
    return parts.netloc.lower() == host_header.lower()


class GatewayServer:
    def __init__(self, adapter: RpcAdapter, tokens: Mapping[str, str], *, host: str, port: int,
                 max_frame_bytes: int, allowed_origins: list[str], ui: Any = None) -> None:
        self.adapter = adapter
        self.tokens = dict(tokens)
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.allowed_origins = allowed_origins
        self.ui = ui
        self.server: Server | None = None
        self.owners: dict[int, str] = {}
        self.connections: set[ServerConnection] = set()

    async def start(self) -> None:
        self.server = await serve(self._connection, self.host, self.port, process_request=self._http,
                                  max_size=self.max_frame_bytes, ping_interval=20, ping_timeout=20,
                                  server_header=f"acp-gateway/{__version__}")
        sock = next(iter(self.server.sockets))
        self.port = sock.getsockname()[1]

    async def close(self) -> None:
        if self.server is not None:
            self.server.close(close_connections=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == "/healthz":
            return _plain(connection, HTTPStatus.OK, "ok\n")
        if path == "/rpc":
            if not origin_allowed(request.headers.get("Origin"), request.headers.get("Host"), self.allowed_origins):
                return _plain(connection, HTTPStatus.FORBIDDEN, "origin not allowed\n")
            owner = find_owner(self.tokens, presented_token(request))
            if owner is None:
                return _plain(connection, HTTPStatus.UNAUTHORIZED,
                              "a valid token is required: Authorization: Bearer TOKEN, or ?token=TOKEN\n")
            self.owners[id(connection)] = owner
            return None
        if self.ui is not None:
            answer: Response | None = self.ui(connection, request, path)
            if answer is not None:
                return answer
        return _plain(connection, HTTPStatus.NOT_FOUND, "not found\n")

    async def _connection(self, connection: ServerConnection) -> None:
        owner = self.owners.pop(id(connection), None)
        if owner is None:
            await connection.close(1008, "unauthorized")
            return
        ctx = RpcContext(owner=owner, connection=connection)
        self.connections.add(connection)
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for frame in connection:
                task = asyncio.ensure_future(self._answer(connection, ctx, frame))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except Exception as exc:  # a broken connection is that client's problem only
            log.debug("connection closed: %s", exc)
        finally:
            self.connections.discard(connection)
            for task in tasks:
                task.cancel()
            closer = getattr(ctx, "on_close", None)
            if callable(closer):
                closer()

    async def _answer(self, connection: ServerConnection, ctx: RpcContext, frame: str | bytes) -> None:
        answer = await self.adapter.handle_frame(frame, ctx)
        if answer is not None:
            with contextlib.suppress(Exception):
                await connection.send(answer, text=True)


def _plain(connection: ServerConnection, status: HTTPStatus, body: str) -> Response:
    response = connection.respond(status, body)
    return response


def json_response(connection: ServerConnection, body: Any) -> Response:
    response = connection.respond(HTTPStatus.OK, "")
    return Response(response.status_code, response.reason_phrase,
                    Headers([("Content-Type", "application/json")]), orjson.dumps(body))
