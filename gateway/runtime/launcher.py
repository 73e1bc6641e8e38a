"""Launch and restore: one agent per session at a time, started, negotiated (`acp.restore` decides), registered
as live, watched, and stopped.

A launch is a task of the runtime, shared by every caller that asks while it runs (twenty concurrent resumes
start one agent). Its executor row is written before the process exists and names the execution, so a crash
at any point leaves a record `reaper` can act on; the agent's own pid and start time follow once it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from acp import mcp
from acp.auth import describe_methods
from acp.client import AcpClient, ClientOptions
from acp.errors import AcpError
from acp.models import AuthMethod, Implementation
from acp.process import DEFAULT_STDERR_BYTES
from acp.replay.recording import record_process
from acp.restore import Outcome, RestoreMethod
from acp.session_config import ConfigOffer
from acp.session_setup import RestoreResult, establish_session
from acp.terminals import Terminal, TerminalSpec, request_key
from agents.profiles import AgentProfile
from agents.registry.credentials import given, keep_vars, offered_vars, required_vars
from agents.registry.installs import current_version, launch_refusal, profile_at

from .. import metrics
from ..agenthost.client import HostError
from ..agenthost.remote_files import RemoteFiles
from ..errors import log_fault, not_resumable, workspace_missing, workspace_refused
from ..store import HistoryEntry, SessionRow, StoreBase
from . import reaper, remote_hosts, remote_launch, workspace
from .broker import PermissionBroker
from .capabilities import CapabilityProbe
from .cluster import Cluster, HeldElsewhere
from .config import WATCHED, ConfigKeeper, SessionConfig, capabilities_json, setup_plan, stored
from .diagnosis import hidden_values, limit_said, stderr_said
from .elicitations import ElicitationBroker
from .history import HistoryCoalescer
from .homes import HomeRefused, ensure_home
from .hosting import HostedAgent, Hosts
from .key_proxy import KeyProxy
from .launch_words import FailureFacts, ReturnFacts, failure_said, return_said
from .live import LiveSession
from .quotas import Usage
from .remote_launch import RemoteRefused, RemoteSite
from .settings import Settings
from .sign_in import AuthSeen, SignInSecrets
from .sign_in_needs import KeyFacts, launch_asks_sign_in, missing_key, sign_in_words
from .sign_in_rules import NEEDS_SIGN_IN, SIGNED_IN
from .spawn_env import Spawn
from .spawning import AgentSpawner, SpawnSite
from .states import TERMINAL_SESSION_STATES, IllegalTransition, SessionEvent, SessionState
from .status import Boot, BootFacts, decide_boot
from .terminals import TERMINAL_MARKER, SessionTerminals, TerminalCounts
from .writer import KEPT_RUNNING, HistoryWriter, SessionWriter

log = logging.getLogger(__name__)


@dataclass
class Launch:
    """A launch in progress: what every concurrent caller awaits, whose it is, and how to tell it to give up."""

    future: asyncio.Future[LaunchResult]
    owner: str
    cancel: asyncio.Event


@dataclass
class LaunchRun:
    """One launch's facts as its steps gather them (`Launcher._launch_inner`)."""

    row: SessionRow
    profile: AgentProfile
    config: SessionConfig
    env: dict[str, str]
    home: Path
    token: str | None  # the saved ACP session to restore; None for a fresh start
    first_launch: bool
    fresh_start: bool
    execution_id: str
    history: HistoryWriter
    coalescer: HistoryCoalescer = field(default_factory=HistoryCoalescer)
    client: AcpClient | None = None
    identity: asyncio.Future[None] | None = None  # the agent's pid written to its executor row


@dataclass
class LaunchResult:
    live: bool
    restore: RestoreResult | None = None
    error: str | None = None
    how: str | None = None  # how the agent came back, as the session's message says it


def check_workspace(settings: Settings, owner: str, session_id: str | None, cwd: str) -> None:
    """-32011 when `cwd` does not exist, or may not be this owner's workspace (`workspace.unfit` says why)."""
    why = workspace.unfit(settings, owner, cwd)
    if why is not None:
        raise (workspace_missing(session_id, cwd) if why.rule is None
               else workspace_refused(session_id, cwd, why.rule.value, why.message))


def check_resumable(row: SessionRow, settings: Settings) -> None:
    """A session is launched again only if it is not terminal and its workspace passes today's rules."""
    if SessionState(row.state) in TERMINAL_SESSION_STATES:
        raise not_resumable(row.id, row.state, f"session {row.id} is {row.state} and cannot be resumed; "
                            "start a new session")
    if row.host is None:
        check_workspace(settings, row.owner, row.id, row.cwd)
        return
    # Still configured, still the owner's, its directory still one of the host's (whether it is still there is
    # asked of the remote machine at the launch)
    refused = remote_hosts.admitted(settings.remote_hosts, row.owner, row.host, row.cwd)
    if isinstance(refused, remote_hosts.Refusal):
        raise workspace_refused(row.id, row.cwd, refused.rule.value, f"session {row.id}: {refused.message}")


class Launcher:
    def __init__(self, store: StoreBase, writer: SessionWriter, broker: PermissionBroker,
                 profiles: Mapping[str, AgentProfile], settings: Settings, instance_id: str,
                 live: dict[str, LiveSession], spawn: Callable[[Any], asyncio.Task[Any]],
                 on_ready: Callable[[LiveSession, str], None], cluster: Cluster, keeper: ConfigKeeper,
                 elicitations: ElicitationBroker) -> None:
        self.store = store
        self.writer = writer
        self.broker = broker
        self.profiles = profiles
        self.settings = settings
        self.instance_id = instance_id
        self.live = live
        self._spawn = spawn
        self._on_ready = on_ready  # (live, the task's description): a first launch's initial prompt
        self.launches: dict[str, Launch] = {}  # session id -> its launch in progress
        self.cluster = cluster  # the session's lease is held while its agent runs here, and handed back after
        self.keeper = keeper
        self.elicitations = elicitations
        self.usage = Usage(store, settings.quotas)  # each owner's stored sessions and history, for the quotas
        self.terminal_counts = TerminalCounts()  # the agents' live terminals, per session and per owner
        self.logins: set[Terminal] = set()  # terminal sign-ins running: they end with the gateway (`end_logins`)
        self.sign_in = SignInSecrets(settings.state_dir)  # what owners gave agents to sign in (write-only)
        self.auth_seen = AuthSeen(settings.state_dir)  # what agents last told of each owner's sign-in (auth_state)
        self.keys = KeyProxy(settings.state_dir)  # brokered keys: the agents get stand-ins, the proxy the real ones
        self.spawner = AgentSpawner(settings, self.keys)
        self.probe = CapabilityProbe(settings)  # what each profile's agent supports, learned at every `initialize`
        # Agents that outlive this gateway. In a cluster a host lingers no longer than a lease lasts: past it another
        # node may take the session over, and must not find its old agent still at work.
        self.hosts = Hosts(store, settings.state_dir,
                           min(settings.host_linger, settings.lease_ttl) if cluster.enabled else settings.host_linger,
                           settings.remote_hosts)

    def launch_once(self, row: SessionRow, *, fresh_start: bool) -> asyncio.Future[LaunchResult]:
        """One launch per session at a time: every concurrent caller shares the same future."""
        existing = self.launches.get(row.id)
        if existing is not None:
            return existing.future
        cancel = asyncio.Event()
        future = self._spawn(self._launch(row, fresh_start=fresh_start, cancel=cancel))
        self.launches[row.id] = Launch(future, row.owner, cancel)
        future.add_done_callback(lambda _: self.launches.pop(row.id, None))
        return future

    async def abort(self, session_id: str, grace: float) -> None:
        """Cancel a launch in progress (the restore is told to give up) and wait up to `grace` for it."""
        launch = self.launches.get(session_id)
        if launch is not None:
            launch.cancel.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(launch.future), grace)

    async def _launch(self, row: SessionRow, *, fresh_start: bool, cancel: asyncio.Event) -> LaunchResult:
        try:
            result = await self._launch_inner(row, fresh_start=fresh_start, cancel=cancel)
            if not result.live:
                self._revoke_keys(row.id)
                await self.cluster.release(row.id)
            return result
        except Exception as exc:  # a bug must not leave the session STARTING forever
            self._revoke_keys(row.id)
            await self.cluster.release(row.id)
            log_fault(log, f"launch of session {row.id} failed", exc)  # a store fault or a fenced write: one line
            with contextlib.suppress(Exception):
                current = await self.store.sessions.get(row.id)
                if current is not None and SessionState(current.state) == SessionState.STARTING:
                    await self.preserve(current, f"internal error while starting the agent: {type(exc).__name__}")
            return LaunchResult(False, error=str(exc))

    async def _launch_inner(self, row: SessionRow, *, fresh_start: bool, cancel: asyncio.Event) -> LaunchResult:
        """A launch's four steps: spawn the agent, negotiate its session (`acp.restore` decides), settle a failure or
        go live. Each returns a LaunchResult when the launch ends there."""
        run = await self._prepare(row, fresh_start)
        if isinstance(run, LaunchResult):
            return run
        started = await self._spawn_agent(run)
        if started is not None:
            return started
        result, failure, found = await self._negotiate(run, cancel)
        settled = await self._settle_failure(run, result, failure)
        if settled is not None:
            return settled
        assert result is not None and result.session_id is not None
        unsigned = await self._key_missing(run, result)
        if unsigned is not None:
            return unsigned
        return await self._go_live(run, result, found)

    async def _prepare(self, row: SessionRow, fresh_start: bool) -> LaunchRun | LaunchResult:
        """The pinned profile, the saved session, the stored configuration, the owner's home and the agent's
        environment; the session moves to STARTING."""
        profile = self.profiles.get(row.agent)
        if profile is None:
            await self.writer.apply(row, SessionEvent.FAIL,
                                    error_message=f"agent profile {row.agent!r} is no longer configured")
            return LaunchResult(False, error="unknown agent")
        profile, refusal = await self._pinned(row, profile, fresh_start)
        if refusal is not None:
            return await self._launch_failed(row, refusal)
        executor = await self.store.executors.get(row.id)
        token = None if fresh_start or executor is None else executor.resume_token
        first_launch = not row.launched
        config = await stored(self.store, row.id)
        try:
            row = await self.writer.apply(row, SessionEvent.LAUNCH, error_message=None)
        except IllegalTransition:  # ended (a cancel finished by a restarted gateway) since the caller read it
            return LaunchResult(False, error=f"session {row.id} ended before its agent could start")
        execution_id = f"x-{uuid.uuid4().hex}"
        try:
            home = ensure_home(self.settings.state_dir, row.owner, profile)  # the owner's: never shared with another
        except HomeRefused as refused:
            return await self._launch_failed(row, f"session {row.id}: {refused}")
        env = await self._execution_env(row, profile, config, home, execution_id)
        owner = row.owner
        history = HistoryWriter(self.store, row.id, lambda nbytes: self.usage.wrote_history(owner, nbytes))
        return LaunchRun(row, profile, config, env, home, token, first_launch, fresh_start, execution_id, history)

    async def _execution_env(self, row: SessionRow, profile: AgentProfile, config: SessionConfig, home: Path,
                             execution_id: str) -> dict[str, str]:
        """An agent execution's environment — a launch's, or that of one a host kept running, taken back — and what
        `config` must hide of it from events."""
        # What the owner gave this profile's agents to sign in (an env_var method's values) goes in their environment.
        signed_in = self.sign_in.get(row.owner, profile.id)
        config.sign_in_values = list(signed_in.values())
        # the operator's keys and the gateway's own secrets, if the agent repeats them
        config.profile_secrets = [*hidden_values(profile, []), *self.settings.gateway_secrets]
        env = {**profile.launch_env(self.settings.environ, home), **signed_in, reaper.MARKER: execution_id}
        if profile.brokered:  # stand-ins in the key variables (the same for the same execution: `KeyProxy.stand_in`)
            env.update(await self.keys.admit(row.owner, row.id, execution_id, profile.brokered,
                                             dict(self.settings.environ)))
        return env

    async def _spawn_agent(self, run: LaunchRun) -> LaunchResult | None:
        """The agent's process, its updates flowing from the first byte (a session/load replays history before it
        answers); None once it runs."""
        row, profile, config = run.row, run.profile, run.config
        on_update = self._update_intake(row, run.coalescer, run.history, config)
        # Recorded before the process exists: a crash from here on leaves a marker the next start finds.
        await asyncio.gather(self.writer.stage(row, "launching"), self.store.executors.set_running(
            row.id, execution_id=run.execution_id, instance_id=self.instance_id, cwd=row.cwd))
        site: RemoteSite | None = None
        if row.host is not None:  # on a remote host (docs/remote-hosts.md): its directory as that machine has it
            try:
                site = await remote_launch.prepare(self.settings.remote_hosts, row.id, row.owner, row.host, row.cwd,
                                                   profile.id)
            except RemoteRefused as refused:
                return await self._launch_failed(row, str(refused))
        spawn = self._command(profile, row, config, run.env, run.home, run.token, site)
        terminals = (self._terminal_host(row, profile, config, run.env, run.home, run.history, site)
                     if profile.terminals else None)
        try:
            if site is not None:
                agent = await self.hosts.start_remote(row.id, run.execution_id, site.host, spawn, site.home,
                                                      self.settings.stop_grace, reaper.MARKER, DEFAULT_STDERR_BYTES)
                run.client = await self._client_or_stop(row, agent, on_update, terminals)
            elif self.hosted(profile):  # in an agent host of its own: it outlives this gateway (docs/agent-hosts.md)
                agent = await self.hosts.start(row.id, run.execution_id, spawn, self.settings.stop_grace,
                                               reaper.MARKER, DEFAULT_STDERR_BYTES)
                run.client = await self._client_or_stop(row, agent, on_update, terminals)
            else:
                run.client = await AcpClient.launch(
                    spawn.argv, cwd=row.cwd, env=spawn.env, process_cwd=spawn.cwd, pass_fds=spawn.fds,
                    on_update=on_update,
                    on_permission=lambda params: self._on_permission(row.id, params),
                    options=self._client_options(row), terminal_host=terminals,
                    on_elicitation=self._elicitation_handler(row),
                )
        except (AcpError, HostError) as exc:
            return await self._launch_failed(row, f"could not launch agent {profile.id!r} for session {row.id}: {exc}")
        finally:
            spawn.close()  # the agent's process has its copy of the sandbox's arguments (or failed to start)
        metrics.LAUNCHES.labels(row.owner, profile.id).inc()
        if self.settings.record_dir is not None:
            record_process(self.settings.record_dir, row.id, run.client, hidden_values(profile, config.secrets()),
                           row.cwd, run.home)
        pid = run.client.process.pid if site is None else None  # a remote pid is no process of this machine's
        # The agent's identity is written while it starts up (the write hides behind its start-up time); every
        # later write of the executor row waits for it, so it can never overwrite how the launch ended.
        run.identity = asyncio.ensure_future(self.store.executors.set_running(
            row.id, execution_id=run.execution_id, instance_id=self.instance_id, cwd=row.cwd, pid=pid,
            proc_start=reaper.process_start(pid) if pid is not None else None, boot_id=reaper.boot_id()))
        return None

    def hosted(self, profile: AgentProfile) -> bool:
        """Whether this profile's agents run in agent hosts (a brokered key's stand-in is honoured again by the next
        gateway: `KeyProxy.stand_in`)."""
        return self.hosts.enabled

    def _elicitation_handler(self, row: SessionRow) -> Any:
        return self.elicitations.handler(
            lambda: live_now.row if (live_now := self.live.get(row.id)) is not None else row)

    async def _client_or_stop(self, row: SessionRow, agent: HostedAgent,
                              on_update: Callable[[dict[str, Any], bool], None],
                              terminals: SessionTerminals | None) -> AcpClient:
        """`_hosted_client`; a client that could not be made stops the host it would have spoken to (and, for a
        remote one, its link): nothing is left running for a launch that failed."""
        try:
            return self._hosted_client(row, agent, on_update, terminals)
        except Exception as exc:
            await agent.stop(self.settings.stop_grace)
            raise HostError(f"the agent's client could not be made: {exc}") from exc

    def _hosted_client(self, row: SessionRow, agent: HostedAgent, on_update: Callable[[dict[str, Any], bool], None],
                       terminals: SessionTerminals | None) -> AcpClient:
        """The ACP client of an agent in a host: the ledger sees every line it is handed (no await between the
        client's start and the observer: no line can be read before)."""
        client = AcpClient(agent, cwd=row.cwd, on_update=on_update,
                           on_permission=lambda params: self._on_permission(row.id, params),
                           options=self._client_options(row, agent.first_request_id), terminal_host=terminals,
                           on_elicitation=self._elicitation_handler(row))
        if row.host is not None and agent.connection.welcome.serves_files:  # its files, served where they are
            client.file_server = RemoteFiles(agent.connection, self.settings.request_timeout or 30.0)
        stdout, host_name = agent.connection.stdout, agent.record.socket

        def naming_request() -> None:  # the request handled now, named by its line (a terminal's id follows from it)
            request_key.set(f"{host_name}:{stdout.consumed}")

        client.conn.on_line = stdout.line_done
        client.conn.naming_request = naming_request
        client.conn.observers.append(agent.observe)
        if terminals is not None and client.terminals is not None and agent.connection.welcome.runs_terminals:
            # Its terminals run in its host, and outlive this gateway with it. Those the host kept running while no
            # gateway ran are known again before the agent's first replayed line is read (a `terminal/wait_for_exit`
            # it sent before the restart is among them); what the session's events lack of them is published. (A
            # host an older gateway started runs none: its agent's terminals are this gateway's, as they were.)
            client.terminals.runner = agent.terminals
            for terminal in agent.terminals.reported:
                unpublished_exit = terminals.adopt(terminal, agent.marked_terminals.get(terminal.id))
                client.terminals.adopt(terminal, watch=unpublished_exit)
            self.hosts.serve_terminals(row.id, terminals)
        return client

    def _client_options(self, row: SessionRow, first_request_id: int = 0) -> ClientOptions:
        settings = self.settings
        return ClientOptions(request_timeout=settings.request_timeout, initialize_timeout=settings.initialize_timeout,
                             stop_grace=settings.stop_grace, first_request_id=first_request_id,
                             never_serve=tuple(str(p) for p in settings.protected_paths),
                             serve_files=row.host is None,  # a remote host's files are not this machine's
                             tree_marker=reaper.MARKER, request_budget=self.spawner.request_budget(row))

    async def _negotiate(self, run: LaunchRun, cancel: asyncio.Event) -> tuple[
            RestoreResult | None, Exception | None, list[dict[str, Any]]]:
        """`initialize`, then the session established as the restore rules say: (the result, the error that
        prevented one, the additional directories the agent was not given)."""
        row, profile, config, client = run.row, run.profile, run.config, run.client
        assert client is not None and run.identity is not None
        result: RestoreResult | None = None  # set only when the negotiation ran to its end
        failure: Exception | None = None
        found: list[dict[str, Any]] = []
        try:
            await self.writer.stage(row, "initializing")
            init = await client.initialize()
            caps = init.agentCapabilities
            self.probe.learned(profile.id, caps)
            self.auth_seen.offered(profile.id, offered_vars(describe_methods(init.authMethods)))
            config.capabilities = capabilities_json(caps)
            config.agent_info = _agent_info(init.agentInfo)
            servers, directories, found = setup_plan(config, caps,
                                                     lambda d: workspace.unfit(self.settings, row.owner, d))
            client.extra_roots = tuple(directories)  # its file methods may reach them too
            restoring = bool(run.token) and profile.native_session_resume
            auth_method = config.auth_method or profile.auth_method  # the owner's choice, else the profile's
            await self.writer.stage(row, "authenticating" if auth_method and not restoring else "restoring")
            result = await establish_session(
                client, native_session_resume=profile.native_session_resume, resume_token=run.token,
                cwd=row.cwd, mcp_servers=servers, additional_directories=directories,
                auth_method=auth_method, environ=run.env, cancel=cancel)
        except (AcpError, TimeoutError) as exc:
            failure = exc
        await run.identity
        _count_restore(row.owner, profile.id, result)
        if result is not None:
            restore = result.to_json()
            log.info("session %s: agent %s %s (plan %s, attempts %s)", row.id, profile.id, restore["outcome"],
                     restore["plan"], [a["method"] for a in restore["attempts"]],
                     extra={"session_id": row.id, "agent": profile.id, "restore": restore})
        return result, failure, found

    async def _settle_failure(self, run: LaunchRun, result: RestoreResult | None,
                              failure: Exception | None) -> LaunchResult | None:
        """A launch without a session: the agent stopped and the session waits for a sign-in, keeps its saved
        session (`recover`), or fails (a first launch had nothing to keep); None when there is a session to go on
        with. An agent that asks for a sign-in on a restore is told to the frontends too."""
        row, profile, config, client = run.row, run.profile, run.config, run.client
        assert client is not None
        hidden = hidden_values(profile, config.secrets())
        if launch_asks_sign_in(result, failure):
            # The agent wants its person to sign in. Its first launch waits for that instead of failing; a restore
            # keeps the saved session as the restore rules say (`recover` retries it), and says how to sign in too.
            reason = mcp.scrub(result.describe_failure() if result is not None else str(failure), hidden)
            methods = client.init.authMethods if client.init else []
            if not run.token:
                await self._stop_unsettled(run, "needs_auth")
                await self.needs_auth(row, profile, config, methods, reason)
                return LaunchResult(False, restore=result, error=reason)
            await self.ask_sign_in(row, profile, config, methods, reason)
        if result is not None and result.outcome not in (Outcome.PRESERVED, Outcome.FAILED) \
                and result.session_id is not None:
            return None
        await self._stop_unsettled(run, "failed")
        await client.process.stderr_tail()  # what an exited agent left in the pipe is read first
        said = stderr_said(client.process, profile, config.secrets())
        reason = mcp.scrub(failure_said(FailureFacts(
            agent=profile.id, token=run.token, failure=None if failure is None else str(failure),
            failure_class=None if result is None or result.failure_class is None else result.failure_class.value,
            described=result.describe_failure() if result is not None else "",
            can_sign_in=config.auth is not None)), hidden) + said
        log.warning("session %s: %s", row.id, reason, extra={"session_id": row.id, "agent": profile.id})
        if run.first_launch and not run.token:  # it never had a session: nothing is kept to come back to
            await self.fail_first_launch(row, reason)
        else:
            await self.preserve(row, reason)
        return LaunchResult(False, restore=result, error=reason)

    async def _stop_unsettled(self, run: LaunchRun, status: str) -> None:
        assert run.client is not None
        await run.client.stop()
        await run.history.idle()
        await self.store.executors.set_stopped(run.row.id, status)

    async def _key_missing(self, run: LaunchRun, result: RestoreResult) -> LaunchResult | None:
        """A new session's agent whose key the gateway knows it reads (its profile's `sign_in_vars`, its registry
        entry's) and nobody gave (`missing_key` decides): it waits for its person to sign in before its first prompt,
        not after it failed (claude-agent-acp makes sessions without a key and refuses every prompt)."""
        row, profile, config, client = run.row, run.profile, run.config, run.client
        assert client is not None
        required = required_vars(profile)
        reason = missing_key(KeyFacts(
            first_launch=run.first_launch, restoring=bool(run.token), forked=row.forked_from is not None,
            asked=config.auth is not None, required=required, given=given(required, run.env),
            signed_in=self.auth_seen.of(row.owner, profile.id) == SIGNED_IN))
        if reason is None:
            return None
        await self._stop_unsettled(run, "needs_auth")
        await self.needs_auth(row, profile, config, client.init.authMethods if client.init else [], reason)
        return LaunchResult(False, restore=result, error=reason)

    async def _go_live(self, run: LaunchRun, result: RestoreResult, found: list[dict[str, Any]]) -> LaunchResult:
        """The agent has its session: the transcript says how it came back, the session's choices are re-applied,
        and it becomes live (with its initial prompt on a first launch)."""
        row, profile, config, client = run.row, run.profile, run.config, run.client
        assert client is not None and result.session_id is not None
        if config.auth is not None:  # signed in: nothing is asked any more
            self.auth_seen.said(row.owner, profile.id, SIGNED_IN)
            config.auth = None
            config.changed()
            await self.store.configs.save(row.id, **config.columns("capabilities"))
        if result.session_id != run.token:
            await self.store.executors.set_token(row.id, result.session_id)
        how = await self._say_return(run, result)
        # What the agent offers now is in its answer (an answer to load or resume that says nothing of it leaves the
        # last offer standing: the agent said nothing new); then the session's choices are re-applied.
        restored = result.settled_by != RestoreMethod.NEW.value
        config.offer = ConfigOffer.from_answer(result.response, config.offer if restored else None)
        if not restored:
            config.usage = None  # a fresh ACP session has used nothing yet
        await self.keeper.reapply(row, config, client, result.session_id, found,
                                  "launch" if run.first_launch else "restore")
        task = await self.store.tasks.get(row.owner, row.task_id)
        boot = decide_boot(BootFacts(
            first_launch=run.first_launch, has_description=bool(task and task.description),
            started_fresh=result.outcome in (Outcome.NEW, Outcome.FALLBACK_NEW),
            history_context_injection=profile.history_context_injection,
            has_history=await self.store.history.exists(row.id)))
        current = await self.store.sessions.get(row.id)
        if current is None or SessionState(current.state) in TERMINAL_SESSION_STATES:
            # Cancelled or deleted while the agent started: it never becomes live.
            await client.stop()
            await self.store.executors.set_stopped(row.id, "cancelled")
            return LaunchResult(False, restore=result, error=f"session {row.id} ended while its agent started")
        live = LiveSession(current, profile, client, result.session_id, run.execution_id, run.history, run.coalescer,
                           config, needs_resume_context=boot is Boot.IDLE_INJECT_CONTEXT)
        if isinstance(client.process, HostedAgent):  # what a later gateway needs to speak to it again
            live.ledger = client.process.ledger
            await self.hosts.remember_init(row.id, client.process, client.init)
        self.live[row.id] = live  # no await since the check above: a cancel cannot come between
        live.tasks.add(asyncio.ensure_future(self._watch_exit(live)))
        row = await self.writer.apply(row, None, launched=True, recovery_pending=False, error_message=None,
                                      needs_resume_context=live.needs_resume_context)
        await self.writer.stage(row, "ready")
        if boot is Boot.INITIAL_PROMPT and task and task.description:
            self._on_ready(live, task.description)
        else:
            try:
                await self.writer.apply(row, SessionEvent.READY)
            except IllegalTransition:
                # The session is live from the line above: a prompt that came meanwhile (a page reopening the
                # session and sending at once, seen in CI) started its turn, which moved the state on already.
                if not live.turn_running:
                    raise
        return LaunchResult(True, restore=result, how=how)

    async def _say_return(self, run: LaunchRun, result: RestoreResult) -> str | None:
        """The session's message on how its agent came back (`launch_words`, LW-4…8); its words, or None."""
        said = return_said(ReturnFacts(
            agent=run.profile.id, token=run.token, outcome=result.outcome, session=result.session_id or "",
            first_launch=run.first_launch, fresh_start=run.fresh_start,
            native_session_resume=run.profile.native_session_resume,
            failure_class=result.failure_class.value if result.failure_class is not None else None,
            settled_by=result.settled_by, replayed=result.replayed, forked_from=run.row.forked_from))
        if said is None:
            return None
        await self.writer.message(run.row, said[0], said[1])
        return said[1]

    async def revive_hosted(self) -> list[LiveSession]:
        """At start, before anyone is served: every session whose agent a host kept running while no gateway was
        attached becomes live again, its agent the same process. A host that cannot be attached (dead, lingered
        out) is forgotten, and its session goes by the restore rules, as do sessions with nothing to attach to."""
        revived: list[LiveSession] = []
        for host_row in await self.store.hosts.all():
            if not self.hosts.ours(host_row.host):  # another node's (a shared store): only it can reach its hosts
                continue
            try:
                live = await self._revive(host_row.session_id, host_row.execution_id)
            except Exception as exc:  # one broken session must not keep the gateway from starting
                log_fault(log, f"session {host_row.session_id}: its agent host could not be taken up again", exc)
                live = None
            if live is None:
                await self.hosts.abandon(host_row.session_id)
                await self.cluster.release(host_row.session_id)
            else:
                revived.append(live)
            metrics.HOST_REATTACHES.labels("lost" if live is None else "attached").inc()
        return revived

    async def _revive(self, session_id: str, execution_id: str) -> LiveSession | None:
        row = await self.store.sessions.get(session_id)
        executor = await self.store.executors.get(session_id)
        profile = self.profiles.get(row.agent) if row is not None else None
        if (row is None or profile is None or SessionState(row.state) in TERMINAL_SESSION_STATES or executor is None
                or executor.execution_id != execution_id or not executor.resume_token):
            return None
        profile, refusal = await self._pinned(row, profile, False)
        if refusal is not None:
            return None
        if row.host is not None and isinstance(remote_hosts.choose(self.settings.remote_hosts, row.owner, row.host),
                                               remote_hosts.Refusal):
            return None  # its remote host is no longer configured, or no longer its owner's: not attached again
        try:  # in a cluster: this node's new incarnation takes the lease over (a new fencing token)
            await self.cluster.take_back(session_id)
        except HeldElsewhere:  # another node took the session over meanwhile: its agent is that node's now
            return None
        await self.store.permissions.expire(session_id)  # its open questions are asked again as its lines replay
        agent = await self.hosts.reattach(session_id)
        if agent is None:
            return None
        init = self.hosts.init_of(agent)
        config = await stored(self.store, row.id)
        home = ensure_home(self.settings.state_dir, row.owner, profile)
        env = await self._execution_env(row, profile, config, home, execution_id)  # its stand-ins granted again
        owner = row.owner
        history = HistoryWriter(self.store, row.id, lambda nbytes: self.usage.wrote_history(owner, nbytes))
        coalescer = await self._turn_so_far(row, history) if SessionState(row.state) is SessionState.RUNNING \
            else HistoryCoalescer()
        site = None if row.host is None else remote_launch.site_again(
            self.settings.remote_hosts, row.owner, row.host, row.cwd, profile.id, agent.record.remote_home)
        if row.host is not None and site is None:  # never a remote session's terminals by this machine's rules
            await self.hosts.abandon(row.id)
            return None
        terminals = self._terminal_host(row, profile, config, env, home, history, site) \
            if profile.terminals else None
        # Said before the first line the host kept is read: in the session's events, what the agent said while no
        # gateway ran comes after the note that it kept running, where it happened.
        await self.writer.message(row, "info", f"agent {profile.id} kept running while the gateway restarted "
                                  "(same process, nothing lost)", code=KEPT_RUNNING)
        client = self._hosted_client(row, agent, self._update_intake(row, coalescer, history, config), terminals)
        if SessionState(row.state) is SessionState.RUNNING and agent.ledger.prompts:
            client.conn.expect(agent.ledger.prompts[-1])  # its answer may be among the first lines replayed
        client.init = init
        live = LiveSession(row, profile, client, executor.resume_token, execution_id, history, coalescer, config,
                           needs_resume_context=row.needs_resume_context)
        live.ledger = agent.ledger
        self.live[row.id] = live
        live.tasks.add(asyncio.ensure_future(self._watch_exit(live)))
        # this instance runs it now (status and the next start's reaper read the executor row)
        pid = agent.pid if row.host is None else None  # a remote pid is no process of this machine's
        await self.store.executors.set_running(
            row.id, execution_id=execution_id, instance_id=self.instance_id, cwd=row.cwd, pid=pid,
            proc_start=reaper.process_start(pid) if pid is not None else None, boot_id=reaper.boot_id())
        log.info("session %s: agent %s (pid %d) kept running in its host while the gateway restarted; attached "
                 "again", row.id, profile.id, agent.pid, extra={"session_id": row.id, "agent": profile.id})
        return live

    async def _turn_so_far(self, row: SessionRow, history: HistoryWriter) -> HistoryCoalescer:
        """The running turn's history as if no gateway had stopped: its committed updates fed again to a coalescer,
        whose entries the store does not hold yet are written (they go in order, so what is stored is a prefix)."""
        coalescer = HistoryCoalescer()
        entries: list[HistoryEntry] = []
        floor = row.turn_event_id
        if floor is not None:
            cursor: int | None = floor - 1
            until = self.writer.bus.head(row.owner)
            while cursor is not None and cursor < until:
                frames, cursor = await self.store.events.after(row.owner, cursor, until, row.id)
                for frame in frames:
                    data = orjson.loads(frame)["params"]
                    update = data.get("data", {}).get("update")
                    if data.get("type") == "session_update" and isinstance(update, dict) \
                            and not data["data"].get("replay"):
                        entries.extend(coalescer.feed(update))
        stored_entries = await self.store.history.all(row.id)
        last_prompt = max((i for i, e in enumerate(stored_entries) if e.kind == "user_message"), default=-1)
        already = len(stored_entries) - last_prompt - 1
        history.add(entries[already:])
        return coalescer

    def _command(self, profile: AgentProfile, row: SessionRow, config: SessionConfig, env: Mapping[str, str],
                 home: Path, token: str | None, site: RemoteSite | None = None) -> Spawn:
        """The agent's command line: under bubblewrap where its profile or the gateway says so (its workspace, its
        additional directories and its owner's home writable; the gateway's own files masked; rlimits applied),
        else under the parent-death signal alone. On a remote host: as that side runs it (`remote_launch`)."""
        argv = profile.argv(token, str(self.settings.state_dir))
        if site is not None:
            return site.spawn(argv, env, site.cwd, str(home), str(self.settings.state_dir))
        return self.spawner.spawn(SpawnSite(profile, row, config, env, home), argv, row.cwd, env)

    def confined(self, profile: AgentProfile) -> bool:
        return self.spawner.confined(profile)

    def _terminal_host(self, row: SessionRow, profile: AgentProfile, config: SessionConfig, env: Mapping[str, str],
                       home: Path, history: HistoryWriter, remote: RemoteSite | None = None) -> SessionTerminals:
        """The session's terminals, run as its agent is (`_confined`; on a remote host, as its agent is there),
        their events in its journal."""
        site = SpawnSite(profile, row, config, env, home)

        def refused_directory(directory: str) -> str | None:  # a terminal's own cwd: the workspace rules hold
            if remote is not None:
                refused = remote_hosts.cwd_refusal(remote.host, directory)
                return None if refused is None else refused.message
            why = workspace.unfit(self.settings, row.owner, directory)
            return None if why is None else why.message

        def spawn(command: list[str], cwd: str, program_env: Mapping[str, str]) -> Spawn:
            if remote is not None:
                return remote.spawn(command, program_env, cwd, str(home), str(self.settings.state_dir))
            return self.spawner.spawn(site, command, cwd, program_env)

        return SessionTerminals(
            row, self.settings, self.terminal_counts, env, reaper.MARKER,
            self.confined(profile) if remote is None else remote.host.sandbox == "bwrap", spawn, refused_directory,
            lambda type_, data: self.writer.bus.enqueue(type_, row.owner, row.id, row.task_id, data), history)

    async def login(self, row: SessionRow, method: Mapping[str, Any]) -> dict[str, Any]:
        """A `terminal` sign-in: the agent's own command with the method's arguments and environment, run as the
        session's agent runs (its sandbox, its owner's home) in a terminal whose output every frontend of the
        session watches (`terminal_*` events); its exit status. It has no input: a login that needs one waits for
        `login_timeout` and is killed."""
        profile, _ = await self._pinned(row, self.profiles[row.agent], False)  # the version the session runs
        config = await stored(self.store, row.id)
        try:
            home = ensure_home(self.settings.state_dir, row.owner, profile)
        except HomeRefused as refused:
            raise workspace_refused(row.id, row.cwd, "HOME", f"session {row.id}: {refused}") from None
        signed_in = self.sign_in.get(row.owner, profile.id)
        asked = method.get("env") or {}  # checked by the sign-in (`spawn_env.refusal`) before this
        env = {**profile.launch_env(self.settings.environ, home), **signed_in, **asked,
               reaper.MARKER: f"x-{uuid.uuid4().hex}"}
        history = HistoryWriter(self.store, row.id)
        host = self._terminal_host(row, profile, config, env, home, history)
        # The agent's own command with the method's arguments; or, in the older `terminal-auth` form, the program the
        # agent names (the copilot CLI's `copilot login`).
        program = [method["command"]] if method.get("command") else profile.argv(None, str(self.settings.state_dir))
        command = [*program, *(method.get("args") or [])]
        env[TERMINAL_MARKER] = f"t-{uuid.uuid4().hex}"
        spawn = self.spawner.spawn(SpawnSite(profile, row, config, env, home), command, row.cwd, env)
        spec = TerminalSpec(spawn.argv, spawn.cwd, spawn.env, self.settings.terminal_output_bytes,
                            shlex.join(command), TERMINAL_MARKER, spawn.fds, host.pace)

        def on_output(data: bytes) -> None:
            host.output(terminal, data)

        terminal = Terminal(f"login-{uuid.uuid4().hex[:12]}", spec, on_output)
        await terminal.start()
        self.logins.add(terminal)
        host.opened(terminal)
        try:
            try:
                status = await asyncio.wait_for(terminal.wait(), self.settings.login_timeout)
            except TimeoutError:
                terminal.kill()
                status = await terminal.wait()
            host.ended(terminal, status)
        finally:
            # Also when the call is cancelled (its caller gone, the gateway stopping): a login left running would
            # outlive the gateway, in a process group of its own that nothing else ends.
            await asyncio.shield(terminal.stop())
            self.logins.discard(terminal)
            host.released(terminal)
        await history.idle()
        return status

    async def end_logins(self) -> None:
        """Every terminal sign-in still running is killed, its processes with it: the gateway stops."""
        await asyncio.gather(*(terminal.stop() for terminal in list(self.logins)), return_exceptions=True)

    async def ask_sign_in(self, row: SessionRow, profile: AgentProfile, config: SessionConfig,
                          methods: Sequence[AuthMethod], reason: str) -> None:
        """`config.auth` names what the agent offers to sign in with — and the gateway's own `env_var` method for the
        key it knows the agent reads, where the agent offers none with it —, for every frontend (a `session_config`
        event); the owner's agent needs a sign-in from now on (gateway.info's `auth_state`)."""
        self.auth_seen.said(row.owner, profile.id, NEEDS_SIGN_IN)
        config.auth = {"methods": describe_methods(methods, keep_vars(profile)), "reason": reason}
        config.changed()
        await self.store.configs.save(row.id, **config.columns("capabilities"))
        await self.writer.publish(row, "session_config", {"cause": "auth", **config.settings()})

    async def needs_auth(self, row: SessionRow, profile: AgentProfile, config: SessionConfig,
                         methods: Sequence[AuthMethod], reason: str) -> None:
        """The agent answered auth_required at its first launch and no method could sign it in here: the session
        waits for its person to sign in (`config.auth` names the methods; a warning says how)."""
        await self.ask_sign_in(row, profile, config, methods, reason)
        message = sign_in_words(row.id, profile.id, config, reason)
        current = await self.store.sessions.get(row.id) or row
        event = SessionEvent.TURN_ENDED if SessionState(current.state) != SessionState.CREATED else None
        current = await self.writer.apply(current, event, error_message=message, recovery_pending=False)
        await self.writer.message(current, "warning", message)

    async def sign_in_needed(self, live: LiveSession, reason: str) -> str:
        """The agent answered a turn `auth_required` (or "Authentication required"): it is stopped (a sign-in
        relaunches it), and the session waits for its person to sign in, as at a first launch; the words said."""
        await self.stop(live, "needs_auth")
        row = await self.store.sessions.get(live.session_id) or live.row
        await self.needs_auth(row, live.profile, live.config, live.client.init.authMethods if live.client.init else [],
                              reason)
        return sign_in_words(row.id, live.profile.id, live.config, reason)

    async def fail_first_launch(self, row: SessionRow, reason: str) -> None:
        """The first launch failed before the agent made a session (initialize or session/new): the session is
        FAILED with the cause, not left waiting for input it could never take."""
        current = await self.store.sessions.get(row.id) or row
        if SessionState(current.state) not in TERMINAL_SESSION_STATES:
            await self.writer.apply(current, SessionEvent.FAIL, error_message=reason, recovery_pending=False)
        await self.writer.message(current, "error", reason)

    async def _launch_failed(self, row: SessionRow, reason: str) -> LaunchResult:
        """No agent process came of the launch: the session is FAILED with the reason, said in its transcript too."""
        await self.store.executors.set_stopped(row.id, "failed")
        await self.writer.apply(row, SessionEvent.FAIL, error_message=reason)
        await self.writer.message(row, "error", reason)
        return LaunchResult(False, error=reason)

    async def _pinned(self, row: SessionRow, profile: AgentProfile,
                      fresh_start: bool) -> tuple[AgentProfile, str | None]:
        """The profile of the agent version the session runs, and why it must not be launched (None: it may).

        A session keeps the version it was started with across restores, whatever `agents update` made current
        since; a fresh restart (nothing of the old agent session kept) takes the current one. An install changed
        after it was made is never launched."""
        if fresh_start and profile.install is not None:  # the current version, as `agents update` left it
            version = await asyncio.to_thread(current_version, self.settings.state_dir, row.agent)
            current = await asyncio.to_thread(profile_at, self.settings.state_dir, row.agent, version) \
                if version else None
            profile = current or profile
        if fresh_start and row.agent_version != profile.version:
            await self.store.sessions.set_agent_version(row.id, profile.version)
        elif row.agent_version is not None and row.agent_version != profile.version:
            pinned = await asyncio.to_thread(profile_at, self.settings.state_dir, row.agent, row.agent_version)
            if pinned is None:
                return profile, (f"session {row.id} runs {row.agent} {row.agent_version}, which is no longer "
                                 f"installed (the current version is {profile.version}): `acp-gateway agents add "
                                 f"{row.agent}@{row.agent_version}` installs it again, or restart the session fresh "
                                 f"to run {profile.version}")
            profile = pinned
        if profile.install is None:
            return profile, None
        why = await asyncio.to_thread(launch_refusal, profile)
        return profile, (f"session {row.id}: {why}" if why is not None else None)

    async def preserve(self, row: SessionRow, reason: str) -> None:
        """A failure that keeps the saved identity: resumable later, but not automatically."""
        current = await self.store.sessions.get(row.id) or row
        event = SessionEvent.TURN_ENDED if SessionState(current.state) != SessionState.CREATED else None
        await self.writer.apply(current, event, error_message=reason, recovery_pending=True)
        await self.writer.message(current, "error", reason)

    def _update_intake(self, row: SessionRow, coalescer: HistoryCoalescer, history: HistoryWriter,
                       config: SessionConfig) -> Callable[[dict[str, Any], bool], None]:
        """Called by the ACP client for each update, in arrival order, on the read loop: no task hop,
        no await. The event's id and order are fixed here; its commit comes with the next group. The few kinds that
        change the session's configuration are also kept (`ConfigKeeper.observe`)."""
        enqueue, owner, sid, task_id = self.writer.bus.enqueue, row.owner, row.id, row.task_id
        observe = self.keeper.observe
        scrubber = config.scrubber()

        def on_update(params: dict[str, Any], replay: bool) -> None:
            update = scrubber.value(params.get("update")) if scrubber else params.get("update")
            data: dict[str, Any] = {"update": update, "replay": replay}
            if "_meta" in params:  # the notification's own `_meta` passes through too (a newer agent's extensions)
                data["_meta"] = scrubber.value(params["_meta"]) if scrubber else params["_meta"]
            enqueue("session_update", owner, sid, task_id, data)
            if isinstance(update, dict):
                if update.get("sessionUpdate") in WATCHED:
                    observe(row, config, update, replay)
                if not replay:
                    entries = coalescer.feed(update)
                    if entries:
                        history.add(entries)

        return on_update

    async def _on_permission(self, session_id: str, params: dict[str, Any]) -> dict[str, Any]:
        live = self.live.get(session_id)
        row = live.row if live is not None else await self.store.sessions.get(session_id)
        if row is None:
            return {"outcome": "cancelled"}
        return await self.broker.ask(row, live.config.scrubber().value(params) if live is not None else params)

    async def _watch_exit(self, live: LiveSession) -> None:
        """An agent that exits while idle: the session keeps its token and reports `needs_resume`. (An agent
        that exits mid-turn is the turn's to report.)"""
        await live.client.process.wait()
        if live.stopping or self.live.get(live.session_id) is not live or live.turn_running:
            return
        await self.stop(live, "exited")
        with contextlib.suppress(TimeoutError):  # what it wrote as it exited is still in the pipe
            await asyncio.wait_for(live.client.process.stderr_tail(), 2.0)
        await self.writer.apply(live.row, None, error_message=(
            f"agent process exited (status {live.client.process.returncode})" + limit_said(live)
            + stderr_said(live.client.process, live.profile, live.config.secrets())))

    async def stop(self, live: LiveSession, status: str) -> None:
        """Unregister the live session and stop its agent process group; the executor row says how it ended."""
        await self._halt(live, status, with_turn=False)
        try:
            await self.store.executors.set_stopped(live.session_id, status)
        finally:
            await self.cluster.release(live.session_id)

    async def detach(self, live: LiveSession) -> None:
        """The gateway stops and leaves a hosted agent running: the session stays live for the next gateway (its
        turn too: nothing is written of it here, and the agent is not told to cancel anything)."""
        agent = live.client.process
        if not isinstance(agent, HostedAgent):
            return
        if self.live.get(live.session_id) is live:
            del self.live[live.session_id]
        live.stopping = True
        agent.detached = True
        # All at once, before any await: the peer closed first, a turn cancelled right after withdraws nothing
        # ($/cancel_request) from the agent and writes no end (it never sees its prompt fail).
        live.client.conn.close("the gateway stopped; the agent goes on in its host")
        for task in [*live.tasks, *([live.turn] if live.turn is not None else [])]:
            task.cancel()
        await self.writer.bus.flush()  # every event of the lines read is committed: the last mark may say so
        with contextlib.suppress(Exception):
            await self.hosts.write_marks()
        self.hosts.forget(live.session_id, agent)
        await agent.detach()
        await self.hosts.unlink(live.session_id)  # a remote host's forward: the next gateway makes its own
        await live.history.idle()

    async def abandon(self, live: LiveSession) -> None:
        """Stop an agent whose session another node holds now (this node lost the lease): its turn and process
        end here, and nothing is written for the session (that node writes for it; the database refuses us)."""
        await self._halt(live, "lease_lost", with_turn=True)

    async def _halt(self, live: LiveSession, status: str, *, with_turn: bool) -> None:
        """Unregister the live session, cancel its tasks (and its turn, `with_turn`), stop its process group."""
        if self.live.get(live.session_id) is live:
            del self.live[live.session_id]
        self.keys.revoke(live.session_id, keep_execution=self._running_execution(live.session_id))
        live.stopping = True
        for task in [*live.tasks, *([live.turn] if with_turn and live.turn is not None else [])]:
            if task is not asyncio.current_task():
                task.cancel()
        with contextlib.suppress(Exception):
            await live.client.stop()
        metrics.EXITS.labels(live.owner, live.profile.id, status).inc()

    def _running_execution(self, session_id: str) -> str | None:
        live = self.live.get(session_id)
        return live.execution_id if live is not None else None

    def _revoke_keys(self, session_id: str) -> None:
        """A launch that did not go live: its stand-ins end (a live execution of the session keeps its own)."""
        self.keys.revoke(session_id, keep_execution=self._running_execution(session_id))


def _count_restore(owner: str, agent: str, result: RestoreResult | None) -> None:
    """One restore, labelled by the method that settled it (the last one sent), its outcome and failure class."""
    if result is None:  # the agent failed before any decision (initialize, a transport error)
        metrics.RESTORES.labels(owner, agent, "none", "failed", "transport").inc()
        return
    failure = result.failure_class.value if result.failure_class is not None else ""
    metrics.RESTORES.labels(owner, agent, result.settled_by, result.outcome.value, failure).inc()


def _agent_info(info: Implementation | None) -> dict[str, str] | None:
    """The agent's own name, title and version, as short strings (it is kept with every session of it)."""
    if info is None:
        return None
    return {k: str(v)[:200] for k in ("name", "title", "version") if (v := getattr(info, k)) is not None}
