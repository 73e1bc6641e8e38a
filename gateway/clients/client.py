"""A Python client of the gateway's JSON-RPC-over-WebSocket API (`task.session.*`).

`GatewayClient` is one connection: calls with ids, answers matched to futures, notifications
(`task.session.event`) queued in arrival order. The resilient owner-session client of docs/architecture.md: The clients
(reconciliation, health, reconnects) is built on top of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ..error_codes import ALREADY_TERMINAL, INTERNAL_ERROR, METHOD_NOT_FOUND, RESYNC_REQUIRED
from .policy import (
    HEALTH_SAMPLE_INTERVAL,
    HEARTBEAT_INTERVAL,
    AutoResumeGuard,
    Link,
    LinkEvent,
    MalformedCounter,
    StreamHealth,
    backoff_delay,
    is_valid_event,
    next_link,
    next_reconcile_delay,
    refusal_message,
    refused_for_good,
    silence_deadline,
)

__all__ = ["ALREADY_TERMINAL", "RESYNC_REQUIRED", "Clock", "GatewayClient", "HandshakeRefused", "Link",
           "NotConnected", "OwnerSessionClient", "RealClock", "RpcCallError"]


class RpcCallError(Exception):
    """The gateway answered a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data


class NotConnected(ConnectionError):
    """A call made while the client has no live link: it was not sent (send it again once connected)."""


class HandshakeRefused(ConnectionError):
    """The gateway refused the WebSocket handshake for good (HTTP 401: a missing or wrong token; 403: the Origin):
    trying again would be refused again, so no client retries it. The message says what to fix, never the token."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class GatewayClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.notifications: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.malformed = 0
        self.on_frame: Callable[[], None] | None = None  # every frame received, before it is read (heartbeats)
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def connect(cls, url: str, token: str | None = None, **kwargs: Any) -> GatewayClient:
        """One connection; raises HandshakeRefused when the gateway refuses the token (or the Origin)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            ws = await connect(url, additional_headers=headers, max_size=None, **kwargs)
        except InvalidStatus as exc:
            status = exc.response.status_code
            if refused_for_good(status):
                raise HandshakeRefused(refusal_message(url, status, bool(token)), status) from exc
            raise
        return cls(ws)

    async def _read(self) -> None:
        try:
            async for frame in self.ws:
                if self.on_frame is not None:
                    self.on_frame()
                try:
                    message = orjson.loads(frame)
                except orjson.JSONDecodeError:
                    self.malformed += 1
                    continue
                for item in message if isinstance(message, list) else [message]:
                    self._dispatch(item)
        except ConnectionClosed:
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection to the gateway closed"))
            self._pending.clear()

    def _dispatch(self, item: Any) -> None:
        if not isinstance(item, dict):
            self.malformed += 1
            return
        if "method" in item and "id" not in item:
            self.notifications.put_nowait(item)
            return
        item_id = item.get("id")
        fut = self._pending.pop(item_id, None) if isinstance(item_id, int) else None
        if fut is None or fut.done():
            return
        if "error" in item:
            err = item["error"] if isinstance(item["error"], dict) else {}
            fut.set_exception(RpcCallError(err.get("code", INTERNAL_ERROR), err.get("message", ""), err.get("data")))
        else:
            fut.set_result(item.get("result"))

    async def call(self, method: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        frame = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}}
        try:
            await self.ws.send(orjson.dumps(frame).decode())
        except ConnectionClosed as exc:
            self._pending.pop(req_id, None)
            raise ConnectionError("connection to the gateway closed") from exc
        if timeout is None:
            return await fut
        return await asyncio.wait_for(fut, timeout)

    async def send_raw(self, frame: str | bytes) -> None:
        await self.ws.send(frame)

    async def next_notification(self, timeout: float = 10.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.notifications.get(), timeout)

    def abort(self) -> None:
        """Drop the connection at once, without a closing handshake (which a dead link would never complete)."""
        transport = self.ws.transport
        if transport is not None:
            transport.abort()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.ws.close()
        self._reader.cancel()


# ---------------------------------------------------------------------------------------------------
# The owner-session client of docs/architecture.md: The clients: a live event stream that survives disconnects.
# ---------------------------------------------------------------------------------------------------


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


Connector = Callable[[str, str | None], Awaitable[GatewayClient]]
EventCallback = Callable[[dict[str, Any]], None]


class OwnerSessionClient:
    """Keeps an owner's view of their sessions current: stream with cursor, reconciliation, health."""

    def __init__(self, url: str, token: str | None, *, clock: Clock | None = None,
                 rand: Callable[[], float] = random.random, connector: Connector | None = None,
                 heartbeat: float | None = HEARTBEAT_INTERVAL) -> None:
        """`heartbeat`: seconds between pings (None: none, and a dead link is noticed only when TCP gives up)."""
        self.url = url
        self.heartbeat = heartbeat
        self.link = Link.CONNECTING
        self.on_link_state: list[Callable[[Link], None]] = []  # every change of `link`
        self._heard_at = 0.0
        self.token = token
        self.clock = clock or RealClock()
        self.rand = rand
        self.connector: Connector = connector or (lambda u, t: GatewayClient.connect(u, t))
        self.conn: GatewayClient | None = None
        self.cursor: int | None = None
        self.sessions: dict[str, dict[str, Any]] = {}
        self.health = StreamHealth()
        self.malformed = MalformedCounter()
        self.auto_resume = AutoResumeGuard()
        self._manual_agents: set[str] | None = None  # agents whose profile says auto_resume = false
        self.reconciliations = 0
        self.reconnects = 0
        self.events_seen = 0
        self.on_event: list[EventCallback] = []
        self.on_link: list[Callable[[bool, int | None], None]] = []  # (stream up, cursor): when it comes and goes
        self.connected = asyncio.Event()
        self._reconcile_now = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._stream_live = False
        self._silent = False  # on_link_state was told DEGRADED and has not been told LIVE since
        self.refused: HandshakeRefused | None = None  # why the gateway refused the handshake, which ended the client
        self._ended = asyncio.Event()  # closed, by close() or by a refused handshake

    # -- life ----------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._run()), asyncio.ensure_future(self._reconcile_timer()),
                       asyncio.ensure_future(self._health_sampler())]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.conn is not None:
            await self.conn.close()
        self._move(LinkEvent.CLOSE)
        self._ended.set()

    async def when_live(self) -> None:
        """Return once the stream is live (at once if it is). Raises HandshakeRefused if the gateway refused the
        handshake (a missing or wrong token: the client is closed then, and never retries it), and NotConnected if
        the client was closed. Other failures (the gateway down, a cut link) are retried with backoff meanwhile."""
        if not self.connected.is_set() and not self._ended.is_set():
            live = asyncio.ensure_future(self.connected.wait())
            ended = asyncio.ensure_future(self._ended.wait())
            try:
                await asyncio.wait({live, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                live.cancel()
                ended.cancel()
        self._raise_if_refused()
        if not self.connected.is_set():
            raise NotConnected(f"the client of the gateway at {self.url} was closed")

    async def wait_closed(self) -> None:
        """Return once the client is closed by close(); raises HandshakeRefused if the gateway refused the handshake
        (a watcher that runs until stopped ends with the reason, instead of waiting for a link that never comes)."""
        await self._ended.wait()
        self._raise_if_refused()

    def _raise_if_refused(self) -> None:
        if self.refused is not None:  # a new exception each time: a raised one keeps every traceback it went through
            raise HandshakeRefused(str(self.refused), self.refused.status) from self.refused

    def _end_refused(self, refused: HandshakeRefused) -> None:
        """The gateway refused the handshake for good: the client ends, saying why, and never tries again."""
        self.refused = refused
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._move(LinkEvent.CLOSE)
        self._ended.set()

    @property
    def degraded(self) -> bool:
        """Whether to tell the person watching that what they see may be stale. One source with `on_link_state`:
        true from the moment it is told `degraded` (a silent link, which is then dropped and reconnected) until it
        is told `live` again. Also true after 45 s (9 samples) without a live stream for any reason: a gateway that
        is down closes the link outright, which is not a silent link (docs/clients.md: Link states)."""
        return self._silent or self.health.degraded

    def _move(self, event: LinkEvent) -> None:
        state = next_link(self.link, event)
        if state is not self.link:
            self.link = state
            # before the callbacks: whatever a callback reads of the client agrees with what it is told
            if state is Link.DEGRADED:
                self._silent = True
            elif state in (Link.LIVE, Link.CLOSED):
                self._silent = False
            for callback in self.on_link_state:
                callback(state)

    def _heard(self) -> None:
        self._heard_at = self.clock.now()
        if self.link is Link.DEGRADED:
            self._move(LinkEvent.HEARD)

    async def _heartbeats(self, conn: GatewayClient, interval: float) -> None:
        """Ping every `interval`; a link that delivers nothing for two of them is given up (docs/clients.md)."""
        pinging: asyncio.Future[Any] | None = None
        next_ping = self.clock.now() + interval
        while True:
            now = self.clock.now()
            deadline = silence_deadline(self._heard_at, interval)
            if now >= deadline:
                if self.link is Link.LIVE:
                    self._move(LinkEvent.SILENT)
                conn.abort()
                return
            if now >= next_ping:
                if pinging is None or pinging.done():
                    pinging = asyncio.ensure_future(conn.call("gateway.ping"))
                    pinging.add_done_callback(lambda f: f.cancelled() or f.exception())
                next_ping = now + interval
            await self.clock.sleep(min(next_ping, deadline) - now)

    async def _run(self) -> None:
        attempt = 0
        while True:
            try:
                self.conn = await self.connector(self.url, self.token)
            except HandshakeRefused as refused:  # the same token would be refused again: never retried
                self._end_refused(refused)
                return
            except Exception:
                self._move(LinkEvent.LOST)
                await self.clock.sleep(backoff_delay(attempt, self.rand()))
                self._move(LinkEvent.RETRY)
                attempt += 1
                continue
            attempt = 0
            self.reconnects += 1
            conn = self.conn
            conn.on_frame = self._heard
            self._heard_at = self.clock.now()
            heartbeats: asyncio.Future[None] | None = None
            try:
                if self.heartbeat is not None:
                    # From the first call on: a link that dies while the stream is being set up is noticed too.
                    heartbeats = asyncio.ensure_future(self._heartbeats(conn, self.heartbeat))
                    try:
                        await conn.call("gateway.ping", {"heartbeat": self.heartbeat})
                    except RpcCallError as err:
                        if err.code != METHOD_NOT_FOUND:
                            raise
                        heartbeats.cancel()  # a gateway from before heartbeats: TCP's keepalive is all there is
                await self._reconcile()  # at once on (re)connect
                await self._subscribe()
                self._stream_live = True
                self.connected.set()
                self._move(LinkEvent.CONNECTED)
                for callback in self.on_link:
                    callback(True, self.cursor)
                await self._consume()
            except (ConnectionError, RpcCallError, TimeoutError):
                pass
            finally:
                if heartbeats is not None:
                    heartbeats.cancel()
                if self._stream_live:
                    for callback in self.on_link:
                        callback(False, self.cursor)
                self._stream_live = False
                self.connected.clear()
                if self.link is not Link.CLOSED:
                    self._move(LinkEvent.LOST)
                await conn.close()
            await self.clock.sleep(backoff_delay(attempt, self.rand()))
            self._move(LinkEvent.RETRY)
            attempt += 1

    async def _subscribe(self) -> None:
        assert self.conn is not None
        try:
            # This client takes a backlog as one array (one receive for hundreds of events).
            await self.conn.call("task.session.subscribe",
                                 {"batch": True} if self.cursor is None else {"since": self.cursor, "batch": True})
        except RpcCallError as err:
            if err.code != RESYNC_REQUIRED:
                raise
            await self._reconcile(resync=True)
            await self.conn.call("task.session.subscribe", {"since": self.cursor, "batch": True})

    async def _consume(self) -> None:
        """Handle the connection's notifications until it closes, reconciling when asked. What is queued already is
        taken at once: a future per notification (three, with a wait over them) made this client the slowest in the
        bench, and left tasks pending when it was cancelled."""
        assert self.conn is not None
        conn = self.conn
        queue = conn.notifications
        closed = asyncio.ensure_future(conn.ws.wait_closed())
        reconcile = asyncio.ensure_future(self._reconcile_now.wait())
        try:
            while True:
                while not queue.empty() and not self._reconcile_now.is_set():
                    self._handle(queue.get_nowait())
                if self._reconcile_now.is_set():
                    self._reconcile_now.clear()
                    reconcile.cancel()
                    reconcile = asyncio.ensure_future(self._reconcile_now.wait())
                    await self._reconcile()
                    continue
                if closed.done():
                    raise ConnectionError("stream closed")
                getter = asyncio.ensure_future(queue.get())
                try:
                    await asyncio.wait({getter, closed, reconcile}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not getter.done():
                        getter.cancel()
                if getter.done() and not getter.cancelled():
                    self._handle(getter.result())
        finally:
            closed.cancel()
            reconcile.cancel()

    def _handle(self, note: dict[str, Any]) -> None:
        params: dict[str, Any] = note.get("params")  # type: ignore[assignment]
        if note.get("method") != "task.session.event" or not is_valid_event(params):
            if self.malformed.note():
                self._reconcile_now.set()
            return
        self.events_seen += 1
        event_id = params["id"]
        if isinstance(event_id, int):
            if self.cursor is not None and event_id <= self.cursor:
                return  # already seen (a replay overlapping the live stream)
            self.cursor = event_id
        self._apply(params)
        for callback in self.on_event:
            callback(params)

    def _apply(self, event: dict[str, Any]) -> None:
        sid = event.get("session_id")
        if not isinstance(sid, str):
            return
        kind, data = event["type"], event["data"]
        if kind == "session_deleted":
            self.sessions.pop(sid, None)
        elif kind == "session_created":
            self.sessions[sid] = dict(data)
        elif kind in ("session_status", "session_title") and sid in self.sessions:
            self.sessions[sid].update({k: v for k, v in data.items() if k != "subscription_id"})

    # -- reconciliation -----------------------------------------------------------------
    async def _reconcile(self, resync: bool = False) -> None:
        assert self.conn is not None
        sessions: dict[str, dict[str, Any]] = {}
        cursor: str | None = None
        first_event_cursor: int | None = None
        while True:
            page = await self.conn.call("task.session.list", {"limit": 500, **({"cursor": cursor} if cursor else {})})
            if first_event_cursor is None:
                first_event_cursor = page["event_cursor"]
            for view in page["sessions"]:
                sessions[view["session_id"]] = view
            cursor = page["next_cursor"]
            if not cursor:
                break
        self.sessions = sessions
        self.reconciliations += 1
        if self.cursor is None or resync:
            self.cursor = first_event_cursor

    async def _reconcile_timer(self) -> None:
        while True:
            await self.clock.sleep(next_reconcile_delay(self.rand()))
            self._reconcile_now.set()

    async def _health_sampler(self) -> None:
        while True:
            await self.clock.sleep(HEALTH_SAMPLE_INTERVAL)
            self.health.sample(self._stream_live)

    # -- actions -------------------------------------------------------------------------
    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        if self.conn is None or not self.connected.is_set():
            raise NotConnected(f"not connected to the gateway at {self.url} ({self.link.value}): {method} was not "
                               "sent; send it again once the client is connected")
        return await self.conn.call(method, params)

    async def cancel(self, session_id: str) -> dict[str, Any]:
        """Cancel for good; `-32009` (already terminal) is success: the session's status is returned."""
        try:
            view: dict[str, Any] = await self.call("task.session.cancel", {"session_id": session_id})
            return view
        except RpcCallError as err:
            if err.code != ALREADY_TERMINAL:
                raise
            status: dict[str, Any] = await self.call("task.session.status", {"session_id": session_id})
            return status

    async def open_view(self, session_id: str) -> dict[str, Any]:
        """What a UI does when a session is shown: its status, auto-resumed at most once per view — unless its
        agent's profile says `auto_resume = false` (a launch that costs money waits for an explicit resume)."""
        self.auto_resume.open_view(session_id)
        status: dict[str, Any] = await self.call("task.session.status", {"session_id": session_id})
        if self._manual_agents is None:
            info = await self.call("gateway.info")
            self._manual_agents = {a["id"] for a in info["agents"] if not a.get("auto_resume", True)}
        if status.get("agent") not in self._manual_agents and self.auto_resume.should_resume(session_id, status):
            await self.call("task.session.resume", {"session_id": session_id})
            status = await self.call("task.session.status", {"session_id": session_id})
        return status
