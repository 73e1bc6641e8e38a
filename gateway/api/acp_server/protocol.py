"""What a frame from a remote ACP client on `/acp` means, decided without I/O: its shape, the connection's phase.

Rules of this file:
- It knows the wire (JSON-RPC 2.0, one message per WebSocket text frame) and ACP's lifecycle, nothing of sessions,
  sockets or the store; `gateway.api.acp_server.connection` performs what it decides.
- A frame is classified once (`classify`), then the phase table (`decide`) says what happens to it.

Rows (the RFD's WebSocket mode and ACP's initialization; tests/gateway/api/test_acp_server_protocol.py holds them
as tables):
  F1  a text frame that is not JSON                                  -> -32700, id null
  F2  a JSON array (a batch: ACP has none)                            -> -32600, id null
  F3  JSON that is not a JSON-RPC 2.0 message                         -> -32600 (with its id when it had a usable one)
  F4  a binary frame                                                  -> ignored (the RFD: binary frames are ignored)
  C1  before `initialize`: any request other than `initialize`        -> -32600 "send initialize first"
  C2  before `initialize`: a notification or a response               -> ignored (nothing can be answered)
  C3  `initialize`, the first time                                    -> answered; the connection is ready
      (its params refused, e.g. a `protocolVersion` that is no integer: -32602, and still awaiting initialize)
  C4  `initialize` again                                              -> -32600 "already initialized"
  C5  ready: a request for a method the gateway serves                -> dispatched
  C6  ready: a request for any other method                           -> -32601, naming the methods served
  C7  ready: a notification the gateway acts on                       -> dispatched
  C8  ready: any other notification                                   -> ignored (a notification is never answered)
  C9  ready: a response                                               -> to the request the gateway sent with its id
  E1  a call the gateway refused with -32017 (a configuration value)  -> -32602 (ACP has no such code), its message
      and data as they are; every other error as `gateway.api.answering` answers it, on `/rpc` too
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from acp.errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR

from ...error_codes import CONFIG_REFUSED

SERVED_PROTOCOL_VERSION = 1  # the ACP version the gateway speaks to remote clients


class AcpMethod(StrEnum):
    """The agent-side ACP methods the gateway serves on `/acp`."""

    INITIALIZE = "initialize"
    AUTHENTICATE = "authenticate"
    SESSION_NEW = "session/new"
    SESSION_LOAD = "session/load"
    SESSION_RESUME = "session/resume"
    SESSION_LIST = "session/list"
    SESSION_PROMPT = "session/prompt"
    SESSION_CLOSE = "session/close"
    SESSION_SET_CONFIG_OPTION = "session/set_config_option"
    SESSION_SET_MODE = "session/set_mode"
    SESSION_SET_MODEL = "session/set_model"  # the legacy (pre-configOptions) model selector, still used by clients
    SESSION_CANCEL = "session/cancel"  # a notification
    CANCEL_REQUEST = "$/cancel_request"  # a notification


NOTIFICATIONS = frozenset({AcpMethod.SESSION_CANCEL, AcpMethod.CANCEL_REQUEST})
REQUESTS = frozenset(AcpMethod) - NOTIFICATIONS


class AcpPhase(Enum):
    """Where an `/acp` connection is in ACP's lifecycle."""

    AWAITING_INITIALIZE = "awaiting_initialize"
    READY = "ready"


class AcpDecision(Enum):
    """What the connection does with a well-formed message (`decide`): the rule ids of this file's docstring."""

    INITIALIZE = "initialize"  # C3
    DISPATCH = "dispatch"  # C5, C7
    DELIVER_RESPONSE = "deliver_response"  # C9
    IGNORE = "ignore"  # C2, C8, F4
    REFUSE_NOT_INITIALIZED = "refuse_not_initialized"  # C1
    REFUSE_REINITIALIZE = "refuse_reinitialize"  # C4
    REFUSE_UNKNOWN_METHOD = "refuse_unknown_method"  # C6


class Kind(Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


@dataclass(frozen=True)
class Message:
    """A well-formed JSON-RPC 2.0 message."""

    kind: Kind
    id: int | str | None = None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: Any = None


@dataclass(frozen=True)
class Malformed:
    """A frame that is not a JSON-RPC message: what to answer (F1-F3), or nothing (F4)."""

    rule: str
    code: int | None
    message: str
    id: int | str | None = None


def classify(frame: str | bytes) -> Message | Malformed:
    """F1-F4, then the message's kind."""
    if isinstance(frame, bytes):
        return Malformed("F4", None, "binary frames are ignored: send JSON-RPC as text frames")
    try:
        data = orjson.loads(frame)
    except orjson.JSONDecodeError:
        return Malformed("F1", PARSE_ERROR, "Parse error: the frame is not valid JSON")
    if isinstance(data, list):
        return Malformed("F2", INVALID_REQUEST, "Invalid request: ACP does not use JSON-RPC batches; send one "
                         "message per text frame")
    if not isinstance(data, dict):
        return Malformed("F3", INVALID_REQUEST, "Invalid request: a JSON-RPC message is a JSON object")
    msg_id = data.get("id")
    usable_id = msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None
    if data.get("jsonrpc") != "2.0":
        return Malformed("F3", INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"', usable_id)
    if "id" in data and msg_id is not None and usable_id is None:
        return Malformed("F3", INVALID_REQUEST, "Invalid request: id must be a string or an integer")
    method = data.get("method")
    if method is not None:
        if not isinstance(method, str):
            return Malformed("F3", INVALID_REQUEST, "Invalid request: method must be a string", usable_id)
        params = data.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return Malformed("F3", INVALID_REQUEST, "Invalid request: params must be an object", usable_id)
        if usable_id is None:
            return Message(Kind.NOTIFICATION, method=method, params=params)
        return Message(Kind.REQUEST, usable_id, method, params)
    if usable_id is not None and ("result" in data) != ("error" in data):
        return Message(Kind.RESPONSE, usable_id, result=data.get("result"), error=data.get("error"))
    return Malformed("F3", INVALID_REQUEST, "Invalid request: neither a request, a notification nor a response",
                     usable_id)


def decide(phase: AcpPhase, message: Message) -> AcpDecision:
    """C1-C9: what the connection does with a well-formed message in its phase."""
    if phase is AcpPhase.AWAITING_INITIALIZE:
        if message.kind is Kind.REQUEST:
            if message.method == AcpMethod.INITIALIZE:
                return AcpDecision.INITIALIZE
            return AcpDecision.REFUSE_NOT_INITIALIZED
        return AcpDecision.IGNORE
    if message.kind is Kind.RESPONSE:
        return AcpDecision.DELIVER_RESPONSE
    if message.kind is Kind.NOTIFICATION:
        return AcpDecision.DISPATCH if message.method in NOTIFICATIONS else AcpDecision.IGNORE
    if message.method == AcpMethod.INITIALIZE:
        return AcpDecision.REFUSE_REINITIALIZE
    return AcpDecision.DISPATCH if message.method in REQUESTS else AcpDecision.REFUSE_UNKNOWN_METHOD


def next_phase(phase: AcpPhase, decision: AcpDecision) -> AcpPhase:
    return AcpPhase.READY if decision is AcpDecision.INITIALIZE else phase


REFUSALS: dict[AcpDecision, tuple[int, str]] = {
    AcpDecision.REFUSE_NOT_INITIALIZED: (INVALID_REQUEST, "Invalid request: send initialize first (ACP's lifecycle: "
                                                          "initialize, then sessions)"),
    AcpDecision.REFUSE_REINITIALIZE: (INVALID_REQUEST, "Invalid request: this connection is already initialized; "
                                                       "open a new connection to initialize again"),
    AcpDecision.REFUSE_UNKNOWN_METHOD: (METHOD_NOT_FOUND, "Method not found: {method}; the gateway serves "
                                        + ", ".join(sorted(AcpMethod))),
}


def refusal(decision: AcpDecision, method: str | None) -> tuple[int, str, dict[str, Any] | None]:
    """The code, message and `data` of a refused frame: -32601's data names the method (`{"method": …}`, the one
    shape `/rpc` answers it with too)."""
    code, text = REFUSALS[decision]
    return code, text.replace("{method}", str(method)), {"method": method} if code == METHOD_NOT_FOUND else None


def acp_error_code(code: int) -> int:
    """E1: the code an ACP client is answered with for a gateway error's."""
    return INVALID_PARAMS if code == CONFIG_REFUSED else code


# -- params: ACP's names (camelCase); unknown fields and `_meta` are kept, as the protocol allows -----------------
class AcpParams(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)  # built at first use

    meta: dict[str, Any] | None = Field(default=None, alias="_meta")


SessionIdField = Field(min_length=1, max_length=200)
CwdField = Field(min_length=1, max_length=4096)


class AcpInitializeParams(AcpParams):
    protocolVersion: int = Field(ge=0, le=65535)
    clientCapabilities: dict[str, Any] | None = None
    clientInfo: dict[str, Any] | None = None


class AcpAuthenticateParams(AcpParams):
    methodId: str = Field(max_length=200)


class AcpNewSessionParams(AcpParams):
    cwd: str = CwdField
    mcpServers: list[dict[str, Any]] = Field(default_factory=list, max_length=100)
    additionalDirectories: list[str] | None = Field(default=None, max_length=100)


class AcpSessionParams(AcpParams):
    sessionId: str = SessionIdField


class AcpAttachParams(AcpSessionParams):
    """session/load and session/resume."""

    cwd: str = CwdField
    mcpServers: list[dict[str, Any]] = Field(default_factory=list, max_length=100)
    additionalDirectories: list[str] | None = Field(default=None, max_length=100)


class AcpListParams(AcpParams):
    cwd: str | None = Field(default=None, max_length=4096)
    cursor: str | None = Field(default=None, max_length=100)


class AcpPromptParams(AcpSessionParams):
    prompt: list[dict[str, Any]] = Field(min_length=1, max_length=1000)


class AcpCancelRequestParams(AcpParams):
    requestId: int | str


class AcpSetConfigOptionParams(AcpSessionParams):
    configId: str = Field(min_length=1, max_length=200)
    value: Annotated[str, Field(max_length=1000)] | bool
    type: str | None = Field(default=None, max_length=100)  # "boolean" for a boolean value


class AcpSetModeParams(AcpSessionParams):
    modeId: str = Field(min_length=1, max_length=200)


class AcpSetModelParams(AcpSessionParams):
    modelId: str = Field(min_length=1, max_length=200)


PARAMS: dict[AcpMethod, type[AcpParams]] = {
    AcpMethod.INITIALIZE: AcpInitializeParams,
    AcpMethod.AUTHENTICATE: AcpAuthenticateParams,
    AcpMethod.SESSION_NEW: AcpNewSessionParams,
    AcpMethod.SESSION_LOAD: AcpAttachParams,
    AcpMethod.SESSION_RESUME: AcpAttachParams,
    AcpMethod.SESSION_LIST: AcpListParams,
    AcpMethod.SESSION_PROMPT: AcpPromptParams,
    AcpMethod.SESSION_CLOSE: AcpSessionParams,
    AcpMethod.SESSION_SET_CONFIG_OPTION: AcpSetConfigOptionParams,
    AcpMethod.SESSION_SET_MODE: AcpSetModeParams,
    AcpMethod.SESSION_SET_MODEL: AcpSetModelParams,
    AcpMethod.SESSION_CANCEL: AcpSessionParams,
    AcpMethod.CANCEL_REQUEST: AcpCancelRequestParams,
}


# -- the gateway's own `_meta` on session/new ------------------------------------------------------------------
META_KEY = "acpGateway"  # session/new's `_meta.acpGateway` chooses the agent profile (docs/acp.md)


class GatewayChoice(BaseModel):
    """`_meta.acpGateway` of session/new: which agent profile runs the session, its title and task, and the choices
    it starts with (as `task.session.start`'s `config`)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)  # built at first use

    agent: str | None = Field(default=None, min_length=1, max_length=200)
    # An existing session of the owner (its id or name) that this session/new opens instead of starting one: an
    # editor that only knows session/new continues a gateway session (`acp-gateway connect --session`).
    session: str | None = Field(default=None, min_length=1, max_length=200)
    title: str | None = Field(default=None, max_length=1000)
    taskId: str | None = Field(default=None, min_length=1, max_length=200)
    config: dict[Annotated[str, Field(min_length=1, max_length=200)],
                 Annotated[str, Field(max_length=1000)] | bool] | None = Field(default=None, max_length=64)




class PromptChoice(BaseModel):
    """`_meta.acpGateway` of session/prompt: the client's name for this prompt (`promptId`), kept with its turn; and
    `retry`, said when the client asks again after losing the connection the first ask went on (its answer is then
    that turn's end: the turn is not run twice). Never passed on to the agent."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    promptId: str | None = Field(default=None, min_length=1, max_length=200)
    retry: bool = False

    @model_validator(mode="after")
    def _retry_names_its_prompt(self) -> PromptChoice:
        if self.retry and self.promptId is None:
            raise ValueError("retry asks a prompt again by its promptId: send the promptId of the first ask")
        return self


class ResumeChoice(BaseModel):
    """`_meta.acpGateway` of session/resume: `since`, the `eventId` of the last update the client has: the session's
    updates after it are sent before the answer (a client coming back after a lost connection misses none)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    since: int | None = Field(default=None, ge=0)


Choice = TypeVar("Choice", GatewayChoice, PromptChoice, ResumeChoice)


def gateway_meta(model: type[Choice], meta: dict[str, Any] | None) -> Choice:
    """A method's `_meta.acpGateway` as `model` says it may be (absent: its defaults). Raises pydantic's
    ValidationError for a malformed one (the caller names the field)."""
    chosen = (meta or {}).get(META_KEY)
    return model.model_validate(chosen if chosen is not None else {})


def agent_meta(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """A client's `_meta` as the agent gets it: without the gateway's own key."""
    if not meta or META_KEY not in meta:
        return meta
    rest = {k: v for k, v in meta.items() if k != META_KEY}
    return rest or None
