"""MCP servers a session is given (ACP's McpServer): their shape and bounds, who may give which, what the agent is
sent, and what is shown of them (never a secret). Pure: `parse` and `check_servers` refuse, `wire` is what ACP
carries, `shown` what views show.

Secrets are write-only: an env value (stdio) or a header value (http, sse) is stored and sent to the agent, and is
never in a view, an event, a log line, a metric or an error. A URL is shown without its user info and query. A
stdio server is a command the gateway's host runs for the agent: from an agent profile always, from a frontend
only for owners whose configuration allows it (`allow_stdio_mcp_servers`).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .models import field_path

MAX_SERVERS = 16  # per session
MAX_BYTES = 64 * 1024  # per session, all servers as sent
MAX_VALUE = 16 * 1024  # one env or header value
MAX_PAIRS = 64  # env variables or headers of one server
MAX_ARGS = 64

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110's token)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("must not contain NUL")
    return text


def _header_value(text: str) -> str:
    if any(c in text for c in "\r\n\x00"):
        raise ValueError("must not contain CR, LF or NUL")
    return text


def _absolute(path: str) -> str:
    if not os.path.isabs(path):
        raise ValueError("must be an absolute path (ACP runs it as given, with no PATH search)")
    return path


def _web_url(url: str) -> str:
    if any(c.isspace() or c == "\x00" for c in url):
        raise ValueError("must not contain whitespace or NUL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return url


Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_no_nul)]
Text = Annotated[str, Field(max_length=4096), AfterValidator(_no_nul)]


class _Model(BaseModel):
    # Built when a session is first given MCP servers, not at import (most gateways' starts never are).
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class EnvVar(_Model):
    name: Annotated[str, Field(max_length=256, pattern=_ENV_NAME.pattern)]
    value: Annotated[str, Field(max_length=MAX_VALUE), AfterValidator(_no_nul)]


class Header(_Model):
    name: Annotated[str, Field(max_length=256, pattern=_TOKEN.pattern)]
    value: Annotated[str, Field(max_length=MAX_VALUE), AfterValidator(_header_value)]


class StdioServer(_Model):
    type: Literal["stdio"] = "stdio"
    name: Name
    command: Annotated[Text, AfterValidator(_absolute)]
    args: list[Text] = Field(default_factory=list, max_length=MAX_ARGS)
    env: list[EnvVar] = Field(default_factory=list, max_length=MAX_PAIRS)


class WebServer(_Model):
    type: Literal["http", "sse"]
    name: Name
    url: Annotated[Text, AfterValidator(_web_url)]
    headers: list[Header] = Field(default_factory=list, max_length=MAX_PAIRS)


Server = Annotated[StdioServer | WebServer, Field(discriminator="type")]


@cache
def _servers() -> TypeAdapter[list[StdioServer | WebServer]]:
    """The list's validator, built at its first use (as the models are)."""
    return TypeAdapter(list[Server])


class McpRefusal(ValueError):
    """A server refused: which field of the request (`mcp_servers.2.url`), and why, in words a user acts on."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def parse(servers: Any, field: str = "mcp_servers") -> list[StdioServer | WebServer]:
    """The servers as given (ACP's McpServer shapes; `type` absent means stdio), or a Refusal naming the field."""
    if not isinstance(servers, list):
        raise McpRefusal(field, f"{field} must be a list of MCP servers")
    if len(servers) > MAX_SERVERS:
        raise McpRefusal(field, f"at most {MAX_SERVERS} MCP servers per session, not {len(servers)}")
    typed = [{"type": "stdio", **s} if isinstance(s, dict) and "type" not in s else s for s in servers]
    try:
        parsed = _servers().validate_python(typed)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(p for p in (field, field_path(x for x in first["loc"] if x not in ("stdio", "http", "sse")))
                         if p)
        # pydantic's message names the rule, never the value: a refused header value is not echoed back
        raise McpRefusal(where, f"MCP server {where}: {first['msg']}") from None
    names = [s.name for s in parsed]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise McpRefusal(field, f"two MCP servers are named {duplicate!r}: give each its own name")
    if len(orjson.dumps([wire(s) for s in parsed])) > MAX_BYTES:
        raise McpRefusal(field, f"the MCP servers take more than {MAX_BYTES // 1024} KiB: give fewer or smaller ones")
    return parsed


def check_servers(servers: Sequence[StdioServer | WebServer], *, stdio_allowed: bool, transports: Iterable[str] | None,
                  agent: str, field: str = "mcp_servers") -> None:
    """The owner's policy and the agent's capabilities (`transports`: the MCP types it advertises, None: unknown)."""
    known = None if transports is None else frozenset(transports)
    for index, server in enumerate(servers):
        if server.type == "stdio" and not stdio_allowed:
            raise McpRefusal(f"{field}.{index}", f"MCP server {server.name!r} is a stdio server, a command this "
                          "gateway's host would run: frontends may not give those unless the operator sets "
                          "allow_stdio_mcp_servers for your owner (or puts the server in the agent's profile)")
        if known is not None and server.type not in known:
            raise McpRefusal(f"{field}.{index}.type", f"agent {agent!r} does not take MCP servers over {server.type} "
                          f"(its initialize does not advertise mcpCapabilities.{server.type}): give it as "
                          f"{' or '.join(sorted(known))}, or use another agent")


def wire(server: StdioServer | WebServer) -> dict[str, Any]:
    """ACP's McpServer, as sent to the agent (secrets included)."""
    if isinstance(server, StdioServer):
        return {"name": server.name, "command": server.command, "args": list(server.args),
                "env": [{"name": e.name, "value": e.value} for e in server.env]}
    return {"type": server.type, "name": server.name, "url": server.url,
            "headers": [{"name": h.name, "value": h.value} for h in server.headers]}


def from_wire(stored: Iterable[Mapping[str, Any]]) -> list[StdioServer | WebServer]:
    """Servers as stored (their wire form); anything no longer valid is dropped (it was checked when given)."""
    try:
        return parse([dict(s) for s in stored])
    except McpRefusal:
        kept = []
        for item in stored:
            try:
                kept.extend(parse([dict(item)]))
            except McpRefusal:
                continue
        return kept


def shown_url(url: str) -> str:
    """A URL without what may be a credential: its user info and its query (and fragment)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{netloc}{parts.path}" + ("?…" if parts.query else "")


def shown(server: StdioServer | WebServer) -> dict[str, Any]:
    """What a view shows: names of env variables and headers, never their values."""
    if isinstance(server, StdioServer):
        return {"name": server.name, "type": "stdio", "command": server.command, "args": list(server.args),
                "env": [e.name for e in server.env]}
    return {"name": server.name, "type": server.type, "url": shown_url(server.url),
            "headers": [h.name for h in server.headers]}


def secrets(servers: Iterable[StdioServer | WebServer]) -> list[str]:
    """Every secret value of these servers (to keep them out of what an agent's errors carry to users)."""
    values = [e.value for s in servers if isinstance(s, StdioServer) for e in s.env]
    values += [h.value for s in servers if isinstance(s, WebServer) for h in s.headers]
    return [v for v in values if len(v) >= 4]


SECRET = "[secret]"


def redacted_params(params: Any) -> Any:
    """Request params with every MCP server's env and header values replaced by `[secret]` (a recording keeps the
    names, never the values); anything that is not such a list passes as it is."""
    if not isinstance(params, dict) or not isinstance(params.get("mcpServers"), list):
        return params
    servers = []
    for server in params["mcpServers"]:
        if isinstance(server, dict):
            server = dict(server)
            for key in ("env", "headers"):
                if isinstance(server.get(key), list):
                    server[key] = [{**pair, "value": SECRET} if isinstance(pair, dict) and "value" in pair else pair
                                   for pair in server[key]]
        servers.append(server)
    return {**params, "mcpServers": servers}


class Scrubber:
    """Keeps a session's secrets out of what its agent says: an agent that repeats what it was given (its MCP servers'
    env or headers, in a message, a tool call's output, an error) has each secret shown as `[secret]`. Built once per
    launch; with no secrets it does nothing and costs nothing."""

    def __init__(self, hidden: Sequence[str]) -> None:
        self.hidden = encodings(hidden)
        self._in_json = [orjson.dumps(h)[1:-1] for h in self.hidden]  # as each appears inside a JSON string

    def __bool__(self) -> bool:
        return bool(self.hidden)

    def text(self, text: str) -> str:
        return scrub(text, self.hidden) if self.hidden else text

    def value(self, value: Any) -> Any:
        """`value` (JSON-like) with every secret in its strings replaced; the same object when none is there."""
        if not self.hidden:
            return value
        raw = orjson.dumps(value)
        if not any(h in raw for h in self._in_json):
            return value
        for h in self._in_json:
            raw = raw.replace(h, SECRET.encode())
        return orjson.loads(raw)


def encodings(hidden: Sequence[str]) -> list[str]:
    """Each secret as it is, and as the encodings a scrub can know put it: URL-encoded (a query string, a form) —
    JSON-escaped is handled where JSON is scrubbed. Longest first, so a secret inside another is not left half
    shown. Not base64, not reversed, not split: an agent that can run a shell can always show its own environment
    (docs/security.md says what to do instead)."""
    found: dict[str, None] = {}
    for value in hidden:
        if value:
            found[value] = None
            found[urllib.parse.quote(value, safe="")] = None
            found[urllib.parse.quote_plus(value)] = None
    return sorted(found, key=len, reverse=True)


def scrub(text: str, hidden: Sequence[str]) -> str:
    """`text` with each secret replaced (an agent's error or stderr may repeat what it was given), also URL-encoded."""
    for value in encodings(hidden):
        if value in text:
            text = text.replace(value, SECRET)
    return text


def merged(profile: Sequence[StdioServer | WebServer], given: Sequence[StdioServer | WebServer]) \
        -> list[StdioServer | WebServer]:
    """The profile's servers, then the start's; a start's server replaces the profile's of the same name."""
    names = {s.name for s in given}
    return [*(s for s in profile if s.name not in names), *given]
