"""Which HTTP stack serves a connection on the gateway's one port: websockets (the WebSocket upgrades, the web UI,
`/healthz`, `/metrics`) or aiohttp (ACP's Streamable HTTP at `/acp`: POST, DELETE, and the SSE GET).

websockets' server takes only GET requests and answers each with one whole response; the remote-transport RFD's
HTTP mode needs POST bodies and long-lived event streams on the same `/acp`. So the first bytes of each connection
are looked at (`stack_for`, pure) before either stack sees them, and a connection for aiohttp is handed over whole:
its transport is given to an aiohttp request handler, and the websockets side of it returns from its handshake
having nothing to do (`FrontConnection`).

Rules (tests/gateway/api/test_http_front.py holds them as a table):
  FR-1  a head that is not complete yet (its request line within 8 KiB, its headers within 64 KiB) -> wait for more
  FR-2  a method other than GET or HEAD                                           -> aiohttp
  FR-3  GET or HEAD of `/acp` (any query) without an `Upgrade` header             -> aiohttp (an SSE stream)
  FR-4  anything else (upgrades, other paths), or a head that does not parse or never ends -> websockets, as before
The whole head is waited for before anything is handed over: while it comes, websockets' `open_timeout` bounds it
(a client sending a head a byte at a time is closed as on the WebSocket side). aiohttp answers each request with
`Connection: close`, so the next request of a client is looked at again here (a kept-alive connection would
otherwise take a `GET /healthz` or an upgrade of `/rpc` to aiohttp).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import Enum
from typing import Any

from websockets.asyncio.server import ServerConnection

MAX_REQUEST_LINE = 8 * 1024
MAX_HEAD = 64 * 1024
ACP_PATH = b"/acp"


class Stack(Enum):
    MORE = "more"  # FR-1
    WEBSOCKETS = "websockets"
    AIOHTTP = "aiohttp"


def stack_for(head: bytes) -> Stack:
    """FR-1 to FR-4, from the bytes of a connection received so far."""
    end = head.find(b"\r\n")
    if end < 0:
        return Stack.MORE if len(head) < MAX_REQUEST_LINE else Stack.WEBSOCKETS
    parts = head[:end].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return Stack.WEBSOCKETS
    method, target = parts[0], parts[1]
    if method in (b"GET", b"HEAD") and target.split(b"?", 1)[0] != ACP_PATH:
        return Stack.WEBSOCKETS
    if b"\r\n\r\n" not in head:
        return Stack.MORE if len(head) < MAX_HEAD else Stack.WEBSOCKETS
    if method not in (b"GET", b"HEAD"):
        return Stack.AIOHTTP
    headers = head[end + 2:head.index(b"\r\n\r\n")].split(b"\r\n")
    upgrade = any(line.split(b":", 1)[0].strip().lower() == b"upgrade" for line in headers)
    return Stack.WEBSOCKETS if upgrade else Stack.AIOHTTP


class _Detached:
    """What a handed-over connection's websockets side holds instead of the transport it gave away: its `abort()`
    and `close()` (websockets calls them once its handshake ends with no WebSocket) touch nothing."""

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


# Makes the asyncio protocol (an aiohttp request handler) that serves a connection handed over.
HandOver = Callable[[], asyncio.Protocol]


class FrontConnection(ServerConnection):
    """websockets' connection, looking at each connection's first bytes first (`stack_for`)."""

    hand_over: HandOver | None = None  # set on the class the server creates (`front_connection`)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._head = b""
        self._sniffing = self.hand_over is not None
        self._taken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._sniffing:
            super().data_received(data)
            return
        self._head += data
        stack = stack_for(self._head)
        if stack is Stack.MORE:
            return
        self._sniffing = False
        head, self._head = self._head, b""
        if stack is Stack.AIOHTTP and self.hand_over is not None:
            self._give_to(self.hand_over(), head)
            return
        super().data_received(head)

    def _give_to(self, protocol: asyncio.Protocol, head: bytes) -> None:
        transport = self.transport
        self.transport = _Detached()  # type: ignore[assignment]
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        protocol.data_received(head)
        if not self._taken.done():
            self._taken.set_result(None)

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        """websockets' handshake, unless the connection was handed over first: then nothing (no WebSocket opens, and
        what websockets does after a handshake without one touches only `_Detached`)."""
        shaking = asyncio.ensure_future(super().handshake(*args, **kwargs))
        try:
            await asyncio.wait([shaking, self._taken], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            shaking.cancel()
            raise
        if shaking.done():
            shaking.result()
            return
        shaking.cancel()
        try:
            await shaking
        except asyncio.CancelledError:
            if not self._taken.done():
                raise


def front_connection(hand_over: HandOver) -> type[FrontConnection]:
    """The connection class for `serve(create_connection=…)`, handing aiohttp's connections to `hand_over()`."""
    return type("GatewayFrontConnection", (FrontConnection,), {"hand_over": staticmethod(hand_over)})
