"""One remote ACP client on `/acp`: the gateway is the ACP agent, and each ACP method is a gateway session operation.

A frame enters in `handle`, is decided on by `protocol` (its shape, the connection's phase), runs as one of the
handlers below (each a call into the session runtime), and leaves through the connection's outbox. Sessions are the
gateway's: they outlive this connection, their ACP-facing id is the gateway's session id (it never changes when the
agent behind it is restarted), and every client of the owner sees the same conversation (docs/acp.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from pydantic import ValidationError

from acp import mcp

from ... import metrics
from ...error_codes import RESYNC_REQUIRED
from ...errors import (
    ALREADY_TERMINAL,
    GatewayError,
    agent_failed,
    internal_error,
    invalid_params,
    limit_exceeded,
    log_fault,
    params_refused,
)
from ...journal import EventBus
from ...runtime import SessionManager
from ..answering import error_frame, failure
from ..contract import MAX_NESTING, SESSION_ID, too_deep
from .attachment import Attachment
from .prompt_keys import ASKING, prompt_answer, turn_of_key
from .protocol import (
    META_KEY,
    PARAMS,
    AcpAttachParams,
    AcpCancelRequestParams,
    AcpDecision,
    AcpInitializeParams,
    AcpListParams,
    AcpMethod,
    AcpNewSessionParams,
    AcpParams,
    AcpPhase,
    AcpPromptParams,
    AcpSessionParams,
    AcpSetConfigOptionParams,
    AcpSetModelParams,
    AcpSetModeParams,
    Choice,
    GatewayChoice,
    Malformed,
    Message,
    PromptChoice,
    ResumeChoice,
    acp_error_code,
    agent_meta,
    classify,
    decide,
    gateway_meta,
    next_phase,
    refusal,
)
from .updates import (
    QuestionOffer,
    agent_options,
    elicitation_answer,
    for_client,
    initialize_result,
    offer_answer,
    permission_answer,
    session_info,
)

log = logging.getLogger(__name__)

MAX_ATTACHED_SESSIONS = 64  # sessions open on one connection (each is a journal subscription)
MAX_IN_FLIGHT = 256  # requests of one connection being answered at once
INITIALIZE_WAIT = 3.0  # seconds `initialize` waits for the default agent to say what it takes (once per gateway)
LIST_PAGE = 50


class AcpOutbox(Protocol):
    """What an ACP connection needs of its socket's outbox (the server's `gateway.api.outbox.Outbox`)."""

    def send(self, frame: bytes, batchable: bool = True) -> None: ...

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None: ...

    def full(self) -> bool: ...

    async def drain(self) -> None: ...

    def end(self, reason: str) -> None: ...


@dataclass(frozen=True)
class EdgeInfo:
    """What every connection's `initialize` says: the gateway's version, default agent and its prompt capabilities."""

    version: str
    default_agent: str
    agents: list[str]
    prompt_capabilities: dict[str, bool]


class _Answered:
    """A handler that wrote its answer itself (in journal order: session/new, load and resume)."""


ANSWERED = _Answered()
AcpHandler = Callable[[Any, int | str], Awaitable[Any]]


class AcpConnection:
    def __init__(self, sessions: SessionManager, bus: EventBus, owner: str, outbox: AcpOutbox, info: EdgeInfo,
                 connection_id: str) -> None:
        self.sessions = sessions
        self.bus = bus
        self.owner = owner
        self.outbox = outbox
        self.info = info
        self.connection_id = connection_id
        self.phase = AcpPhase.AWAITING_INITIALIZE
        self.booleans = False  # the client takes boolean config options (initialize's clientCapabilities)
        self.elicitation_modes: set[str] = set()  # the elicitation modes the client offered (initialize)
        self.attachments: dict[str, Attachment] = {}
        # our request id -> (attachment, the question: a permission request's or an elicitation's id, its method)
        self.outbound: dict[int, tuple[Attachment, str, str]] = {}
        self.prompts: dict[int | str, str] = {}  # the client's session/prompt ids in flight -> their session
        # Per session, the prompts this connection sent whose turn has not started yet (their echo is not sent back),
        # and the sessions whose cancel waits for such a turn to start.
        self.own_prompts: dict[str, list[tuple[dict[str, Any], ...]]] = {}
        self.cancel_pending: set[str] = set()
        self.in_flight = 0
        self._ids = itertools.count(0)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.handlers: dict[AcpMethod, AcpHandler] = {
            AcpMethod.INITIALIZE: self._initialize,
            AcpMethod.AUTHENTICATE: self._authenticate,
            AcpMethod.SESSION_NEW: self._new,
            AcpMethod.SESSION_LOAD: self._load,
            AcpMethod.SESSION_RESUME: self._resume,
            AcpMethod.SESSION_LIST: self._list,
            AcpMethod.SESSION_PROMPT: self._prompt,
            AcpMethod.SESSION_CLOSE: self._close,
            AcpMethod.SESSION_SET_CONFIG_OPTION: self._set_config_option,
            AcpMethod.SESSION_SET_MODE: self._set_mode,
            AcpMethod.SESSION_SET_MODEL: self._set_model,
        }
        self.notification_handlers: dict[AcpMethod, Callable[[Any], None]] = {
            AcpMethod.SESSION_CANCEL: self._cancel,
            AcpMethod.CANCEL_REQUEST: self._cancel_request,
        }

    # -- frames in ------------------------------------------------------------------------------------------------
    async def handle(self, frame: str | bytes) -> None:
        message = classify(frame)
        if isinstance(message, Malformed):
            if message.code is not None:
                self._error(message.id, message.code, message.message)
            return
        decision = decide(self.phase, message)
        if decision is AcpDecision.INITIALIZE and message.id is not None:
            try:  # C3: an initialize refused for its params leaves the connection awaiting one
                parse_params(AcpMethod.INITIALIZE, message.params)
            except GatewayError as err:
                self._refuse(message.id, err)
                return
        self.phase = next_phase(self.phase, decision)
        if decision in (AcpDecision.INITIALIZE, AcpDecision.DISPATCH):
            if message.id is None:
                self._notification(message)
            else:
                await self._request(message)
        elif decision is AcpDecision.DELIVER_RESPONSE:
            self._response(message)
        elif decision is not AcpDecision.IGNORE:
            code, text, data = refusal(decision, message.method)
            self._error(message.id, code, text, data)

    async def _request(self, message: Message) -> None:
        assert message.id is not None and message.method is not None
        method = AcpMethod(message.method)
        calls = metrics.ACP_CALLS
        if self.in_flight >= MAX_IN_FLIGHT:
            calls.labels(self.owner, method.value, "limit").inc()
            self._refuse(message.id, limit_exceeded(
                MAX_IN_FLIGHT, f"at most {MAX_IN_FLIGHT} requests of one connection at once: wait for answers first",
                "requests_in_flight_per_connection"))
            return
        try:
            params = parse_params(method, message.params)
        except GatewayError as err:
            calls.labels(self.owner, method.value, str(err.code)).inc()
            self._refuse(message.id, err)
            return
        self.in_flight += 1
        started, outcome = time.perf_counter(), "ok"
        try:
            result = await self.handlers[method](params, message.id)
            if result is not ANSWERED:
                self._result(message.id, result)
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:  # answered by the rule both edges share (gateway.api.answering)
            failed = failure(exc, log, f"ACP method {method.value} (connection {self.connection_id})")
            outcome = str(failed.code)
            self._refuse(message.id, failed)
        finally:
            self.in_flight -= 1
            calls.labels(self.owner, method.value, outcome).inc()
            metrics.ACP_SECONDS.labels(self.owner, method.value).observe(time.perf_counter() - started)

    def _notification(self, message: Message) -> None:
        method = AcpMethod(str(message.method))
        try:
            params = parse_params(method, message.params)
        except GatewayError as err:  # a notification is never answered: the log says why it was dropped
            log.info("ACP connection %s: %s dropped: %s", self.connection_id, method.value, err.message)
            return
        metrics.ACP_CALLS.labels(self.owner, method.value, "ok").inc()
        self.notification_handlers[method](params)

    def _response(self, message: Message) -> None:
        """The client's answer to a permission request the gateway put to it."""
        assert isinstance(message.id, int | str)
        entry = self.outbound.pop(message.id, None) if isinstance(message.id, int) else None
        if entry is None:
            return  # withdrawn (another answer won), or never ours
        attachment, request_id, method = entry
        attachment.offers.pop(request_id, None)
        if message.error is not None:
            return  # this client did not answer it; the others still may
        if method == "elicitation/create":
            said = elicitation_answer(message.result)
            if said is None:
                log.warning("ACP connection %s answered elicitation %s with no action the protocol knows",
                            self.connection_id, request_id)
                return
            self._spawn(self._respond_elicitation(attachment.session_id, request_id, *said))
            return
        answer = permission_answer(message.result)
        if answer is None:
            log.warning("ACP connection %s answered permission request %s with no outcome the protocol knows: %r",
                        self.connection_id, request_id, message.result)
            return
        self._spawn(self._respond_permission(attachment.session_id, request_id, *answer))

    async def _respond_permission(self, session_id: str, request_id: str, option_id: str | None,
                                  cancelled: bool) -> None:
        try:
            await self.sessions.respond_permission(self.owner, session_id, request_id, option_id, cancelled)
        except GatewayError as err:
            level = logging.DEBUG if err.code == ALREADY_TERMINAL else logging.WARNING
            log.log(level, "ACP connection %s: its answer to permission request %s of session %s was not taken: %s",
                    self.connection_id, request_id, session_id, err.message)

    async def _respond_elicitation(self, session_id: str, request_id: str, action: str, content: Any) -> None:
        try:
            await self.sessions.respond_elicitation(self.owner, session_id, request_id, action, content)
        except GatewayError as err:  # refused (a content that does not fit): the question stays open for the others
            level = logging.DEBUG if err.code == ALREADY_TERMINAL else logging.WARNING
            log.log(level, "ACP connection %s: its answer to elicitation %s of session %s was not taken: %s",
                    self.connection_id, request_id, session_id, err.message)

    # -- frames out -----------------------------------------------------------------------------------------------
    def send(self, frame: bytes) -> None:
        self.outbox.send(frame, batchable=False)

    def send_many(self, frames: list[bytes], shared: dict[str, Any] | None = None) -> None:
        self.outbox.send_many(frames, None, False, shared)

    def full(self) -> bool:
        return self.outbox.full()

    async def drain(self) -> None:
        await self.outbox.drain()

    def end(self, reason: str) -> None:
        """A session's stream on this connection cannot go on in order: the connection is closed (4429); an ACP
        client loads or resumes the session again."""
        self.outbox.end(reason)

    def _result(self, msg_id: int | str, result: Any) -> None:
        self.send(orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}))

    def _error(self, msg_id: int | str | None, code: int, message: str, data: Any = None) -> None:
        """A frame or request refused by the protocol (F1-F3, C1, C4, C6)."""
        self.send(error_frame(msg_id, code, message, data))

    def _refuse(self, msg_id: int | str, err: GatewayError) -> None:
        """A request the gateway refused: its error, with ACP's code for it (E1)."""
        self.send(error_frame(msg_id, acp_error_code(err.code), err.message, err.data))

    # -- the Wire of attachments: permission requests and what follows them ------------------------------------
    def offer(self, attachment: Attachment, offer: QuestionOffer) -> None:
        if offer.request_id in attachment.offers:
            return  # re-offered while this client already has it
        if offer.method == "elicitation/create" and offer.mode not in self.elicitation_modes:
            return  # a question this client did not say it can put to its person
        out_id = next(self._ids)
        attachment.offers[offer.request_id] = out_id
        self.outbound[out_id] = (attachment, offer.request_id, offer.method)
        self.send(orjson.dumps({"jsonrpc": "2.0", "id": out_id, "method": offer.method, "params": offer.params}))

    def withdraw(self, attachment: Attachment, request_id: str) -> None:
        """Answered by someone else (or given up): the client's open request is cancelled, as the protocol says."""
        out_id = attachment.offers.pop(request_id, None)
        if out_id is None:
            return
        self.outbound.pop(out_id, None)
        self.send(orjson.dumps({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": out_id}}))

    def own_turn_started(self, session_id: str, prompt: tuple[dict[str, Any], ...]) -> bool:
        waiting = self.own_prompts.get(session_id)
        if not waiting or prompt not in waiting:
            return False
        self._unwait(session_id, prompt)
        if session_id in self.cancel_pending:  # cancelled before its turn had started: cancel it now
            self.cancel_pending.discard(session_id)
            self._spawn(self._cancel_turn(session_id))
        return True

    def _unwait(self, session_id: str, prompt: tuple[dict[str, Any], ...]) -> None:
        waiting = self.own_prompts.get(session_id, [])
        if prompt in waiting:
            waiting.remove(prompt)
        if not waiting:
            self.own_prompts.pop(session_id, None)

    def deleted(self, attachment: Attachment) -> None:
        self._detach(attachment)

    # -- attaching a session to this connection ---------------------------------------------------------------------
    def _attached(self, session_id: str) -> Attachment:
        attachment = self.attachments.get(session_id)
        if attachment is None:
            raise invalid_params("sessionId", f"session {session_id} is not open on this connection: "
                                 "session/load or session/resume it first (session/new for a new one)")
        return attachment

    async def _attach(self, session_id: str, since: int | None, *, answer_first: Callable[[], None] | None = None,
                      answer_when_caught_up: Callable[[], None] | None = None) -> None:
        """Subscribe this connection to the session's events (a replay after `since`, then live) and answer: before
        the replay (`answer_first`) or once it is over (`answer_when_caught_up`), in order with the events."""
        old = self.attachments.pop(session_id, None)
        if old is not None:
            self._detach(old)
        if len(self.attachments) >= MAX_ATTACHED_SESSIONS:
            raise limit_exceeded(MAX_ATTACHED_SESSIONS, f"at most {MAX_ATTACHED_SESSIONS} sessions open on one "
                                 "connection: session/close one first", "sessions_per_acp_connection")
        attachment = Attachment(session_id, self, answer_when_caught_up)
        self.attachments[session_id] = attachment
        try:
            attachment.subscription = await self.bus.subscribe(self.owner, attachment, since, session_id)
        except BaseException:
            self.attachments.pop(session_id, None)
            raise
        if answer_first is not None:
            answer_first()
        await self.bus.start_replay(attachment.subscription)
        if not attachment.live:  # the replay failed: the log has it under the subscription's id
            self._detach(attachment)
            raise internal_error(attachment.subscription.id)

    def _detach(self, attachment: Attachment) -> None:
        if self.attachments.get(attachment.session_id) is attachment:
            del self.attachments[attachment.session_id]
        if attachment.subscription is not None:
            self.bus.unsubscribe(attachment.subscription.id)
        for out_id in attachment.offers.values():
            self.outbound.pop(out_id, None)
        attachment.offers.clear()

    def closed(self) -> None:
        """The socket is gone: its sessions live on (a running turn too); only this connection's links end."""
        for attachment in list(self.attachments.values()):
            self._detach(attachment)
        for task in self._tasks:
            task.cancel()

    # -- handlers -------------------------------------------------------------------------------------------------
    async def _initialize(self, p: AcpInitializeParams, msg_id: int | str) -> dict[str, Any]:
        info = p.clientInfo or {}
        session = (p.clientCapabilities or {}).get("session")
        config_options = session.get("configOptions") if isinstance(session, dict) else None
        self.booleans = isinstance(config_options, dict) and isinstance(config_options.get("boolean"), dict)
        elicitation = (p.clientCapabilities or {}).get("elicitation")
        self.elicitation_modes = {m for m in ("form", "url")
                                  if isinstance(elicitation, dict) and isinstance(elicitation.get(m), dict)}
        log.info("ACP connection %s of %s: %s %s, protocol version %d", self.connection_id, self.owner,
                 info.get("name", "an unnamed client"), info.get("version", ""), p.protocolVersion)
        # The default agent's own word on MCP transports and directories: asked once (a slow or broken agent is not
        # waited for long: the answer then says none, and a later connection gets what the agent says meanwhile).
        caps = None
        asking = asyncio.ensure_future(self.sessions.agent_capabilities(self.info.default_agent, self.owner))
        self._tasks.add(asking)
        asking.add_done_callback(self._tasks.discard)
        with contextlib.suppress(TimeoutError):
            caps = await asyncio.wait_for(asyncio.shield(asking), INITIALIZE_WAIT)
        mcp_caps = (caps.mcpCapabilities.http, caps.mcpCapabilities.sse) if caps is not None else (False, False)
        return initialize_result(self.info.prompt_capabilities, self.info.version, self.info.default_agent,
                                 self.info.agents, mcp_caps, caps is not None and caps.takes_additional_directories)

    async def _authenticate(self, p: AcpParams, msg_id: int | str) -> dict[str, Any]:
        raise invalid_params("methodId", "this gateway advertises no authMethods: it authenticates the WebSocket "
                             "handshake (Authorization: Bearer TOKEN, or ?token=TOKEN)")

    async def _new(self, p: AcpNewSessionParams, msg_id: int | str) -> Any:
        choice = _chosen(GatewayChoice, p.meta)
        if choice.session is not None:
            return await self._open_existing(choice.session, msg_id)
        servers, ignored = self._servers(p.mcpServers)
        await self.bus.refresh(self.owner)
        since = self.bus.head(self.owner)  # the new session's events all come after it
        view = await self.sessions.start(self.owner, agent=choice.agent or self.info.default_agent, cwd=p.cwd,
                                         title=choice.title, task_id=choice.taskId, wait_ready=True,
                                         config=choice.config, mcp_servers=servers,
                                         additional_directories=p.additionalDirectories)
        session_id = view["session_id"]
        if not view["is_agent_running"]:
            reason = view.get("error_message") or "see task.session.status"
            raise agent_failed(session_id, view["agent"], f"agent {view['agent']!r} of session {session_id} could not "
                               f"start: {reason}; the session is kept: session/resume it to try again, or check "
                               "the agent with `acp-gateway check`", None, True)
        result = {"sessionId": session_id, **offer_answer(view["config"], self.booleans),
                  **_gateway_meta(ignored, since)}
        await self._attach(session_id, since, answer_first=lambda: self._result(msg_id, result))
        return ANSWERED

    async def _open_existing(self, given: str, msg_id: int | str) -> Any:
        """session/new naming an existing session (`_meta.acpGateway.session`, by id or name): it is opened as a
        session/load opens it — the answer first, then its retained conversation, then live updates. It keeps its
        own cwd and MCP servers."""
        session_id = given if SESSION_ID.match(given) else await self.sessions.named(self.owner, given)
        view = await self.sessions.get(self.owner, session_id)  # another owner's: not found
        since = await self.bus.store.events.horizon(self.owner)
        result = {"sessionId": session_id, **offer_answer(view["config"], self.booleans), **_gateway_meta([], since)}
        await self._attach(session_id, since, answer_first=lambda: self._result(msg_id, result))
        return ANSWERED

    def _servers(self, given: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """The MCP servers of a session/new, checked (a malformed one is -32602, naming it), and split by the owner's
        policy: stdio servers a frontend may not give are left out and said so in the answer (an editor sends the
        user's own servers with every session/new: refusing the session for them would refuse the editor)."""
        try:
            parsed = mcp.parse(given, "mcpServers")
        except mcp.McpRefusal as refused:
            raise invalid_params(refused.field, refused.message) from None
        if self.sessions.settings.stdio_mcp_allowed(self.owner):
            return [mcp.wire(s) for s in parsed], []
        kept = [mcp.wire(s) for s in parsed if s.type != "stdio"]
        ignored = [{"name": s.name, "reason": "stdio MCP servers from a client are not run on the gateway's host "
                    "for this owner (allow_stdio_mcp_servers)"} for s in parsed if s.type == "stdio"]
        return kept, ignored

    async def _load(self, p: AcpAttachParams, msg_id: int | str) -> Any:
        view = await self._check_attach(p)
        result = offer_answer(view["config"], self.booleans)
        for attempt in range(2):
            since = await self.bus.store.events.horizon(self.owner)  # the whole retained journal
            try:
                await self._attach(p.sessionId, since,
                                   answer_when_caught_up=lambda: self._answer_attached(msg_id, p, result))
                return ANSWERED
            except GatewayError as err:  # pruned between reading the horizon and subscribing: read it again
                if attempt or err.data is None or err.data.get("reason") != "too_far_behind":
                    raise
        raise AssertionError("unreachable")

    async def _resume(self, p: AcpAttachParams, msg_id: int | str) -> Any:
        since = _chosen(ResumeChoice, p.meta).since
        view = await self._check_attach(p)
        result = offer_answer(view["config"], self.booleans)
        try:
            await self._attach(p.sessionId, since,
                               answer_when_caught_up=lambda: self._answer_attached(msg_id, p, result))
        except GatewayError as err:
            if err.code != RESYNC_REQUIRED or since is None:
                raise
            what = ("is older than what the journal retains" if (err.data or {}).get("reason") == "too_far_behind"
                    else "is ahead of this gateway's journal")
            raise GatewayError(RESYNC_REQUIRED, f"session {p.sessionId}: cursor {since} {what}: session/load it "
                               "instead (its whole retained conversation), or session/resume it without since",
                               err.data) from None
        return ANSWERED

    def _answer_attached(self, msg_id: int | str, p: AcpAttachParams, result: dict[str, Any]) -> None:
        """A load's or resume's answer, once the replay is sent: with the cursor of what the client now has."""
        attachment = self.attachments.get(p.sessionId)
        cursor = attachment.subscription.last_id if attachment is not None and attachment.subscription else None
        self._result(msg_id, {**result, **_gateway_meta(_kept_own(p.mcpServers), cursor)})

    async def resume_stream(self, session_id: str, since: int, then: Callable[[], None]) -> None:
        """An HTTP client's event stream of a session, resumed from its `Last-Event-ID`: the session's updates after
        `since`, then `then()`, then live (http_rules HT-9). Another owner's session is not found (-32002)."""
        await self.sessions.get(self.owner, session_id)
        await self._attach(session_id, since, answer_when_caught_up=then)

    async def _check_attach(self, p: AcpAttachParams) -> dict[str, Any]:
        view = await self.sessions.get(self.owner, p.sessionId)  # another owner's session is not found
        if p.cwd != view["cwd"]:
            raise invalid_params("cwd", f"session {p.sessionId} works in {view['cwd']}, not {p.cwd}: send its cwd")
        return view

    async def _list(self, p: AcpListParams, msg_id: int | str) -> dict[str, Any]:
        views: list[dict[str, Any]] = []
        cursor = p.cursor
        for _ in range(20):  # a cwd filter may thin pages out: a few more, never the whole store
            page = await self.sessions.list(self.owner, states=None, limit=LIST_PAGE, cursor=cursor)
            views += [v for v in page["sessions"] if p.cwd is None or v["cwd"] == p.cwd]
            cursor = page["next_cursor"]
            if cursor is None or len(views) >= LIST_PAGE:
                break
        answer: dict[str, Any] = {"sessions": [session_info(v) for v in views]}
        if cursor is not None:
            answer["nextCursor"] = cursor
        return answer

    async def _prompt(self, p: AcpPromptParams, msg_id: int | str) -> dict[str, Any]:
        self._attached(p.sessionId)
        choice = _chosen(PromptChoice, p.meta)
        key = choice.promptId
        blocks = tuple(p.prompt)
        self.own_prompts.setdefault(p.sessionId, []).append(blocks)
        self.prompts[msg_id] = p.sessionId  # $/cancel_request of it (a retry's too) cancels the turn it waits for
        try:
            slot = (self.owner, p.sessionId, key or "")
            outcome = ASKING.get(slot) if key is not None else None
            if outcome is None:  # the answer is worked out apart from this call: its connection may go (PK-1)
                outcome = asyncio.ensure_future(self._answer(p.sessionId, blocks, agent_meta(p.meta), key,
                                                             choice.retry))
                outcome.add_done_callback(_retrieve)
                if key is not None:  # registered before anything is awaited: a retry meanwhile waits for this one
                    ASKING[slot] = outcome
                    outcome.add_done_callback(lambda done: _forget(slot, done))
            answer = await asyncio.shield(outcome)
            # On a journal other nodes write too (a turn run by another node), the turn's events reach this node's
            # subscribers by catching up: all of them go out before this answer, as ACP orders them. So do those
            # of a client that reads slower than they came (the journal feeds it: they may not be handed over yet).
            await self.bus.refresh(self.owner)
            attachment = self.attachments.get(p.sessionId)
            if attachment is not None and attachment.subscription is not None:
                await attachment.subscription.reached(self.bus.head(self.owner))
        finally:
            self.prompts.pop(msg_id, None)
            if blocks in self.own_prompts.get(p.sessionId, []):  # refused, or its turn never started: no echo comes
                self._unwait(p.sessionId, blocks)
                self.cancel_pending.discard(p.sessionId)
        return answer

    async def _answer(self, session_id: str, blocks: tuple[dict[str, Any], ...], meta: dict[str, Any] | None,
                      key: str | None, retry: bool) -> dict[str, Any]:
        """A prompt's answer: asked again under its key, the turn the first ask started answers if the journal has
        it (PK-2); else the prompt runs now (PK-3)."""
        if key is not None and retry:
            ended = await turn_of_key(self.bus, self.owner, session_id, key)
            if ended is not None:
                view = await self.sessions.get(self.owner, session_id)
                return prompt_answer(session_id, view["agent"], ended)
        result = await self.sessions.prompt(self.owner, session_id, list(blocks), meta=meta, key=key)
        return {"stopReason": result["stop_reason"]}

    async def _close(self, p: AcpSessionParams, msg_id: int | str) -> dict[str, Any]:
        attachment = self.attachments.get(p.sessionId)
        if attachment is None:
            await self.sessions.row(self.owner, p.sessionId)  # -32002 for a session that is not there
            return {}
        if p.sessionId in self.prompts.values():  # the turn this client started ends with it
            await self._cancel_turn(p.sessionId)
        self._detach(attachment)
        return {}

    async def _set_config_option(self, p: AcpSetConfigOptionParams, msg_id: int | str) -> dict[str, Any]:
        self._attached(p.sessionId)
        if (p.type == "boolean") != isinstance(p.value, bool):
            raise invalid_params("value", "a boolean value goes with type: \"boolean\", and only a boolean does")
        view = await self.sessions.set_config_option(self.owner, p.sessionId, p.configId, p.value)
        options = view["config"]["options"]
        return {"configOptions": for_client(agent_options(options) or options, self.booleans)}

    async def _set_mode(self, p: AcpSetModeParams, msg_id: int | str) -> dict[str, Any]:
        self._attached(p.sessionId)
        await self.sessions.set_mode(self.owner, p.sessionId, p.modeId)
        return {}

    async def _set_model(self, p: AcpSetModelParams, msg_id: int | str) -> dict[str, Any]:
        self._attached(p.sessionId)
        await self.sessions.set_model(self.owner, p.sessionId, p.modelId)
        return {}

    # -- notifications --------------------------------------------------------------------------------------------
    def _cancel(self, p: AcpSessionParams) -> None:
        attachment = self.attachments.get(p.sessionId)
        if attachment is None:
            return
        if self.own_prompts.get(p.sessionId):  # its turn may not have started yet: cancelled as soon as it does
            self.cancel_pending.add(p.sessionId)
        self._spawn(self._cancel_turn(p.sessionId))

    def _cancel_request(self, p: AcpCancelRequestParams) -> None:
        session_id = self.prompts.get(p.requestId)
        if session_id is not None:  # a session/prompt: its turn is cancelled, and it answers `cancelled`
            self._cancel(AcpSessionParams(sessionId=session_id))

    async def _cancel_turn(self, session_id: str) -> None:
        try:
            await self.sessions.cancel_turn(self.owner, session_id)
        except GatewayError as err:
            log.info("ACP connection %s: cancelling the turn of %s: %s", self.connection_id, session_id, err.message)
        except Exception as exc:
            log_fault(log, f"cancelling the turn of {session_id}", exc)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _chosen(model: type[Choice], meta: dict[str, Any] | None) -> Choice:
    """`gateway_meta`, a malformed one refused with -32602 naming `_meta.acpGateway.KEY`."""
    try:
        return gateway_meta(model, meta)
    except ValidationError as exc:
        raise params_refused(exc, ("_meta", META_KEY)) from None


def _forget(slot: tuple[str, str, str], done: asyncio.Future[Any]) -> None:
    if ASKING.get(slot) is done:
        del ASKING[slot]


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def parse_params(method: AcpMethod, params: Any) -> Any:
    if params is not None and not isinstance(params, dict):
        raise invalid_params("params", "Invalid params: params must be an object")
    if too_deep(params):
        raise invalid_params("params", f"Invalid params: nested more than {MAX_NESTING} levels deep")
    try:
        return PARAMS[method].model_validate(params or {})
    except ValidationError as exc:
        raise params_refused(exc) from None


def _kept_own(given: list[dict[str, Any]]) -> list[dict[str, str]]:
    """MCP servers sent with a load or resume: the session keeps the ones it was started with (its agent has them)."""
    return [{"name": str(s.get("name", "?")) if isinstance(s, dict) else "?",
             "reason": "the session keeps the MCP servers it was started with"} for s in given]


def _gateway_meta(ignored: list[dict[str, str]], cursor: int | None) -> dict[str, Any]:
    """An answer's `_meta.acpGateway`: `ignoredMcpServers` (which MCP servers were not given to the agent, and why),
    and `eventCursor` (the client has every update of the session up to this journal id: session/resume from it)."""
    said: dict[str, Any] = {}
    if ignored:
        said["ignoredMcpServers"] = ignored
    if cursor is not None:
        said["eventCursor"] = cursor
    return {"_meta": {META_KEY: said}} if said else {}

