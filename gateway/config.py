"""`acp-gateway serve` configuration: flags, a TOML file, and the environment — one model, one-line errors."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ConfigError(ValueError):
    """One line naming the file and the key."""


class TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    token: str = Field(min_length=16)
    owner: str = Field(min_length=1, max_length=200)
    workspace_roots: list[str] | None = None  # this owner's, instead of the gateway's
    allow_stdio_mcp_servers: bool | None = None  # this owner's, instead of the gateway's


class AuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tokens: list[TokenEntry] = Field(default_factory=list)


class RemoteHostConfig(BaseModel):
    """`[remote_hosts.NAME]`: a machine sessions' agents may run on, reached through OpenSSH (docs/remote-hosts.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    url: str = Field(pattern=r"^ssh://")  # ssh://user@host[:port]
    identity_file: str | None = None  # the operator's key; default: ssh's own and the operator's SSH agent
    known_hosts: str | None = None  # the host's key must be in it (or in the operator's ~/.ssh/known_hosts)
    python: str = "python3"  # Python 3 there, which runs the agent host sent over the link
    path: str = "/usr/local/bin:/usr/bin:/bin"  # the agent's PATH there
    workspace_roots: list[str] = Field(min_length=1)  # where its sessions may run, there (absolute paths)
    owners: list[str] | None = None  # who may run sessions there; default: every owner
    sandbox: Literal["none", "bwrap"] = "none"  # "bwrap": each agent under bubblewrap there


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    state_dir: str | None = None
    # Where sessions, history and events are kept: a SQLite path (default `<state_dir>/gateway.db`; also
    # `sqlite:///path`) or a `postgresql://` URL (nodes on one PostgreSQL form a cluster)
    store: str | None = None
    node_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # default: host name
    lease_ttl: float = Field(default=15.0, gt=0)  # seconds a cluster node's lease lasts without renewal
    forward_timeout: float = Field(default=30.0, gt=0, le=55)  # seconds a forwarded command waits to be taken
    # Seals the commands cluster nodes forward to each other (the same on every node; required with a PostgreSQL
    # store). Only here, in the configuration: never in the environment, which an unconfined agent can read.
    cluster_secret: str | None = Field(default=None, min_length=32, repr=False)
    # On a PostgreSQL store: whether a journal group commit waits for the server's WAL flush before its events are
    # published (true, PostgreSQL's default). false: it does not (`synchronous_commit = off` for journal rows
    # only): events survive kill -9 of any node, as on SQLite, but a crash of the PostgreSQL server itself may lose
    # its last ~0.6 s of them (docs/deployment.md).
    journal_synchronous_commit: bool = True
    agents_dir: list[str] = Field(default_factory=list)
    # Record each agent process's ACP traffic, one directory per session (`<record_dir>/<session id>/NNN.jsonl`),
    # secrets and the session's paths written out: a session that went wrong becomes a fixture and a bug report.
    record_dir: str | None = None
    token: str | None = Field(default=None, min_length=16)
    # The operator's token for `/metrics` as a whole (every owner's series and the gateway's); an owner's token reads
    # only that owner's series. Never an owner's token too.
    metrics_token: str | None = Field(default=None, min_length=16, repr=False)
    default_agent: str = "reference"
    stale_window: float = Field(default=60.0, gt=0)
    ready_timeout: float = Field(default=90.0, gt=0)
    stop_grace: float = Field(default=2.0, ge=0)
    # Agent hosts (docs/agent-hosts.md): each agent runs in a host of its own that keeps it (and its turn) running
    # while the gateway restarts, for up to this many seconds without a gateway; 0: agents are the gateway's children
    host_linger: float = Field(default=900.0, ge=0)
    on_stop: Literal["detach", "stop"] = "detach"  # what a stopping gateway does with hosted agents
    cancel_grace: float = Field(default=5.0, ge=0)
    max_frame_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    event_retention: int = Field(default=100_000, ge=10)  # events kept per owner
    event_retention_bytes: int = Field(default=256 << 20, ge=1 << 20)  # and at most this many bytes per owner
    store_max_bytes: int = Field(default=0, ge=0)  # the database file's cap (0: none); beyond it writes fail -32016
    heartbeat_interval: float = Field(default=25.0, gt=0)  # seconds between heartbeats on a quiet subscription
    request_timeout: float = Field(default=120.0, gt=0)
    initialize_timeout: float = Field(default=60.0, gt=0)
    max_live_sessions_per_owner: int = Field(default=32, ge=1)
    # What one owner may store and how fast it may start sessions (gateway.runtime.quotas; docs/operations.md)
    max_sessions_per_owner: int = Field(default=1000, ge=1)
    max_history_bytes_per_owner: int = Field(default=1 << 30, ge=1 << 16)
    max_starts_per_minute_per_owner: int = Field(default=60, ge=1)
    # Agents' terminals: live ones per session and per owner, output kept by default and at most
    max_terminals_per_session: int = Field(default=8, ge=0)
    max_terminals_per_owner: int = Field(default=32, ge=0)
    terminal_output_bytes: int = Field(default=1 << 20, ge=1024)
    max_terminal_output_bytes: int = Field(default=16 << 20, ge=1024)
    terminal_output_rate: int = Field(default=4 << 20, ge=4096)
    # An agent's requests waiting for answers (permissions, questions, files, terminal calls), per session and owner
    max_agent_requests_per_session: int = Field(default=64, ge=1)
    max_agent_requests_per_session_bytes: int = Field(default=8 << 20, ge=64 << 10)
    max_agent_requests_per_owner: int = Field(default=256, ge=1)
    max_agent_requests_per_owner_bytes: int = Field(default=32 << 20, ge=64 << 10)
    agent_refusal_rate: int = Field(default=500, ge=1)  # refusals a second a session's agent is read at (x4: owner)
    max_connections_per_owner: int = Field(default=64, ge=1)
    agents_die_with_gateway: bool = True  # a parent-death signal for each agent (util-linux setpriv)
    agent_niceness: int = Field(default=10, ge=0, le=19)  # agents and their terminals run below the gateway (nice)
    # How agents' own processes are confined (docs/security.md): "none", or "bwrap" (bubblewrap: a sandbox per agent
    # showing it only its workspace, its owner's agent home and the system). A profile may choose its own.
    sandbox: Literal["none", "bwrap"] = "none"
    # Several owners' agents under one unconfined OS user can read each other's work: refused unless accepted here.
    allow_unconfined_agents: bool = False
    workspace_roots: list[str] = Field(default_factory=list)  # where sessions may run; empty: the user's home
    # Where sessions' own git worktrees are made (docs/worktrees.md), a directory per owner; default: beside the
    # state directory (`<state_dir>-worktrees`), never inside it (nothing there is ever an agent's)
    worktrees_root: str | None = None
    # Machines sessions' agents may run on, through OpenSSH (docs/remote-hosts.md), by name
    remote_hosts: dict[str, RemoteHostConfig] = Field(default_factory=dict)
    # A stdio MCP server is a command this host runs for the agent: frontends may give one only where allowed
    allow_stdio_mcp_servers: bool = False
    # Event frames (and bytes) queued for a connection before its subscriptions are fed from the journal instead
    outbox_limit: int = Field(default=100_000, ge=10)
    outbox_limit_bytes: int = Field(default=4 << 20, ge=64 * 1024)
    # A client that takes nothing from its socket for this long is closed with 4429 (it reconnects from its cursor)
    slow_reader_timeout: float = Field(default=60.0, gt=0, le=3600)
    # What the OS may hold of a connection's outgoing bytes (0: its own autotuning, up to megabytes): small keeps a
    # slow reader's answers and pongs close behind its backlog; a frontend far away (high RTT) may want more
    socket_send_buffer: int = Field(default=128 << 10, ge=0, le=64 << 20)
    max_batch: int = Field(default=100, ge=1, le=100_000)  # requests in one JSON-RPC batch
    allowed_origins: list[str] = Field(default_factory=list)
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = "text"  # json: one object a line, with session_id, agent, restore
    auth: AuthConfig = Field(default_factory=AuthConfig)


def _describe(exc: ValidationError, where: str) -> ConfigError:
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "(file)"
    if first["type"] == "extra_forbidden":
        return ConfigError(f"{where}: key '{key}' is not a configuration key")
    return ConfigError(f"{where}: key '{key}': {first['msg']}")


def load_config(path: Path | None, overrides: dict[str, Any]) -> ServeConfig:
    """The file's keys, then each flag given on the command line (None means not given)."""
    data: dict[str, Any] = {}
    where = "command line"
    if path is not None:
        where = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    for key, value in overrides.items():
        if value is not None and value != []:
            data[key] = value
    try:
        config = ServeConfig.model_validate(data)
    except ValidationError as exc:
        raise _describe(exc, where) from None
    _check_tokens(config, where)
    _check_remote_hosts(config, where)
    return config


def _check_remote_hosts(config: ServeConfig, where: str) -> None:
    from .agenthost.ssh import SshTarget

    for name, host in config.remote_hosts.items():
        key = f"remote_hosts.{name}"
        if not NAME.match(name):
            raise ConfigError(f"{where}: key '{key}': a remote host's name is letters, digits, '.', '_', '-'")
        try:
            SshTarget.parse(host.url)
        except ValueError as exc:
            raise ConfigError(f"{where}: key '{key}.url': {exc}") from None
        for root in host.workspace_roots:
            if not root.startswith("/") or "/../" in f"{root}/" or "//" in root:
                raise ConfigError(f"{where}: key '{key}.workspace_roots': {root!r} is not an absolute, normal path")


def _check_tokens(config: ServeConfig, where: str) -> None:
    """One token, one owner: a token given to two owners would log whoever presents it in as either."""
    owners: dict[str, str] = {}
    given = [(f"auth.tokens.{i}.token", e.token, e.owner) for i, e in enumerate(config.auth.tokens)]
    if config.token:
        given.append(("token", config.token, "default"))
    for key, token, owner in given:
        first = owners.setdefault(token, owner)
        if first != owner:  # the token itself is never printed
            raise ConfigError(f"{where}: key '{key}': this token is already the token of owner {first!r}, so it "
                              f"cannot also be {owner!r}'s: give each owner a token of its own")
    if config.metrics_token and config.metrics_token in owners:
        raise ConfigError(f"{where}: key 'metrics_token': this token is also owner {owners[config.metrics_token]!r}'s; "
                          "the operator's metrics token must be a token of its own")
