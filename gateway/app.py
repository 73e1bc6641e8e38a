"""`acp-gateway serve`: wires store, sessions, RPC and server together; owns start-up and shutdown.

Start-up does no per-session work (lazy recovery): sessions are resumed when a frontend asks.
A second gateway on the same state directory is refused by an exclusive lock on `gateway.lock`
(the kernel releases it if this process dies, even by `kill -9`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import secrets
import signal
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from agents.catalog import load_profiles
from agents.paths import default_state_dir
from agents.profiles import AgentProfile

from . import __version__, metrics
from .api.outbox import Outbox
from .api.rpc import RpcAdapter, load_dispatch
from .api.server import AcpFactory, AcpPeer, GatewayServer, ui_files, ui_pages
from .config import ServeConfig
from .errors import is_storage_error
from .journal import EventBus
from .memory import return_large_buffers
from .runtime import SessionManager, Settings, confinement
from .runtime.cluster import ClusterRefused, node_name
from .runtime.quotas import Quotas, journal_share
from .runtime.remote_hosts import configured as configured_remote_hosts
from .runtime.workspace import refusal, resolved
from .store import StoreBase, StoreInUse, open_store, redacted

log = logging.getLogger("acp-gateway")


class StartupError(RuntimeError):
    """One line for the user: what is wrong and what to do."""


class StateDirLock:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "gateway.lock"
        self._fh: IO[str] | None = None

    def acquire(self) -> None:
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise StartupError(f"another gateway (pid {holder}) is already serving {self.path.parent}: "
                               "stop it, or give this one another --state-dir") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def prepare_state_dir(config: ServeConfig) -> Path:
    state_dir = Path(config.state_dir).expanduser() if config.state_dir else default_state_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    return state_dir.resolve()


def resolve_tokens(config: ServeConfig, state_dir: Path) -> tuple[dict[str, str], str | None]:
    """token -> owner. Returns the generated token when one was created now (to be printed once)."""
    tokens = {entry.token: entry.owner for entry in config.auth.tokens}
    if config.token:
        tokens[config.token] = "default"
    if tokens:
        return tokens, None
    token_file = state_dir / "token"
    if token_file.exists():
        return {token_file.read_text().strip(): "default"}, None
    token = secrets.token_urlsafe(32)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    return {token: "default"}, token


def store_files(config: ServeConfig) -> tuple[Path, ...]:
    """A SQLite store given outside the state directory (`--store PATH`): the database and its WAL files are the
    gateway's own wherever they are — no session may run in a directory holding them, nor read or write them."""
    if not config.store or "://" in config.store:
        return ()
    db = resolved(Path(config.store).expanduser())
    return (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))


def workspace_settings(config: ServeConfig, state_dir: Path, config_file: Path | None) -> dict[str, Any]:
    """Workspace roots, resolved (default: the user's home), and the gateway's own files: the state directory and
    the configuration file, which no session may contain or see; and who may give a session a stdio MCP server."""
    roots = tuple(resolved(r) for r in config.workspace_roots) or (resolved(Path.home()),)
    per_owner = {e.owner: tuple(resolved(r) for r in e.workspace_roots)
                 for e in config.auth.tokens if e.workspace_roots is not None}
    protected = (resolved(state_dir), *((resolved(config_file),) if config_file else ()), *store_files(config))
    stdio = {e.owner: e.allow_stdio_mcp_servers for e in config.auth.tokens if e.allow_stdio_mcp_servers is not None}
    worktrees = resolved(Path(config.worktrees_root).expanduser() if config.worktrees_root
                         else state_dir.with_name(state_dir.name + "-worktrees"))
    overlap = refusal(worktrees, (worktrees,), protected)
    if overlap is not None:
        where = "lies inside" if overlap.value == "inside_gateway_files" else "holds"
        raise StartupError(f"worktrees_root {worktrees} {where} the gateway's own files (its state directory or "
                           "configuration): choose a directory outside them")
    return {"workspace_roots": roots, "worktrees_root": worktrees, "owner_workspace_roots": per_owner,
            "remote_hosts": configured_remote_hosts(config),
            "protected_paths": protected,
            "allow_stdio_mcp_servers": config.allow_stdio_mcp_servers, "owner_stdio_mcp_servers": stdio}


def acp_endpoint(sessions: SessionManager, bus: EventBus, profiles: Mapping[str, AgentProfile],
                 default_agent: str) -> AcpFactory:
    """The peer of each `/acp` connection: the gateway as the ACP agent of a remote client. The ACP server's modules
    are loaded at the first `/acp` connection, not before the gateway listens; what `initialize` says is taken now."""
    agents, prompt_capabilities = sorted(profiles), profiles[default_agent].prompt_capabilities.wire()

    def peer(owner: str, outbox: Outbox, connection_id: str) -> AcpPeer:
        from .api.acp_server import AcpConnection, EdgeInfo

        info = EdgeInfo(version=__version__, default_agent=default_agent, agents=agents,
                        prompt_capabilities=prompt_capabilities)
        return AcpConnection(sessions, bus, owner, outbox, info, connection_id)

    return peer


class AcpHttpOnDemand:
    """`/acp`'s Streamable HTTP, its modules (aiohttp's server among them) loaded at its first request, not before
    the gateway listens."""

    def __init__(self, sessions: SessionManager, bus: EventBus, profiles: Mapping[str, AgentProfile],
                 config: ServeConfig, tokens: Mapping[str, str]) -> None:
        self.make_peer = acp_endpoint(sessions, bus, profiles, config.default_agent)
        self.config = config
        self.tokens = tokens
        self.endpoint: Any = None

    def protocol(self) -> asyncio.Protocol:
        if self.endpoint is None:
            from .api.acp_server.http_endpoint import AcpHttpEndpoint

            config = self.config
            self.endpoint = AcpHttpEndpoint(
                lambda owner, outbox, connection_id: self.make_peer(owner, outbox, connection_id),  # type: ignore
                self.tokens, bind_host=config.host, allowed_origins=config.allowed_origins,
                max_body=config.max_frame_bytes, limit_bytes=config.outbox_limit_bytes,
                max_per_owner=config.max_connections_per_owner, server_header=f"acp-gateway/{__version__}")
        protocol: asyncio.Protocol = self.endpoint.protocol()
        return protocol

    async def close(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.close()


class Gateway:
    def __init__(self, config: ServeConfig, out: IO[str] = sys.stdout, config_file: Path | None = None) -> None:
        self.config = config
        self.config_file = config_file
        self.out = out
        self.instance_id = f"g-{uuid.uuid4().hex[:12]}"
        self.stopped = asyncio.Event()
        self.unconfined = False  # several owners' agents without a sandbox (allow_unconfined_agents)

    async def run(self) -> None:
        config = self.config
        profiles = load_profiles([Path(d) for d in config.agents_dir],
                                 Path(config.state_dir).expanduser() if config.state_dir else default_state_dir())
        if config.default_agent not in profiles:
            raise StartupError(f"default_agent {config.default_agent!r} has no profile; known: "
                               f"{', '.join(sorted(profiles))}")
        refused = confinement.refusal(config, profiles) or confinement.sandbox_unavailable(config,
                                                                                          profiles.values())
        if refused is not None:
            raise StartupError(refused)
        self.unconfined = len(confinement.owners_of(config)) > 1 and bool(confinement.unconfined(config, profiles))
        if self.unconfined:
            log.warning("agents run unconfined for %d owners (allow_unconfined_agents): each owner's agent can read "
                        "the others' work; see docs/security.md", len(confinement.owners_of(config)))
        missing = confinement.cluster_secret_missing(config)
        if missing is not None:
            raise StartupError(missing)
        state_dir = prepare_state_dir(config)
        lock = StateDirLock(state_dir)
        lock.acquire()
        try:
            tokens, generated = resolve_tokens(config, state_dir)
            node = node_name(config.node_id)
            store = await self._open_store(config.store or str(state_dir / "gateway.db"), node)
            bus = EventBus(store, retention=config.event_retention, heartbeat=config.heartbeat_interval,
                           retention_bytes=journal_share(config.event_retention_bytes, config.store_max_bytes))
            await bus.open()
            settings = Settings(state_dir=state_dir, stale_window=config.stale_window,
                                record_dir=Path(config.record_dir).expanduser() if config.record_dir else None,
                                ready_timeout=config.ready_timeout, stop_grace=config.stop_grace,
                                cancel_grace=config.cancel_grace, request_timeout=config.request_timeout,
                                initialize_timeout=config.initialize_timeout,
                                max_live_sessions_per_owner=config.max_live_sessions_per_owner,
                                max_terminals_per_session=config.max_terminals_per_session,
                                max_terminals_per_owner=config.max_terminals_per_owner,
                                terminal_output_bytes=config.terminal_output_bytes,
                                max_terminal_output_bytes=config.max_terminal_output_bytes,
                                terminal_output_rate=config.terminal_output_rate,
                                max_agent_requests_per_session=config.max_agent_requests_per_session,
                                max_agent_requests_per_session_bytes=config.max_agent_requests_per_session_bytes,
                                agent_refusal_rate=config.agent_refusal_rate,
                                max_agent_requests_per_owner=config.max_agent_requests_per_owner,
                                max_agent_requests_per_owner_bytes=config.max_agent_requests_per_owner_bytes,
                                quotas=Quotas(config.max_sessions_per_owner, config.max_history_bytes_per_owner,
                                              config.max_starts_per_minute_per_owner).within_store(
                                                  config.store_max_bytes),
                                agents_die_with_gateway=config.agents_die_with_gateway, node=node,
                                agent_niceness=config.agent_niceness,
                                host_linger=config.host_linger,
                                on_stop=config.on_stop,
                                lease_ttl=config.lease_ttl, forward_timeout=config.forward_timeout,
                                sandbox=config.sandbox,
                                network="outbound" if len(confinement.owners_of(config)) > 1 else "host",
                                cluster_secret=(config.cluster_secret or "").encode(),
                                gateway_secrets=tuple(s for s in (config.cluster_secret, config.metrics_token,
                                                                  *tokens) if s),
                                environ={k: v for k, v in os.environ.items()},
                                **workspace_settings(config, state_dir, self.config_file))
            sessions = SessionManager(store, bus, profiles, settings, self.instance_id)
            try:
                await sessions.open()
            except ClusterRefused as refused:
                raise StartupError(f"node {settings.node or self.instance_id}: {refused}") from None
            adapter = RpcAdapter(sessions, bus, config.default_agent, {"instance_id": self.instance_id},
                                 max_batch=config.max_batch)
            server = GatewayServer(adapter, tokens, host=config.host, port=config.port,
                                   max_frame_bytes=config.max_frame_bytes, allowed_origins=config.allowed_origins,
                                   ui=ui_pages(ui_files()), outbox_limit=config.outbox_limit,
                                   metrics=metrics.exposition, metrics_token=config.metrics_token,
                                   outbox_limit_bytes=config.outbox_limit_bytes,
                                   slow_reader_timeout=config.slow_reader_timeout,
                                   socket_send_buffer=config.socket_send_buffer,
                                   health=lambda: node_fault(store, sessions),
                                healthy=lambda: node_ok(store, sessions, self.unconfined),
                                   max_connections_per_owner=config.max_connections_per_owner,
                                   acp=acp_endpoint(sessions, bus, profiles, config.default_agent),
                                   acp_http=AcpHttpOnDemand(sessions, bus, profiles, config, tokens))
            self.sessions, self.server, self.store = sessions, server, store
            metrics.gauge("acp_gateway_live_sessions", "Sessions whose agent runs in this gateway",
                          lambda: len(sessions.live))
            metrics.gauge("acp_gateway_connections", "Open WebSocket connections", lambda: len(server.connections))
            metrics.gauge("acp_gateway_hosted_agents", "Agents running in agent hosts, attached to this gateway",
                          lambda: len(sessions.launcher.hosts.agents))
            metrics.gauge("acp_gateway_events_committed", "Events committed to the journal since start",
                          lambda: bus.committed)
            metrics.gauge("acp_gateway_unconfined_agents", "1 while several owners' agents run unconfined "
                          "(allow_unconfined_agents)", lambda: 1 if self.unconfined else 0)
            metrics.gauge("acp_gateway_store_healthy", "1 while the store accepts writes, 0 after a refused one",
                          lambda: 0 if store.health() else 1)
            load_dispatch()  # before it says it listens: the first frame after a restart waits for no import
            await server.start()
            tune_gc_for_serving()
            self._announce(state_dir, generated, server.port)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stopped.set)
            await self.stopped.wait()
            log.info("shutting down: closing connections, %s", "leaving agents in hosts running for the next gateway "
                     f"(up to host_linger = {config.host_linger:g} s; on_stop = \"stop\" stops them)"
                     if config.host_linger > 0 and config.on_stop == "detach" else "stopping agents")
            await server.close()
            await sessions.shutdown()
            await bus.close()
            await store.close()
        finally:
            lock.release()

    async def _open_store(self, url: str, node: str) -> StoreBase:
        """Open the store and claim it for this gateway: a store the gateway cannot reach is a one-line start-up
        error naming it (its password left out), not a traceback."""
        shown = redacted(url)
        try:
            store = await open_store(url, max_bytes=self.config.store_max_bytes, node=node,
                                     journal_synchronous_commit=self.config.journal_synchronous_commit,
                                     cluster_secret=(self.config.cluster_secret or "").encode())
        except Exception as exc:
            if is_storage_error(exc) or type(exc).__module__.startswith("asyncpg"):
                raise StartupError(f"cannot open the store {shown}: {exc}") from None
            raise
        try:
            await store.claim()
        except StoreInUse as exc:
            await store.close()
            raise StartupError(str(exc)) from None
        log.info("store: %s (%s)%s", shown, store.kind, f"; cluster node {node}" if store.shared_journal else "")
        return store

    def _announce(self, state_dir: Path, generated: str | None, port: int) -> None:
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        # Where the CLI of this state directory finds the gateway with no --url (a wildcard bind is reached on
        # loopback). Written after the bind: a file naming a port nobody listens on would mislead it.
        local = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, shown)
        url_file = state_dir / "url"
        url_file.write_text(f"ws://{local}:{port}/rpc\n")
        print(f"acp-gateway {self.instance_id} listening on ws://{shown}:{port}/rpc", file=self.out)
        print(f"ACP clients (WebSocket, same token): ws://{shown}:{port}/acp", file=self.out)
        print(f"state directory: {state_dir}", file=self.out)
        if generated:
            print(f"web UI (token generated now, shown once; kept in {state_dir / 'token'}):", file=self.out)
            print(f"  http://{shown}:{port}/?token={generated}", file=self.out)
        else:
            print(f"web UI: http://{shown}:{port}/ (token in {state_dir / 'token'} or your configuration)",
                  file=self.out)
        self.out.flush()


def tune_gc_for_serving() -> None:
    """Relaying an update allocates a handful of dicts; with CPython's default thresholds the cyclic
    collector ran every hundred or so updates and walked everything imported at startup on its
    older passes (~15% of a flood's CPU, measured with `make bench`). What exists once serving
    starts lives as long as the process: freeze it out of collection, and collect young objects
    less often (they are freed by reference counting anyway; the collector only finds cycles).
    `acp-gateway serve` starts with the collector off (cli/main.py): it is on from here."""
    gc.collect()  # startup's garbage goes now, not into the frozen generation
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(10_000, gen1, gen2)
    gc.enable()


def node_fault(store: StoreBase, sessions: SessionManager) -> str | None:
    """/healthz's 503: what is wrong with this node, and where to look."""
    fault = store.health()
    if fault is not None:
        where = ("check the database server" if store.kind == "postgresql"
                 else "free space under the state directory")
        return f"store refuses writes ({fault}): {where}"
    if sessions.cluster.clock_fault is not None:
        return f"node {sessions.cluster.node}: {sessions.cluster.clock_fault}"
    if sessions.cluster.lease_failure is not None:
        return (f"node {sessions.cluster.node} cannot renew its session leases ({sessions.cluster.lease_failure}): "
                "check the database server; its sessions move to other nodes when the leases run out")
    return None


def node_ok(store: StoreBase, sessions: SessionManager, unconfined: bool = False) -> str:
    said = "ok" if not sessions.cluster.enabled else (
        f"ok: node {sessions.cluster.node}, {len(sessions.cluster.held)} session lease(s) held, {store.kind} store")
    return said + ("; agents unconfined for several owners (allow_unconfined_agents)" if unconfined else "")


def serve_command(config: ServeConfig, config_file: Path | None = None) -> int:
    handler = logging.StreamHandler(sys.stderr)
    if config.log_format == "json":  # one object a line; a record's `extra` fields (session_id, agent, …) included
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter("{asctime}{levelname}{name}{message}", style="{",
                                           rename_fields={"asctime": "time", "levelname": "level", "name": "logger"}))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, config.log_level.upper(), logging.INFO), handlers=[handler])
    return_large_buffers()  # a burst's memory goes back to the system (see gateway.memory)
    gateway = Gateway(config, config_file=config_file)
    try:
        asyncio.run(gateway.run())
    except StartupError as exc:
        print(f"acp-gateway: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"acp-gateway: cannot serve on {config.host}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


