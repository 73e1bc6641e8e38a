"""The session runtime's settings: timeouts, limits and process policy, taken from the serve configuration."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from .quotas import Quotas

if TYPE_CHECKING:
    from .remote_hosts import RemoteHost


@dataclass
class Settings:
    state_dir: Path
    stale_window: float = 60.0
    ready_timeout: float = 90.0
    stop_grace: float = 2.0
    cancel_grace: float = 5.0
    request_timeout: float | None = 120.0  # session setup and other non-prompt requests to an agent
    initialize_timeout: float = 60.0
    max_live_sessions_per_owner: int = 32
    quotas: Quotas = field(default_factory=Quotas)  # what one owner may store, how fast it may start sessions
    # Agents' terminals (gateway.runtime.terminals): how many run at once, and how much of their output is kept
    max_terminals_per_session: int = 8
    max_terminals_per_owner: int = 32
    terminal_output_bytes: int = 1 << 20  # kept when the agent names no outputByteLimit
    max_terminal_output_bytes: int = 16 << 20  # the largest outputByteLimit an agent may ask for
    terminal_output_rate: int = 4 << 20  # bytes a second of a session's terminals' output read, all together
    # An agent's requests waiting for answers at once (acp.budget): per session, within its owner's
    max_agent_requests_per_session: int = 64
    max_agent_requests_per_session_bytes: int = 8 << 20
    max_agent_requests_per_owner: int = 256
    max_agent_requests_per_owner_bytes: int = 32 << 20
    agent_refusal_rate: float = 500.0  # refusals a second past which an agent's requests are read slower
    login_timeout: float = 600.0  # a terminal sign-in (an agent's login program) is killed after this long
    # Agents get a parent-death signal (via util-linux `setpriv`, where installed): a gateway that dies,
    # even by `kill -9`, takes its agents' processes with it. Start-up reaping covers what this misses.
    agents_die_with_gateway: bool = True
    # Agents and their terminals run this much below the gateway's CPU priority (`nice`; 0: the same): eight
    # terminals running `yes` must not take the CPU the gateway needs to serve everyone else.
    agent_niceness: int = 10
    # Agents run in agent hosts (docs/agent-hosts.md) that wait this long for a gateway to come back (0: no hosts,
    # agents are the gateway's children); a stopping gateway detaches from them ("detach") or stops them ("stop")
    host_linger: float = 900.0
    on_stop: Literal["detach", "stop"] = "detach"
    record_dir: Path | None = None  # each agent process's traffic, recorded (acp.replay.recording)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    # Where sessions may run (resolved): every owner's, and per-owner replacements; and the gateway's own
    # files, which no workspace may contain or lie in and which the agents' file methods never serve.
    workspace_roots: tuple[Path, ...] = ()
    owner_workspace_roots: Mapping[str, tuple[Path, ...]] = field(default_factory=dict)
    protected_paths: tuple[Path, ...] = ()
    # Sessions' own git worktrees (docs/worktrees.md): `<root>/<owner>/<session id>`; an owner's directory there is
    # one of its workspace roots. Default (None): beside the state directory.
    worktrees_root: Path | None = None
    # Machines sessions' agents may run on (gateway.runtime.remote_hosts), by name
    remote_hosts: Mapping[str, RemoteHost] = field(default_factory=dict)
    # A cluster (PostgreSQL store): this process's node name (id and incarnation) and how long a lease lasts
    # without renewal (a dead node's sessions can be taken over after it)
    node: str = ""
    lease_ttl: float = 15.0
    forward_timeout: float = 30.0  # a command forwarded to another node waits this long for it to be taken
    sandbox: str = "none"  # "none" or "bwrap", for profiles that do not choose (gateway.runtime.sandbox)
    # a sandboxed agent's network where its profile does not choose: outbound for several owners
    network: Literal["host", "none", "outbound"] = "host"
    # The gateway's own secrets (the cluster secret, owners' and the metrics token): an agent that read them (one
    # unconfined can read the configuration) has them shown as [secret] wherever it prints them
    gateway_secrets: tuple[str, ...] = ()
    cluster_secret: bytes = b""  # seals forwarded commands (gateway.store.command_seal); from the configuration only
    # Whether a frontend may give a session a stdio MCP server (a command this host runs): everyone's, and per owner
    allow_stdio_mcp_servers: bool = False
    owner_stdio_mcp_servers: Mapping[str, bool] = field(default_factory=dict)

    def roots_of(self, owner: str) -> tuple[Path, ...]:
        return self.owner_workspace_roots.get(owner, self.workspace_roots)

    @property
    def worktrees(self) -> Path:
        return self.worktrees_root or self.state_dir.with_name(self.state_dir.name + "-worktrees")

    def stdio_mcp_allowed(self, owner: str) -> bool:
        return self.owner_stdio_mcp_servers.get(owner, self.allow_stdio_mcp_servers)
