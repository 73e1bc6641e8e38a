"""`acp-gateway connect`'s I/O: the editor on stdin/stdout (one JSON-RPC message per line, as ACP's stdio transport
says), the gateway on `/acp` over WebSocket, reconnected with backoff. What to do with each message is `rules.py`'s.

The first connection is waited for `first_wait` seconds (a gateway that is not running is said at once, on stderr
and as the error of the editor's requests); after that the bridge keeps trying for as long as the editor runs.
A refused token ends the bridge: trying again would not help.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from collections.abc import Callable
from typing import BinaryIO
from urllib.parse import SplitResult, urlsplit, urlunsplit

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from ...error_codes import INTERNAL_ERROR
from ..policy import backoff_delay
from .rules import Bridge

MAX_LINE = 64 * 1024 * 1024  # an editor's message (a prompt with images) may be large; the gateway bounds it again


class BridgeLink:
    def __init__(self, locate: Callable[[], str], token: str | None, bridge: Bridge, stdin: asyncio.StreamReader,
                 stdout: BinaryIO, first_wait: float = 15.0) -> None:
        self.locate = locate  # asked at each connection: a gateway that restarted may listen elsewhere
        self.url = locate()
        self.token = token
        self.bridge = bridge
        self.stdin = stdin
        self.stdout = stdout
        self.first_wait = first_wait
        self.ws: ClientConnection | None = None
        self.editor_gone = asyncio.Event()

    def say(self, text: str) -> None:
        """A line on stderr: the editor's log of the agent."""
        print(f"acp-gateway connect: {text}", file=sys.stderr, flush=True)

    def to_editor(self, frames: list[bytes]) -> None:
        for frame in frames:
            self.stdout.write(frame + b"\n")
        if frames:
            self.stdout.flush()

    async def to_gateway(self, frames: list[bytes]) -> None:
        if self.ws is None:
            return  # lost meanwhile: rules.lost() keeps what must go again
        for frame in frames:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(frame.decode())

    async def run(self) -> int:
        reading = asyncio.ensure_future(self._read_editor())
        try:
            return await self._keep_linked()
        finally:
            reading.cancel()
            if self.ws is not None:
                with contextlib.suppress(Exception):
                    await self.ws.close()

    async def _read_editor(self) -> None:
        while True:
            try:
                line = await self.stdin.readline()
            except ValueError:  # longer than MAX_LINE: nothing of it can be answered
                self.say(f"a message longer than {MAX_LINE} bytes from the editor was dropped")
                continue
            if not line:
                self.editor_gone.set()
                return
            if not line.strip():
                continue
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.to_editor([orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32700, "message": "Parse error: a line that is not JSON"}})])
                continue
            if not isinstance(message, dict):
                self.to_editor([orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": "Invalid request: one JSON-RPC object per line"}})])
                continue
            upstream, downstream = self.bridge.from_editor(message)
            self.to_editor(downstream)
            await self.to_gateway(upstream)

    async def _keep_linked(self) -> int:
        attempt, first = 0, True
        started = time.monotonic()
        while not self.editor_gone.is_set():
            self.url = self.locate()
            shown = shown_url(self.url)  # never with a token (`?token=`) or a password in it
            gateway_said = False  # a gateway answered, and did not take the connection
            try:
                ws = await connect(self.url, additional_headers=_auth(self.token), max_size=None,
                                   open_timeout=10, ping_interval=5, ping_timeout=10)
            except InvalidURI:
                return self._give_up(f"{shown} is not a gateway's address: give --url as ws://HOST:PORT (or set "
                                     "ACP_GATEWAY_URL)", 2)
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403):
                    return self._give_up(self._refused(shown, status), 2)
                body = exc.response.body.decode(errors="replace").strip()[:300] if exc.response.body else ""
                error, gateway_said = f"HTTP {status}" + (f": {body}" if body else ""), True
            except (OSError, TimeoutError, InvalidHandshake) as exc:  # a gateway dying, or not there (yet)
                error = str(exc) or type(exc).__name__
            else:
                if not first:
                    self.say(f"connected to {shown} again: resuming {len(self.bridge.sessions)} session(s)")
                first, attempt = False, 0
                await self._serve(ws)
                if self.editor_gone.is_set():
                    break
                self.to_editor(self.bridge.lost())
                self.say(f"the gateway at {shown} went away; reconnecting (the editor's requests wait)")
                continue
            if first and time.monotonic() - started > self.first_wait:
                if gateway_said:
                    return self._give_up(f"the gateway at {shown} did not take the connection ({error})", 1)
                return self._give_up(f"no gateway at {shown} ({error}): start one with `acp-gateway serve`, or "
                                     "pass --url (or --state-dir: the gateway's state directory, where it says "
                                     "where it listens)", 1)
            delay = backoff_delay(attempt, random.random(), cap=5.0)
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.editor_gone.wait(), delay)
        return 0

    def _refused(self, shown: str, status: int) -> str:
        if not self.token:
            return (f"the gateway at {shown} needs a token (HTTP {status}) and none was found: set ACP_GATEWAY_TOKEN, "
                    "or pass --state-dir (the gateway's state directory holds its token file)")
        return (f"the gateway at {shown} refused this token (HTTP {status}): set ACP_GATEWAY_TOKEN (or --token) to "
                "one of its owners' tokens")

    async def _serve(self, ws: ClientConnection) -> None:
        self.ws = ws
        try:
            await self.to_gateway(self.bridge.linked())
            gone = asyncio.ensure_future(self.editor_gone.wait())
            try:
                while True:
                    receiving = asyncio.ensure_future(ws.recv())
                    done, _ = await asyncio.wait([receiving, gone], return_when=asyncio.FIRST_COMPLETED)
                    if receiving not in done:
                        receiving.cancel()
                        return
                    try:
                        frame = receiving.result()
                    except ConnectionClosed:
                        return
                    await self.to_gateway(self._from_gateway(frame))
            finally:
                gone.cancel()
        finally:
            self.ws = None
            with contextlib.suppress(Exception):
                await ws.close()

    def _from_gateway(self, frame: str | bytes) -> list[bytes]:
        """Passes what goes to the editor; returns what goes back to the gateway."""
        try:
            message = orjson.loads(frame)
        except orjson.JSONDecodeError:
            self.say("the gateway sent a frame that is not JSON: dropped")
            return []
        if not isinstance(message, dict):
            return []
        upstream, downstream = self.bridge.from_gateway(message)
        self.to_editor(downstream)
        return upstream

    def _give_up(self, why: str, status: int) -> int:
        self.say(why)
        self.to_editor([orjson.dumps({"jsonrpc": "2.0", "id": editor_id, "error": {
            "code": INTERNAL_ERROR, "message": why, "data": {"method": method}}})
            for editor_id, method in self.bridge.unanswered()])
        return status


def shown_url(url: str) -> str:
    """A gateway's address as it may be shown (on stderr, to the editor): without its query (a `?token=`) and
    without a user or password."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if _port(parts) is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _port(parts: SplitResult) -> int | None:
    try:
        return parts.port
    except ValueError:
        return None


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


async def stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    return reader


def run_bridge(locate: Callable[[], str], token: str | None, agent: str | None, session: str | None = None,
               first_wait: float = 15.0) -> int:
    async def main() -> int:
        link = BridgeLink(locate, token, Bridge(agent=agent, session=session), await stdin_reader(),
                          sys.stdout.buffer, first_wait)
        return await link.run()

    return asyncio.run(main())

