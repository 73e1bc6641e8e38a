"""Typed views of the ACP messages the client interprets. Everything else stays raw JSON.

Models allow extra fields and keep them (`_meta`, fields from newer schema versions), so a
message validated here can be forwarded without loss. Field names follow the wire (camelCase).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import INVALID_PARAMS, RpcError
from .update_kinds import STATE_UPDATE_KINDS as STATE_UPDATE_KINDS


class _Wire(BaseModel):
    # Built at first use, not at import: a gateway listens before its first agent speaks.
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


class SessionCapabilities(_Wire):
    # Each is "supported" when present as an object (`{}`); omitted or null means not advertised.
    resume: dict[str, Any] | None = None
    list_: dict[str, Any] | None = Field(default=None, alias="list")
    close: dict[str, Any] | None = None
    delete: dict[str, Any] | None = None
    fork: dict[str, Any] | None = None  # unstable in ACP v1 (`session/fork`)
    additionalDirectories: dict[str, Any] | None = None


class PromptCapabilities(_Wire):
    image: bool = False
    audio: bool = False
    embeddedContext: bool = False


class McpCapabilities(_Wire):
    http: bool = False
    sse: bool = False


class AgentAuthCapabilities(_Wire):
    logout: dict[str, Any] | None = None  # `{}` when the agent serves `logout`


class AgentCapabilities(_Wire):
    loadSession: bool = False
    auth: AgentAuthCapabilities = Field(default_factory=AgentAuthCapabilities)
    promptCapabilities: PromptCapabilities = Field(default_factory=PromptCapabilities)
    mcpCapabilities: McpCapabilities = Field(default_factory=McpCapabilities)
    sessionCapabilities: SessionCapabilities = Field(default_factory=SessionCapabilities)

    @property
    def mcp_transports(self) -> frozenset[str]:
        """The MCP server types the agent takes: stdio always (every agent must), http and sse where advertised."""
        mcp = self.mcpCapabilities
        return frozenset({"stdio", *(["http"] if mcp.http else []), *(["sse"] if mcp.sse else [])})

    @property
    def takes_additional_directories(self) -> bool:
        return self.sessionCapabilities.additionalDirectories is not None

    @property
    def can_resume(self) -> bool:
        return self.sessionCapabilities.resume is not None

    @property
    def can_load(self) -> bool:
        return self.loadSession

    @property
    def can_list(self) -> bool:
        return self.sessionCapabilities.list_ is not None

    @property
    def can_close(self) -> bool:
        return self.sessionCapabilities.close is not None

    @property
    def can_logout(self) -> bool:
        return self.auth.logout is not None

    @property
    def can_delete(self) -> bool:
        return self.sessionCapabilities.delete is not None

    @property
    def can_fork(self) -> bool:
        return self.sessionCapabilities.fork is not None


class AuthMethod(_Wire):
    id: str
    name: str = ""
    description: str | None = None
    type: str | None = None  # absent = "agent"; "env_var" and "terminal" are typed variants

    def env_var_names(self) -> list[str]:
        """Variables an `env_var` method needs; accepts the draft shapes seen in the wild."""
        extra = self.model_extra or {}
        names: list[str] = []
        if isinstance(extra.get("varName"), str):
            names.append(extra["varName"])
        for item in extra.get("vars") or []:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                names.append(item["name"])
            elif isinstance(item, str):
                names.append(item)
        return names


class Implementation(_Wire):
    name: str
    version: str | None = None
    title: str | None = None


class InitializeResponse(_Wire):
    protocolVersion: int
    agentCapabilities: AgentCapabilities = Field(default_factory=AgentCapabilities)
    authMethods: list[AuthMethod] = Field(default_factory=list)
    agentInfo: Implementation | None = None


class NewSessionResponse(_Wire):
    sessionId: str


def conversation(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `session/update` params among `updates` that are the conversation (not STATE_UPDATE_KINDS)."""
    return [u for u in updates if not (isinstance(u.get("update"), dict)
                                       and u["update"].get("sessionUpdate") in STATE_UPDATE_KINDS)]


StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


class PromptResponse(_Wire):
    stopReason: str


class PermissionOption(_Wire):
    optionId: str
    name: str = ""
    kind: str = ""


class RequestPermissionRequest(_Wire):
    sessionId: str
    toolCall: dict[str, Any]
    options: list[PermissionOption]


class ReadTextFileRequest(_Wire):
    sessionId: str
    path: str
    line: int | None = Field(default=None, ge=0)
    limit: int | None = Field(default=None, ge=0)


class WriteTextFileRequest(_Wire):
    sessionId: str
    path: str
    content: str


class EnvVariable(_Wire):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^=\x00]+$")
    value: str = Field(max_length=32768)


class CreateTerminalRequest(_Wire):
    sessionId: str
    command: str = Field(min_length=1, max_length=4096)
    args: list[str] = Field(default_factory=list, max_length=1000)
    env: list[EnvVariable] = Field(default_factory=list, max_length=200)
    cwd: str | None = Field(default=None, max_length=4096)
    outputByteLimit: int | None = None  # checked against the host's bounds (a typed refusal, not a shape error)


class TerminalRequest(_Wire):
    """terminal/output, wait_for_exit, kill, release: which terminal."""

    sessionId: str
    terminalId: str = Field(min_length=1, max_length=200)


def field_path(loc: Any) -> str:
    """A pydantic error's location as the dotted path of the field a user wrote (`config.model`): without the names
    pydantic gives the members of a union (`str`, `bool`, `constrained-str`), which are nobody's field."""
    return ".".join(str(part) for part in loc if not (
        isinstance(part, str) and (part in ("str", "bool", "int", "float") or part.startswith("constrained-"))))


def parse_request(model: type[_Wire], params: Any, method: str) -> Any:
    """A peer's request params as `model`, or -32602 naming the first field at fault (`data.field`)."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = field_path(first["loc"]) or "params"
        raise RpcError(INVALID_PARAMS, f"invalid params for {method}: {where}: {first['msg']}",
                       {"field": where}) from exc


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
