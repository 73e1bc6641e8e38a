"""The JSON-RPC adapter: `jsonrpcserver` dispatch behind an explicit method table and pydantic params.

This is where a frontend frame is decided on: parse (-32700), shape (-32600), method (-32601),
params (-32602, naming the field), then the handler. No exception text reaches a client: handlers
raise `GatewayError` for what the user must know; anything else becomes a bare -32603 with an id
to find it in the log (`gateway.api.answering`, the rule `/acp` answers by too). Batches are answered
per member, as the JSON-RPC spec says.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import orjson
from pydantic import ValidationError

from .. import __version__, metrics
from ..errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    GatewayError,
    limit_exceeded,
    params_refused,
    subscription_not_found,
)
from ..journal import EventBus, Sink, Subscription
from ..runtime import SessionManager
from . import openrpc
from .answering import answer_frame, error_frame, error_response, failure
from .contract import (
    MAX_NESTING,
    METHODS,
    SESSION_ID,
    DeleteParams,
    NoParams,
    Params,
    PingParams,
    SessionParams,
    StartParams,
    SubscribeParams,
    UnsubscribeParams,
    too_deep,
)
from .liveness import Liveness

# Of jsonrpcserver only its dispatch modules are loaded (`load_dispatch`, by `serve` before it listens, else at the
# first frame), never its package's __init__ (`_jsonrpcserver_package`): that imports jsonschema to build a request
# validator, and its own server (~30 ms), neither of which this adapter uses (`_validate_request`). A restarted
# gateway's first frame (a reattached session's first subscriber) paid them: 38 ms before its first update.
if TYPE_CHECKING:
    from jsonrpcserver import Error, Success
    from jsonrpcserver.async_dispatcher import dispatch_request
    from jsonrpcserver.dispatcher import create_request, to_response
    from jsonrpcserver.response import InvalidRequestResponse, to_serializable
    from jsonrpcserver.result import Result
    from jsonrpcserver.sentinels import NOID
    from oslash.either import Left  # type: ignore[import-untyped]  # jsonrpcserver's own result type
_jsonrpcserver_loaded = False


def _jsonrpcserver_package() -> None:
    """Register the `jsonrpcserver` package without running its __init__, so its submodules import alone. Whoever
    later asks the package itself for a name (`from jsonrpcserver import dispatch`) runs the __init__ then, through
    the package's module `__getattr__` (PEP 562): the package stays whole for everyone else."""
    if "jsonrpcserver" in sys.modules:
        return
    spec = importlib.util.find_spec("jsonrpcserver")
    if spec is None or spec.loader is None:
        raise ImportError("jsonrpcserver is not installed")
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(name: str) -> Any:
        del package.__getattr__
        loader.exec_module(package)
        return getattr(package, name)

    setattr(package, "__getattr__", complete)  # noqa: B010  (mypy: a module's __getattr__ is a method)
    sys.modules["jsonrpcserver"] = package


def load_dispatch() -> None:
    """jsonrpcserver's names, as module globals (the methods run only after); once."""
    global Error, Success, dispatch_request, create_request, to_response, InvalidRequestResponse, to_serializable, \
        NOID, Left, _jsonrpcserver_loaded
    _jsonrpcserver_package()
    from jsonrpcserver.async_dispatcher import dispatch_request
    from jsonrpcserver.dispatcher import create_request, to_response
    from jsonrpcserver.response import InvalidRequestResponse, to_serializable
    from jsonrpcserver.result import Error, Success
    from jsonrpcserver.sentinels import NOID
    from oslash.either import Left

    _jsonrpcserver_loaded = True


MAX_SUBSCRIPTIONS_PER_CONNECTION = 16

log = logging.getLogger(__name__)


@dataclass
class RpcContext:
    """Who is calling, over which connection. Created once per WebSocket connection."""

    owner: str
    sink: Sink | None = None  # where this connection's notifications go
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    after_response: list[Callable[[], None]] = field(default_factory=list)
    liveness: Liveness | None = None  # the connection's heartbeat promise (None: a transport without one)
    liveness_changed: Callable[[], None] | None = None  # wakes the connection's watchdog after a new promise


RpcHandler = Callable[[RpcContext, Any], Awaitable[Any]]


class RpcAdapter:
    def __init__(self, sessions: SessionManager, bus: EventBus, default_agent: str,
                 info: dict[str, Any] | None = None, max_batch: int = 100) -> None:
        self.max_batch = max_batch
        self.sessions = sessions
        self.bus = bus
        self._replays: set[asyncio.Task[None]] = set()
        self.default_agent = default_agent
        self.info = info or {}
        self._agents_cache: tuple[float, list[dict[str, Any]]] | None = None
        # The handler of each method of the contract (gateway.api.contract: its params model and result shape).
        self.handlers: dict[str, RpcHandler] = {
            "gateway.info": self._info,
            "gateway.ping": self._ping,
            "task.session.start": self._start,
            "task.session.status": lambda c, p: sessions.status(c.owner, p.session_id),
            "task.session.resume": lambda c, p: sessions.resume(c.owner, p.session_id, wait_ready=p.wait_ready),
            "task.session.recover": lambda c, p: sessions.recover(c.owner, p.session_id, p.action),
            "task.session.prompt": lambda c, p: sessions.prompt(c.owner, p.session_id, p.prompt, meta=p.meta),
            "task.session.cancel_turn": lambda c, p: sessions.cancel_turn(c.owner, p.session_id),
            "task.session.list": lambda c, p: sessions.list(c.owner, states=list(p.states) if p.states else None,
                                                            limit=p.limit, cursor=p.cursor, cwd=p.cwd),
            "task.session.get": self._get,
            "task.session.history": lambda c, p: sessions.history(c.owner, p.session_id, p.after, p.limit),
            "task.session.events": lambda c, p: sessions.events(c.owner, p.session_id, p.after, p.limit),
            "task.session.set_title": lambda c, p: sessions.set_title(c.owner, p.session_id, p.title),
            "task.session.set_config_option": lambda c, p: sessions.set_config_option(c.owner, p.session_id,
                                                                                      p.config_id, p.value),
            "task.session.set_mode": lambda c, p: sessions.set_mode(c.owner, p.session_id, p.mode_id),
            "task.session.delete": self._delete,
            "task.session.cancel": lambda c, p: sessions.cancel(c.owner, p.session_id),
            "task.session.subscribe": self._subscribe,
            "task.session.unsubscribe": self._unsubscribe,
            "task.session.permission.respond": lambda c, p: sessions.respond_permission(
                c.owner, p.session_id, p.request_id, p.option_id, p.cancelled),
            "task.session.authenticate": lambda c, p: sessions.authenticate(c.owner, p.session_id, p.method_id,
                                                                           p.values),
            "task.session.logout": lambda c, p: sessions.logout(c.owner, p.session_id),
            "task.session.fork": lambda c, p: sessions.fork(c.owner, p.session_id, title=p.title, name=p.name),
            "task.session.diff": lambda c, p: sessions.diff(c.owner, p.session_id, p.against),
            "task.session.checkpoints": lambda c, p: sessions.checkpoints(c.owner, p.session_id),
            "task.session.rewind": lambda c, p: sessions.rewind(c.owner, p.session_id, p.checkpoint),
            "task.session.worktree.merge": lambda c, p: sessions.merge(c.owner, p.session_id),
            "task.session.elicitation.respond": lambda c, p: sessions.respond_elicitation(
                c.owner, p.session_id, p.request_id, p.action, p.content),
        }
        assert set(self.handlers) == set(METHODS), "every method of the contract has a handler, and no other"
        self.methods = {name: self._wrap(name, METHODS[name].params, handler)
                        for name, handler in self.handlers.items()}
        self.methods["rpc.discover"] = self._wrap("rpc.discover", NoParams, self._discover)

    # -- handlers that are more than one call --------------------------------------------
    async def _discover(self, ctx: RpcContext, p: NoParams) -> dict[str, Any]:
        return openrpc.document()

    async def _info(self, ctx: RpcContext, p: NoParams) -> dict[str, Any]:
        return {
            "version": __version__,
            "protocol_version": 1,
            "owner": ctx.owner,
            "default_agent": self.default_agent,
            "agents": self.sessions.with_sign_in(ctx.owner, self._agents()),
            "workspace_roots": [str(root) for root in self.sessions.settings.roots_of(ctx.owner)],
            "remote_hosts": [{"name": h.name, "workspace_roots": list(h.workspace_roots)}
                             for h in self.sessions.settings.remote_hosts.values()
                             if h.owners is None or ctx.owner in h.owners],
            **self.info,
        }

    async def _ping(self, ctx: RpcContext, p: PingParams) -> dict[str, Any]:
        if ctx.liveness is not None and "heartbeat" in p.model_fields_set:
            ctx.liveness.promise(p.heartbeat, time.monotonic())
            if ctx.liveness_changed is not None:
                ctx.liveness_changed()
        return {"heartbeat": ctx.liveness.interval if ctx.liveness is not None else None,
                "cursor": self.bus.head(ctx.owner)}

    AGENTS_FRESH_SECONDS = 10.0

    def _agents(self) -> list[dict[str, Any]]:
        """The profiles and whether each command is installed, looked up at most every AGENTS_FRESH_SECONDS: a
        look-up walks PATH (~40 stat calls a profile, 2.7 ms a call measured), and gateway.info is open to every
        owner, as often as they like (a batch of them held the loop for seconds)."""
        now = time.monotonic()
        if self._agents_cache is None or now - self._agents_cache[0] > self.AGENTS_FRESH_SECONDS:
            self.sessions.refresh_installed()
            self._agents_cache = (now, [
                {"id": pr.id, "name": pr.name, "native_session_resume": pr.native_session_resume,
                 "history_context_injection": pr.history_context_injection, "command_found": pr.command_found(),
                 "availability": pr.availability(), "auto_resume": pr.auto_resume, "version": pr.version,
                 "host": pr.host,
                 **self.sessions.installed_facts(pr)}
                for pr in self.sessions.profiles.values()])
        return self._agents_cache[1]

    async def _start(self, ctx: RpcContext, p: StartParams) -> dict[str, Any]:
        return await self.sessions.start(ctx.owner, agent=p.agent or self.default_agent, cwd=p.cwd,
                                         description=p.description, title=p.title, task_id=p.task_id,
                                         name=p.name, wait_ready=p.wait_ready, config=p.config,
                                         mcp_servers=p.mcp_servers, additional_directories=p.additional_directories,
                                         worktree=p.worktree.model_dump() if p.worktree is not None else None,
                                         host=p.host)

    async def _get(self, ctx: RpcContext, p: SessionParams) -> dict[str, Any]:
        return await self.sessions.get(ctx.owner, p.session_id)

    async def _delete(self, ctx: RpcContext, p: DeleteParams) -> None:
        await self.sessions.delete(ctx.owner, p.session_id, discard=p.discard)

    async def _subscribe(self, ctx: RpcContext, p: SubscribeParams) -> dict[str, Any]:
        if ctx.sink is None:
            raise GatewayError(INVALID_REQUEST, "this transport cannot carry events")
        if len(ctx.subscriptions) >= MAX_SUBSCRIPTIONS_PER_CONNECTION:
            raise limit_exceeded(MAX_SUBSCRIPTIONS_PER_CONNECTION, f"at most {MAX_SUBSCRIPTIONS_PER_CONNECTION} "
                                 "subscriptions per connection: unsubscribe one first", "subscriptions_per_connection")
        if p.session_id is not None:
            await self.sessions.row(ctx.owner, p.session_id)
        sub = await self.bus.subscribe(ctx.owner, ctx.sink, p.since, p.session_id, p.batch)
        ctx.subscriptions[sub.id] = sub
        # The answer goes out first; the replay follows it on the same connection.
        ctx.after_response.append(lambda: self._start_replay(sub))
        return {"subscription_id": sub.id, "cursor": sub.until}

    def _start_replay(self, sub: Subscription) -> None:
        task = asyncio.ensure_future(self.bus.start_replay(sub))
        self._replays.add(task)
        task.add_done_callback(self._replays.discard)

    async def _unsubscribe(self, ctx: RpcContext, p: UnsubscribeParams) -> None:
        if ctx.subscriptions.pop(p.subscription_id, None) is None:
            raise subscription_not_found(p.subscription_id)
        self.bus.unsubscribe(p.subscription_id)

    def connection_closed(self, ctx: RpcContext) -> None:
        for sub_id in list(ctx.subscriptions):
            self.bus.unsubscribe(sub_id)
        ctx.subscriptions.clear()

    # -- dispatch ----------------------------------------------------------------------
    def _wrap(self, name: str, model: type[Params], handler: RpcHandler) -> Callable[..., Awaitable[Any]]:
        # The label children are looked up once per owner: `labels()` on every call cost more than the rest of the
        # metrics.
        calls = metrics.RPC_CALLS
        children: dict[str, tuple[Any, Any]] = {}  # owner -> (its ok counter, its latency histogram)
        named = "session_id" in model.model_fields  # a session's name is taken wherever its id is

        async def method(ctx: RpcContext, *args: Any, **params: Any) -> Any:
            if args:
                return Error(INVALID_PARAMS, "Invalid params: params must be an object (by-name)",
                             {"field": "params"})
            try:
                parsed = model.model_validate(params)
            except ValidationError as exc:
                return _answer_error(params_refused(exc))
            started, outcome = time.perf_counter(), "ok"
            try:
                given = getattr(parsed, "session_id", None) if named else None
                if isinstance(given, str) and not SESSION_ID.match(given):
                    parsed = parsed.model_copy(update={"session_id": await self.sessions.named(ctx.owner, given)})
                return Success(await handler(ctx, parsed))
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            except Exception as exc:  # answered by the rule both edges share (gateway.api.answering)
                failed = failure(exc, log, f"method {name}")
                outcome = str(failed.code)
                return _answer_error(failed)
            finally:
                mine = children.get(ctx.owner)
                if mine is None:
                    mine = children[ctx.owner] = (calls.labels(ctx.owner, name, "ok"),
                                                  metrics.RPC_SECONDS.labels(ctx.owner, name))
                (mine[0] if outcome == "ok" else calls.labels(ctx.owner, name, outcome)).inc()
                mine[1].observe(time.perf_counter() - started)

        # jsonrpcserver checks the call against `inspect.signature(method)` on every request; computed
        # here once, that check stops rebuilding the signature each time (a third of a small call's cost).
        method.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
        return method

    async def handle_frame(self, frame: str | bytes, ctx: RpcContext) -> bytes | None:
        """One WebSocket frame in, the serialized answer out (None: only notifications)."""
        try:
            message = orjson.loads(frame)
        except orjson.JSONDecodeError:
            return error_frame(None, PARSE_ERROR, "Parse error: the frame is not valid JSON")
        if isinstance(message, list):
            if not message:
                return error_frame(None, INVALID_REQUEST, "Invalid request: empty batch")
            if len(message) > self.max_batch:
                return error_frame(None, INVALID_REQUEST, f"Invalid request: a batch of {len(message)} requests; "
                                   f"at most {self.max_batch} (max_batch): split it")
            # One member at a time, yielding between members: every other connection is served meanwhile.
            answers = []
            for member in message:
                answers.append(await self._one(member, ctx))
                await asyncio.sleep(0)
            kept = [a for a in answers if a is not None]
            return answer_frame(kept, log) if kept else None
        answer = await self._one(message, ctx)
        return answer_frame(answer, log) if answer is not None else None

    async def _one(self, message: Any, ctx: RpcContext) -> dict[str, Any] | None:
        """One request through jsonrpcserver's own per-request dispatch (method lookup, argument check, call,
        result check, response). Its whole-message entry point adds an Either chain and an `asyncio.gather`
        (a task) per message: 41 µs of a status call's 52, measured; this path costs 10."""
        if not _jsonrpcserver_loaded:
            load_dispatch()
        try:
            _validate_request(message)
        except ValueError:
            return _serializable(Left(InvalidRequestResponse("The request failed schema validation")))
        if isinstance(message.get("params"), list):
            # Every method of this API takes its params by name; `[]` would otherwise pass as "no params".
            if "id" not in message:
                return None
            return error_response(message["id"], INVALID_PARAMS, "Invalid params: params must be an object (by-name)",
                                  {"field": "params"})
        if too_deep(message.get("params")):  # it would parse, then fail to encode on its way to the agent
            if "id" not in message:
                return None
            return error_response(message["id"], INVALID_PARAMS, f"Invalid params: nested more than {MAX_NESTING} "
                                  "levels deep", {"field": "params"})
        if message["method"] not in self.methods:
            # Answered here, not by jsonrpcserver (whose `data` is the bare name): one object shape per code.
            if "id" not in message:
                return None
            return error_response(message["id"], METHOD_NOT_FOUND, f"Method not found: {message['method']}",
                                  {"method": message["method"]})
        try:
            request, result = await dispatch_request(self.methods, ctx, create_request(message))
        except Exception:
            # jsonrpcserver itself failed (every method answers its own exceptions, `_wrap`): a bare -32603, as it
            # always was, without the error_id the methods' bugs get
            log.exception("dispatch failed")
            return error_response(None, INTERNAL_ERROR, "Internal error")
        if request.id is NOID:
            return None  # a notification is never answered
        return _serializable(to_response(request, result))


def _serializable(response: Any) -> dict[str, Any]:
    return cast(dict[str, Any], to_serializable(response))


def _validate_request(message: Any) -> Any:
    """JSON-RPC 2.0 request shape; raising means -32600 (jsonrpcserver catches it)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ValueError("not a JSON-RPC 2.0 request")
    if not isinstance(message.get("method"), str):
        raise ValueError("method must be a string")
    if "params" in message and not isinstance(message["params"], (dict, list)):
        raise ValueError("params must be an object or array")
    if ("id" in message and not (message["id"] is None or isinstance(message["id"], (str, int)))) or \
            isinstance(message.get("id"), bool):
        raise ValueError("id must be a string, an integer or null")
    if set(message) - {"jsonrpc", "method", "params", "id"}:
        raise ValueError("unexpected member")
    return message


def _answer_error(err: GatewayError) -> Result:
    """A method's error as jsonrpcserver's result: its `data` only when there is some (gateway.api.answering)."""
    return Error(err.code, err.message, err.data) if err.data is not None else Error(err.code, err.message)
