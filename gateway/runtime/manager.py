"""The session runtime's facade: what the JSON-RPC adapter calls. Each method checks, then hands the work to the
room that owns it — `admission` (whether a start may go ahead, and with what), `launcher` (launch, restore, stop),
`turns`, `broker` (permissions), `views` (reads), `writer` (persist, then publish) — and awaits the outcome.

Whatever changes a session runs as a task of the runtime and is awaited shielded: a client whose connection
closes mid-call only stops waiting; the change (a turn, a cancel, a launch) finishes for everyone else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from acp.models import AgentCapabilities
from acp.session_config import MODE, MODEL
from agents.profiles import AgentProfile
from agents.registry.credentials import given, required_vars

from ..errors import (
    WORKSPACE_MISSING,
    GatewayError,
    agent_failed,
    already_terminal,
    busy,
    invalid_params,
    log_fault,
    not_found,
    not_resumable,
    workspace_refused,
)
from ..journal import EventBus, Subscription
from ..store import HistoryEntry, SessionRow, StoreBase
from . import remote_hosts
from .admission import Admission
from .broker import PermissionBroker
from .cluster import Cluster, HeldElsewhere
from .config import ConfigKeeper, stored
from .confinement import bwrap_trial
from .elicitations import ElicitationBroker
from .forks import fork_session
from .forwardable import forwardable, forwarded_method
from .git_rules import default_branch
from .installed import InstalledAgents, installed_facts
from .launcher import Launcher, check_resumable, check_workspace
from .live import LiveSession
from .recovery import recover_after_crash
from .session_git import SessionGit
from .settings import Settings
from .sign_in_rules import (
    SIGNED_IN,
    AuthFacts,
    SignInFacts,
    SignInRefused,
    auth_state,
    login_failure,
    sign_in_decision,
)
from .states import TERMINAL_SESSION_STATES, SessionEvent, SessionState, TaskState
from .turns import TurnRunner, content_blocks
from .views import SessionViews
from .worktrees import Worktree
from .writer import MERGED, REWOUND, SessionWriter, status_data

log = logging.getLogger(__name__)
T = TypeVar("T")


def _outcome_seen(task: asyncio.Task[Any]) -> None:
    """A change whose caller stopped waiting (a connection closed, a forwarding node gone) still ends: its error,
    if nobody is left to receive it, is a client's answer (dropped) or a bug (logged), never asyncio's warning."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None and not isinstance(exc, GatewayError):
        log_fault(log, "a session change whose caller had gone failed", exc)


class SessionManager:
    def __init__(self, store: StoreBase, bus: EventBus, profiles: Mapping[str, AgentProfile], settings: Settings,
                 instance_id: str) -> None:
        self.store = store
        self.bus = bus
        self.profiles = profiles
        self.installed = InstalledAgents(settings.state_dir, profiles)  # `agents add` while serving counts
        self.settings = settings
        self.instance_id = instance_id
        self.live: dict[str, LiveSession] = {}
        self._cancels: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.writer = SessionWriter(store, bus, self._refresh_live_row)
        self.broker = PermissionBroker(store, self.writer, profiles.get)
        self.elicitations = ElicitationBroker(store, self.writer)
        roots = {"*": [str(r) for r in settings.workspace_roots],
                 **{owner: [str(r) for r in rs] for owner, rs in settings.owner_workspace_roots.items()}}
        self.cluster = Cluster(store, settings.node or instance_id, settings.lease_ttl, self._lease_lost, roots,
                               settings.cluster_secret, settings.forward_timeout)
        self.keeper = ConfigKeeper(store, self.writer, settings.request_timeout)
        self.launcher = Launcher(store, self.writer, self.broker, profiles, settings, instance_id, self.live,
                                 self._spawn, self._initial_prompt, self.cluster, self.keeper, self.elicitations)
        self.admission = Admission(store, settings, self.launcher.probe, self.live, self.launcher.launches)
        self.turns = TurnRunner(store, bus, self.writer, self.broker, self.elicitations,
                                lambda live: self.launcher.stop(live, "exited"), self.launcher.stop,
                                settings.cancel_grace, settings.stop_grace, self.launcher.sign_in_needed,
                                lambda live: self.launcher.auth_seen.said(live.owner, live.profile.id, SIGNED_IN))
        # Where each session's files are in git: its worktree, checkpoints, diffs, rewinds and merges
        self.git = SessionGit(settings, store, self._confined)
        self.launcher.spawner.git_binds = self.git.binds
        self.turns.before_prompt = self.git.before_prompt
        self.views = SessionViews(store, bus, self.live, instance_id, settings.stale_window, self.broker.pending,
                                  self.elicitations.pending,
                                  self.cluster.holder if self.cluster.enabled else None,
                                  self.cluster.running_elsewhere if self.cluster.enabled else None)

    def _confined(self, row: SessionRow) -> bool:
        profile = self.profiles.get(row.agent)
        return self.launcher.confined(profile) if profile is not None else self.settings.sandbox == "bwrap"

    async def _check_resumable(self, row: SessionRow) -> None:
        """`check_resumable`, and a worktree session's worktree as it was made (WT-4)."""
        if SessionState(row.state) not in TERMINAL_SESSION_STATES:  # what a worktree lacks, said as such first
            await self.git.check(row)
        check_resumable(row, self.settings)

    def _refresh_live_row(self, row: SessionRow) -> bool:
        live = self.live.get(row.id)
        if live is not None:
            live.row = row
        return live is not None

    def _spawn(self, coro: Awaitable[T]) -> asyncio.Task[T]:
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_outcome_seen)
        return task

    async def _owned(self, coro: Awaitable[T]) -> T:
        """Run a change as a task of the runtime; the caller only waits for it."""
        return await asyncio.shield(self._spawn(coro))

    # -- life of the runtime -------------------------------------------------------------
    async def open(self) -> None:
        """Before any client: what a crashed instance left is ended and settled (see `recovery`); in a cluster,
        only what no live node holds, and this node starts renewing its leases and running forwarded commands."""
        await self.store.instances.register(self.instance_id, only_this=self.cluster.enabled)
        await self.cluster.prepare()
        revived = await self.launcher.revive_hosted()  # agents their hosts kept running: before anything is settled
        for live in revived:  # what their sandboxes bind of a repository, before a terminal of theirs starts
            self.git.worktree(live.row)
        await recover_after_crash(self.store, self.writer, self.turns, self.instance_id,
                                  self.cluster.holder if self.cluster.enabled else None,
                                  kept={live.session_id for live in revived})
        for live in revived:
            await self._go_on(live)
        hosts = self.launcher.hosts
        self.bus.marks, self.bus.marks_committed, self.bus.marks_failed = hosts.marks, hosts.committed, hosts.failed
        self._marks = self._spawn(hosts.keep_marks(self.bus.idle))
        self.bus.reoffer = self._reoffer
        await self.cluster.start(self._run_forwarded)

    async def _go_on(self, live: LiveSession) -> None:
        """A session whose agent kept running in its host: its turn goes on (the prompt's answer awaited), or, when
        no prompt of it is known, its turn is closed as one a crash cut."""
        agent = self.launcher.hosts.agents.get(live.session_id)
        written = agent.connection.welcome.written if agent is not None else 0
        if live.ledger is not None:
            live.ledger.attached(written)
        if SessionState(live.row.state) is not SessionState.RUNNING:
            return
        prompts = live.ledger.prompts if live.ledger is not None else []
        if prompts and live.ledger is not None and not live.ledger.reached(prompts[-1], written):
            # The gateway stopped after the turn was recorded and before its prompt reached the host (LD-8): the
            # agent never saw it, so it goes now, once, with the same id.
            live.ledger.resend_prompt(prompts[-1])
            self.turns.resume(live, prompts[-1], resend=True)
        elif prompts:
            self.turns.resume(live, prompts[-1])
        else:
            await self.turns.close_interrupted(live.row)

    async def _reoffer(self, sub: Subscription, cursor: int) -> None:
        """Questions still open (permission requests, elicitations) offered again to a new subscriber: read from the
        store in one query, and only when one waits in this process (nothing else can be answered)."""
        if not (self.broker.waiting() or self.elicitations.waiting()):
            return
        pending = await self.store.permissions.pending(sub.owner, sub.session_id)
        for broker in (self.broker, self.elicitations):
            await broker.reoffer(sub, cursor, [p for p in pending if broker.owns(p[0])])

    async def shutdown(self) -> None:
        """End running turns, stop every agent; sessions stay resumable (their tokens are stored). Agents in hosts
        are left running (`on_stop = "detach"`): their turns go on, and the next gateway attaches to them. In a
        cluster, hand the leases back at once, so another node resumes them without waiting for expiry."""
        detached: frozenset[str] = frozenset()
        if self.settings.on_stop == "detach":
            hosted = [live for live in list(self.live.values()) if live.ledger is not None]
            await asyncio.gather(*(self.launcher.detach(live) for live in hosted), return_exceptions=True)
            detached = frozenset(live.session_id for live in hosted)
        stopping = list(self.live.values())
        await asyncio.gather(self.launcher.end_logins(), *(self._stop_live(live) for live in stopping),
                             return_exceptions=True)
        for live in stopping:  # said on the event stream: a frontend resubscribing after the restart learns it
            with contextlib.suppress(Exception):
                row = await self.store.sessions.get(live.session_id)
                if row is not None and SessionState(row.state) not in TERMINAL_SESSION_STATES:
                    await self.writer.publish(row, "session_status", status_data(row, False, True))
        await self.keeper.close()
        await self.launcher.keys.close()
        for task in list(self._background):
            task.cancel()
        await self.cluster.close(keep=detached)
        await self.store.instances.mark_dead(self.instance_id)

    async def _lease_lost(self, session_id: str) -> None:
        """Another node runs the session now (this node could not renew its lease): stop the agent here, writing
        nothing for the session (the database would refuse it)."""
        live = self.live.get(session_id)
        if live is not None:
            await self.launcher.abandon(live)

    # -- the cluster: commands for a session another node holds run there ---------------------------------------
    async def holder_elsewhere(self, row: SessionRow) -> str | None:
        """The other node holding the session, to forward a command to; None to run it here."""
        return await self.cluster.holder(row.id) if self.cluster.enabled else None

    async def forward(self, node: str, row: SessionRow, method: str, args: dict[str, Any],
                      placed: bool = False) -> Any:
        return await self.cluster.forward(node, row.id, row.agent, {"method": method, "owner": row.owner,
                                                                    "session_id": row.id, "args": args}, placed)

    async def _run_forwarded(self, request: dict[str, Any]) -> Any:
        """A command another node forwarded here, as the holder (or the next holder) of its session."""
        name = forwarded_method(request.get("method"))
        if name is None:
            raise invalid_params("method", f"not a command a node forwards: {request.get('method')!r}")
        return await getattr(self, name)(request["owner"], request["session_id"], **request.get("args", {}),
                                         forwarded=True)

    async def _placed(self, row: SessionRow, method: str, forwarded: bool, **args: Any) -> tuple[bool, Any]:
        """(True, its answer) when the session's workspace is not one this node may run (outside its roots, or
        missing here) and another live node's roots hold it: the command runs there. -32011 when no node can."""
        try:
            await self._check_resumable(row)
        except GatewayError as err:
            if err.code != WORKSPACE_MISSING or forwarded or not self.cluster.enabled:
                raise
            node = await self.cluster.node_for(row.owner, row.cwd)
            if node is None:
                raise
            return True, await self.forward(node, row, method, args, placed=True)
        return False, None

    async def _take(self, row: SessionRow, forwarded: bool) -> tuple[str | None, SessionRow]:
        """Hold the session's lease before its agent starts here. (the node holding it, row): a node to forward to
        when another one won it; else the row, with a turn a dead node left open closed as `interrupted`."""
        try:
            await self.cluster.acquire(row.id)
        except HeldElsewhere as held:
            if forwarded:
                raise not_resumable(row.id, row.state, f"session {row.id} moved to node {held.node} meanwhile: "
                                    "ask again") from None
            return held.node, row
        if self.cluster.enabled and row.id not in self.live and row.id not in self.launcher.launches:
            # Taken over (or taken up): no agent waits for an answer to the permissions it asked before.
            await self.store.permissions.expire(row.id)
            current = await self.store.sessions.get(row.id) or row
            if SessionState(current.state) is SessionState.RUNNING:
                await self.turns.close_interrupted(current)
                current = await self.store.sessions.get(row.id) or current
            row = current
        return None, row

    async def _stop_live(self, live: LiveSession, status: str = "stopped", *, close_session: bool = False) -> None:
        """Interrupt the turn (cancel grace), optionally ACP `session/close` it (a cancel for good), stop the
        agent, and wait for the turn to publish its `turn_ended`."""
        live.stopping = True
        await self.turns.interrupt(live, stop_unanswered=False)
        if close_session:
            init = live.client.init
            if init is not None and init.agentCapabilities.can_close and live.client.alive:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(live.client.close_session(live.acp_session_id), self.settings.stop_grace)
            await self.writer.stage(live.row, "stopping")
        await self.launcher.stop(live, status)
        if live.turn is not None:  # it sees the agent gone and ends: wait for its turn_ended
            await asyncio.wait([live.turn], timeout=self.settings.stop_grace + 5)

    # -- reads -------------------------------------------------------------------------
    async def row(self, owner: str, session_id: str) -> SessionRow:
        return await self.views.row(owner, session_id)

    async def get(self, owner: str, session_id: str) -> dict[str, Any]:
        return await self.views.get(owner, session_id)

    async def status(self, owner: str, session_id: str) -> dict[str, Any]:
        return await self.views.status(owner, session_id)

    async def list(self, owner: str, *, states: list[str] | None, limit: int, cursor: str | None,
                   cwd: str | None = None) -> dict[str, Any]:
        return await self.views.list(owner, states=states, limit=limit, cursor=cursor, cwd=cwd)

    async def named(self, owner: str, name: str) -> str:
        """The id of the owner's session called `name` (ids are taken as they are: they never look like names)."""
        session_id = await self.store.sessions.named(owner, name)
        if session_id is None:
            raise not_found(name)
        return session_id

    async def history(self, owner: str, session_id: str, after: int, limit: int) -> dict[str, Any]:
        return await self.views.history(owner, session_id, after, limit)

    async def events(self, owner: str, session_id: str, after: int, limit: int) -> dict[str, Any]:
        return await self.views.events(owner, session_id, after, limit)

    # -- launching -----------------------------------------------------------------------
    async def start(self, owner: str, *, agent: str, cwd: str | None, description: str | None = None,
                    title: str | None = None, task_id: str | None = None, wait_ready: bool = False,
                    config: Mapping[str, Any] | None = None, mcp_servers: Sequence[Any] | None = None,
                    additional_directories: Sequence[str] | None = None, name: str | None = None,
                    worktree: Mapping[str, Any] | None = None, host: str | None = None) -> dict[str, Any]:
        self.refresh_installed()  # an `agents add` or `update` since the gateway started counts
        if agent not in self.profiles:
            raise invalid_params("agent", f"unknown agent {agent!r}; known agents: {', '.join(sorted(self.profiles))}")
        host = host if host is not None else self.profiles[agent].host
        if host is not None:  # its agent runs on another machine (docs/remote-hosts.md)
            return await self._start_remote(owner, agent, host, cwd, description, title, task_id, wait_ready,
                                            config, mcp_servers, additional_directories, name, worktree is not None)
        if worktree is None and self.profiles[agent].worktree and cwd is not None \
                and os.path.isdir(os.path.join(cwd, ".git")):
            worktree = {"repo": cwd}  # the profile makes worktrees the default for its sessions in a repository
        if worktree is not None:  # the repository as it is now, links resolved: what every later git run checks
            cwd = os.path.realpath(str(worktree["repo"])) if os.path.isabs(str(worktree["repo"])) else str(
                worktree["repo"])
        if cwd is None:
            raise invalid_params("cwd", "give cwd (the directory the agent works in) or worktree.repo")
        field = "worktree.repo" if worktree is not None else "cwd"
        if not os.path.isabs(cwd):
            raise invalid_params(field, f"{field} must be an absolute path")
        check_workspace(self.settings, owner, None, cwd)
        if (self.profiles[agent].sandbox or self.settings.sandbox) == "bwrap":
            why = await asyncio.to_thread(bwrap_trial)  # a machine that lost what a sandbox needs: said now
            if why is not None:
                raise agent_failed(None, agent, f"agent {agent!r} runs in a bubblewrap sandbox, which cannot start "
                                   f"here: {why}", None, False)
        if name is not None:
            await self.admission.check_name(owner, name)
        setup = await self.admission.setup(owner, self.profiles[agent], cwd, config or {}, mcp_servers or [],
                                           additional_directories or [])
        await self.launcher.usage.check_start(owner)  # what the owner stores, how fast it starts (-32014)
        session_id = f"s-{uuid.uuid4().hex}"
        tree: Worktree | None = None
        if worktree is not None:  # made before the session: a start refused here leaves nothing
            self.admission.check_live_limit(owner)
            tree = await self.git.make_worktree(
                owner, session_id, self.launcher.confined(self.profiles[agent]), cwd, worktree.get("base"),
                worktree.get("branch") or default_branch(name, session_id))
            cwd = tree.path
        try:
            self.admission.admit(owner)  # the slot is taken now, before any await
        except GatewayError:
            if tree is not None:
                await self.git.worktrees.remove(owner, tree, self.launcher.confined(self.profiles[agent]), True)
            raise
        return await self._owned(self._start(owner, agent, cwd, description, title, task_id, wait_ready, setup,
                                             name, session_id, tree))

    async def _start_remote(self, owner: str, agent: str, asked: str, cwd: str | None, description: str | None,
                            title: str | None, task_id: str | None, wait_ready: bool,
                            config: Mapping[str, Any] | None, mcp_servers: Sequence[Any] | None,
                            additional_directories: Sequence[str] | None, name: str | None,
                            worktree: bool) -> dict[str, Any]:
        """A session whose agent runs on a remote host: the host and the directory there checked (RH-1…3) before
        the session exists; the directory again, resolved there, at every launch."""
        profile = self.profiles[agent]
        host = remote_hosts.choose(self.settings.remote_hosts, owner, asked)
        if isinstance(host, remote_hosts.Refusal):
            raise invalid_params("host", host.message)
        why = remote_hosts.unsupported(worktree, additional_directories or profile.additional_directories,
                                       bool(profile.brokered), host)
        if why is not None:
            raise invalid_params("host", why.message)
        if cwd is None:
            raise invalid_params("cwd", f"give cwd: the directory on remote host {host.name} the agent works in")
        refused = remote_hosts.cwd_refusal(host, cwd)
        if refused is not None:
            raise workspace_refused(None, cwd, refused.rule.value, refused.message)
        if name is not None:
            await self.admission.check_name(owner, name)
        setup = await self.admission.setup(owner, profile, cwd, config or {}, mcp_servers or [], [], probe=False)
        await self.launcher.usage.check_start(owner)
        self.admission.admit(owner)  # the slot is taken now, before any await
        return await self._owned(self._start(owner, agent, cwd, description, title, task_id, wait_ready, setup,
                                             name, None, None, host.name))

    async def _start(self, owner: str, agent: str, cwd: str, description: str | None, title: str | None,
                     task_id: str | None, wait_ready: bool, setup: dict[str, Any],
                     name: str | None = None, session_id: str | None = None,
                     tree: Worktree | None = None, host: str | None = None) -> dict[str, Any]:
        try:
            row = await self._register(owner, name, lambda: self.store.sessions.create(
                owner=owner, agent=agent, cwd=cwd, title=title, description=description, task_id=task_id,
                task_state=TaskState.TODO, session_state=SessionState.CREATED, config=setup, name=name,
                agent_version=self.profiles[agent].version, session_id=session_id,
                worktree=tree.to_json() if tree is not None else None, host=host))
        except Exception:
            if tree is not None:  # no session holds it: it goes, with its branch
                await self.git.worktrees.remove(owner, tree, self.launcher.confined(self.profiles[agent]), True)
            raise
        if tree is not None:
            self.git.known[row.id] = tree
        future = self.launcher.launch_once(row, fresh_start=False)  # no await since: the launch takes the slot
        if wait_ready:
            await asyncio.shield(future)
        return await self.views.get(owner, row.id)

    async def _register(self, owner: str, name: str | None, make: Callable[[], Awaitable[SessionRow]]) -> SessionRow:
        """A new session made (`make`: its rows, in one transaction), announced and leased. The owner's start slot,
        which the caller took before its first await, is given back whatever happens."""
        try:
            try:
                row = await make()
            except Exception as exc:
                if name is not None and "unique" in str(exc).lower():  # two starts raced for one name
                    await self.admission.check_name(owner, name)
                raise
            self.launcher.usage.created(owner)
            await self.writer.publish(row, "session_created", await self.views.view(row))
            await self.cluster.acquire(row.id)  # a new session: no other node can hold it
            return row
        finally:
            self.admission.started(owner)

    @forwardable("resume")
    async def resume(self, row: SessionRow, *, wait_ready: bool = True, forwarded: bool = False) -> dict[str, Any]:
        if row.id in self.live:
            return {**await self.views.get(row.owner, row.id), "already_running": True}
        routed, answer = await self._placed(row, "resume", forwarded, wait_ready=wait_ready)
        if routed:
            return dict(answer)
        if row.id not in self.launcher.launches:
            self.admission.check_live_limit(row.owner)
        holder, row = await self._take(row, forwarded)
        if holder is not None:
            return dict(await self.forward(holder, row, "resume", {"wait_ready": wait_ready}))
        await self._check_resumable(row)
        future = self.launcher.launch_once(row, fresh_start=False)
        how = None
        if wait_ready:
            launched = await asyncio.shield(future)
            how = launched.how if launched.live else launched.error
        return {**await self.views.get(row.owner, row.id), "already_running": False, "how": how}

    @forwardable("recover")
    async def recover(self, row: SessionRow, action: str) -> dict[str, Any]:
        live = self.live.get(row.id)
        if live is not None and action == "retry":
            return {**await self.views.get(row.owner, row.id), "already_running": True}
        if live is None and row.id not in self.launcher.launches:
            self.admission.check_live_limit(row.owner)
        return await self._owned(self._recover(row, live, action == "fresh_start"))

    async def _recover(self, row: SessionRow, live: LiveSession | None, fresh: bool) -> dict[str, Any]:
        if live is not None:
            await self._stop_live(live)
        row = await self.row(row.owner, row.id)
        if fresh:  # a worktree that is gone is made again from its branch
            await self.git.recreate(row)
        await self._check_resumable(row)
        holder, row = await self._take(row, forwarded=True)  # a node that won it meanwhile: ask again
        assert holder is None
        if fresh:
            await self.store.executors.set_token(row.id, None)
        await asyncio.shield(self.launcher.launch_once(row, fresh_start=fresh))
        return {**await self.views.get(row.owner, row.id), "already_running": False}

    # -- turns ---------------------------------------------------------------------------
    @forwardable("prompt")
    async def prompt(self, row: SessionRow, prompt: Any, forwarded: bool = False,
                     meta: dict[str, Any] | None = None, key: str | None = None) -> dict[str, Any]:
        """A turn; `meta` goes to the agent unchanged as the prompt request's `_meta`; `key`, a client's name for
        this prompt, is kept in its `turn_started` (a client that lost its answer finds the turn by it)."""
        blocks = content_blocks(prompt)
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise not_resumable(row.id, row.state, f"session {row.id} is {row.state}: start a new session")
        await self.launcher.usage.check_turn(row.owner)  # an owner at its history quota starts no turn (-32014)
        await self.git.check(row)  # a worktree gone under a live agent: said as such, with what to do (WT-4)
        args: dict[str, Any] = {"prompt": prompt, "meta": meta, "key": key}
        live, answer = await self._bring_up(row, forwarded, "prompt", args)
        if live is None:
            return dict(answer)
        return await asyncio.shield(self.turns.start(live, blocks, meta, key))

    async def _bring_up(self, row: SessionRow, forwarded: bool, method: str,
                        args: dict[str, Any]) -> tuple[LiveSession | None, Any]:
        """The session's live agent on this node, resumed if need be (a lazy resume); or (None, its answer) when the
        command ran on the node that may run the session."""
        for attempt in range(2):
            if row.id not in self.live:
                routed, answer = await self._placed(row, method, forwarded, **args)
                if routed:
                    return None, answer
                holder, row = await self._take(row, forwarded)
                if holder is not None:
                    return None, await self.forward(holder, row, method, args)
            live = await self._ensure_live(row)
            if not live.client.alive and attempt == 0 and not live.turn_running:
                # The execution vanished between the resume and the send: resume once, retry once.
                await self.launcher.stop(live, "exited")
                continue
            return live, None
        raise not_resumable(row.id, row.state, f"the agent of session {row.id} keeps exiting before {method} "
                            "could be sent; see task.session.status")

    # -- configuration -------------------------------------------------------------------
    @forwardable("set_config_option")
    async def set_config_option(self, row: SessionRow, config_id: str, value: str | bool | None,
                                forwarded: bool = False) -> dict[str, Any]:
        if value is None:
            return await self._forget_choice(row, config_id)
        return await self._configure(row, "set_config_option", config_id, value, None, forwarded)

    async def _forget_choice(self, row: SessionRow, config_id: str) -> dict[str, Any]:
        """No longer choose an option: the agent keeps what it has, and no restore sets it again. No agent is needed
        (a stored session's choice is forgotten in the store)."""
        launch = self.launcher.launches.get(row.id)
        if launch is not None:  # its agent is being set up with the choices it read: forgotten in its copy, after
            with contextlib.suppress(Exception):
                await asyncio.shield(launch.future)
        live = self.live.get(row.id)
        config = live.config if live is not None else await stored(self.store, row.id)
        await self._owned(self.keeper.forget(row, config, config_id))
        return await self.views.get(row.owner, row.id)

    @forwardable("set_mode")
    async def set_mode(self, row: SessionRow, mode_id: str, forwarded: bool = False) -> dict[str, Any]:
        return await self._configure(row, "set_mode", MODE, mode_id, MODE, forwarded)

    @forwardable("set_model")
    async def set_model(self, row: SessionRow, model_id: str, forwarded: bool = False) -> dict[str, Any]:
        return await self._configure(row, "set_model", MODEL, model_id, MODEL, forwarded)

    async def _configure(self, row: SessionRow, method: str, option_id: str, value: str | bool,
                         category: str | None, forwarded: bool) -> dict[str, Any]:
        """A frontend's change of one option (or of the mode or model, by its category): checked up front against
        what the agent last offered (a stored session's offer too: a refused value resumes nothing), the agent
        resumed like a prompt resumes it, the change relayed as it understands (config option, mode, or legacy
        model), and kept as a choice."""
        args: dict[str, Any] = {"config_id": option_id, "value": value} if category is None else {
            f"{category}_id": value}
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise not_resumable(row.id, row.state, f"session {row.id} is {row.state}: its configuration can no "
                                "longer change; start a new session")
        known = self.live[row.id].config if row.id in self.live else await stored(self.store, row.id)
        if not known.offer.empty:
            self.keeper.target(row.id, known, row.agent, option_id, value, category=category)
        live, answer = await self._bring_up(row, forwarded, method, args)
        if live is None:
            return dict(answer)
        await self._owned(self.keeper.apply(live.row, live.config, live.client, live.acp_session_id, live.profile.id,
                                            option_id, value, category=category))
        return await self.views.get(row.owner, row.id)

    def refresh_installed(self) -> None:
        """Agents added or updated with `acp-gateway agents add` while serving: their current versions (`installed`)."""
        self.installed.refresh()

    installed_facts = staticmethod(installed_facts)

    def with_sign_in(self, owner: str, agents: Sequence[dict[str, Any]]) -> Sequence[dict[str, Any]]:
        """`gateway.info`'s agents as `owner` sees them: each one's `sign_in_vars` (names, never values) and its
        `auth_state` for this owner (`sign_in_rules.auth_state`, AS-1…5). One read of the owner's kept values."""
        kept = self.launcher.sign_in.all(owner)
        return [self._sign_in_of(owner, agent, kept) for agent in agents]

    def _sign_in_of(self, owner: str, agent: dict[str, Any], kept: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
        profile = self.profiles.get(agent["id"])
        if profile is None:
            return agent
        seen = self.launcher.auth_seen
        required = required_vars(profile)
        names = list(dict.fromkeys([*required, *agent.get("sign_in_vars", []), *seen.offered_by(profile.id)]))
        _, state = auth_state(AuthFacts(tuple(required), tuple(given(names, profile.env, kept.get(profile.id, {}))),
                                        seen.of(owner, profile.id), agent.get("auth_state")))
        return {**agent, "sign_in_vars": names, "auth_state": state}

    async def agent_capabilities(self, agent: str, owner: str) -> AgentCapabilities | None:
        """What an agent profile's agent supports (its last `initialize` here, or asked now in one of the owner's
        workspace roots); None when it cannot be asked."""
        profile = self.profiles.get(agent)
        roots = [r for r in self.settings.roots_of(owner) if r.is_dir()]
        if profile is None or not roots:
            return None
        return await self.launcher.probe.ask(profile, str(roots[0]), timeout=10.0)

    async def _ensure_live(self, row: SessionRow) -> LiveSession:
        live = self.live.get(row.id)
        if live is not None:
            return live
        await self._check_resumable(row)
        if row.id not in self.launcher.launches:  # a lazy resume starts an agent like any other
            self.admission.check_live_limit(row.owner)
        future = self.launcher.launch_once(row, fresh_start=False)
        try:
            await asyncio.wait_for(asyncio.shield(future), self.settings.ready_timeout)
        except TimeoutError:
            raise not_resumable(row.id, row.state, f"session {row.id} was not ready within "
                                f"{self.settings.ready_timeout:g}s; try again later") from None
        live = self.live.get(row.id)
        if live is None:
            current = await self.store.sessions.get(row.id)
            state = current.state if current else row.state
            raise not_resumable(row.id, state, (current.error_message if current else None)
                                or f"session {row.id} could not be resumed; see task.session.status")
        return live

    def _initial_prompt(self, live: LiveSession, description: str) -> None:
        with contextlib.suppress(Exception):
            self.turns.start(live, content_blocks(description))

    @forwardable("cancel_turn")
    async def cancel_turn(self, row: SessionRow) -> dict[str, Any]:
        return await self._owned(self._cancel_turn(row))

    async def _cancel_turn(self, row: SessionRow) -> dict[str, Any]:
        live = self.live.get(row.id)
        if live is not None:
            if live.turn_running:
                await self.writer.stage(row, "cancelling")
            await self.turns.interrupt(live)
        return await self.views.get(row.owner, row.id)

    @forwardable("respond_permission")
    async def respond_permission(self, row: SessionRow, request_id: str, option_id: str | None,
                                 cancelled: bool) -> dict[str, Any]:
        return await self._owned(self.broker.respond(row, request_id, option_id, cancelled))

    @forwardable("authenticate")
    async def authenticate(self, row: SessionRow, method_id: str, values: dict[str, str] | None) -> dict[str, Any]:
        """Sign the session's agent in with one of the methods it offered (`config.auth`), and start it again."""
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise not_resumable(row.id, row.state, f"session {row.id} is {row.state}: start a new session")
        return await self._owned(self._authenticate(row, method_id, values))

    async def _authenticate(self, row: SessionRow, method_id: str, values: dict[str, str] | None) -> dict[str, Any]:
        """Performs what `sign_in_rules` decides (SI-1…6), then launches the agent again."""
        running = row.id in self.live  # as it is when asked, before the store is read
        config = await stored(self.store, row.id)
        profile = self.profiles.get(row.agent)
        method = sign_in_decision(SignInFacts(row.id, row.agent, running, config.auth, method_id, values,
                                              profile is not None and self.launcher.confined(profile)))
        if isinstance(method, SignInRefused):
            raise invalid_params(method.field, method.message)
        self.launcher.auth_seen.forget(row.owner, row.agent)  # what the agent says at its relaunch counts now
        if method["kind"] == "env_var":
            self.launcher.sign_in.put(row.owner, row.agent, dict(values or {}))
        elif method["kind"] == "agent":
            config.auth_method = method_id
            await self.store.configs.save(row.id, **config.columns("capabilities"))
        else:  # a terminal one (SI-5 lets no other kind through): its login program, watched by every frontend
            if row.host is not None:  # it would sign in on this machine, not where the agent runs
                raise invalid_params("method_id", f"session {row.id} runs on remote host {row.host}: a terminal "
                                     "sign-in runs there, not here; sign the agent in on that machine (as the "
                                     "remote host's user), or choose another method")
            self.git.worktree(row)  # what the login's sandbox binds of the repository
            failed = login_failure(await self.launcher.login(row, method), row.agent, method["name"])
            if failed is not None:
                raise agent_failed(row.id, row.agent, failed, None, False)
        await self._check_resumable(row)
        self.admission.check_live_limit(row.owner)
        future = self.launcher.launch_once(row, fresh_start=False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), self.settings.ready_timeout)
        return await self.views.get(row.owner, row.id)

    @forwardable("logout")
    async def logout(self, row: SessionRow) -> dict[str, Any]:
        """Sign out: the running agent is told (`logout`, where it serves it) and stopped, and what this owner gave
        agents of its profile to sign in is forgotten, with the session's chosen method; the next launch asks
        again if the agent wants a sign-in."""
        return await self._owned(self._logout(row))

    async def _logout(self, row: SessionRow) -> dict[str, Any]:
        live = self.live.get(row.id)
        if live is not None:
            init = live.client.init
            if init is not None and init.agentCapabilities.can_logout and live.client.alive:
                try:
                    await asyncio.wait_for(live.client.request("logout", {}), self.settings.stop_grace)
                except Exception as exc:  # the sign-out goes on here: said, not fatal
                    log.info("session %s: agent %s did not log out: %s", row.id, live.profile.id, exc)
            await self._stop_live(live)
        self.launcher.sign_in.forget(row.owner, row.agent)
        self.launcher.auth_seen.forget(row.owner, row.agent)
        config = await stored(self.store, row.id)
        if config.auth_method is not None:
            config.auth_method = None
            await self.store.configs.save(row.id, **config.columns("capabilities"))
        await self.writer.message(row, "info", f"Signed out of agent {row.agent}: its next start asks for a sign-in "
                                  "if it needs one.")
        return await self.views.get(row.owner, row.id)

    @forwardable("respond_elicitation")
    async def respond_elicitation(self, row: SessionRow, request_id: str, action: str, content: Any) -> dict[str, Any]:
        return await self._owned(self.elicitations.respond(row, request_id, action, content))

    @forwardable("fork")
    async def fork(self, row: SessionRow, *, title: str | None = None, name: str | None = None,
                   forwarded: bool = False) -> dict[str, Any]:
        """A new session with this one's conversation so far, where its agent forks sessions (`forks`); the new
        session's agent starts at once and restores the fork, the original goes on untouched."""
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise not_resumable(row.id, row.state, f"session {row.id} is {row.state}: its agent can fork it no more")
        if name is not None:
            await self.admission.check_name(row.owner, name)
        await self.launcher.usage.check_start(row.owner)  # a fork is a start: the owner's quotas hold (-32014)
        self.admission.check_live_limit(row.owner)  # and it runs an agent of its own
        live, answer = await self._bring_up(row, forwarded, "fork", {"title": title, "name": name})
        if live is None:
            return dict(answer)
        return await self._owned(self._fork(live, title, name))

    async def _fork(self, live: LiveSession, title: str | None, name: str | None) -> dict[str, Any]:
        owner = live.owner
        session_id = f"s-{uuid.uuid4().hex}"
        # A worktree session's fork works in a worktree of its own, with the original's files as they are now.
        tree = await self.git.fork_worktree(live.row, session_id, name)
        try:
            self.admission.admit(owner)  # the slot is taken now, before any await
            row = await self._register(owner, name, lambda: fork_session(
                self.store, self.writer, self.settings, live, title, name, session_id, tree))
        except Exception:
            if tree is not None:  # no session holds it: it goes, with its branch
                await self.git.worktrees.remove(owner, tree, self._confined(live.row), True)
            raise
        if tree is not None:
            self.git.known[row.id] = tree
        await self.writer.message(row, "info", f"Forked from session {live.session_id}: the conversation so far is "
                                  "in this session's history.")
        future = self.launcher.launch_once(row, fresh_start=False)  # restores the forked ACP session
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(future), self.settings.ready_timeout)
        return await self.views.get(owner, row.id)

    # -- its files in git (docs/worktrees.md) -----------------------------------------------------------------
    @forwardable("diff")
    async def diff(self, row: SessionRow, against: int | str | None = None) -> dict[str, Any]:
        return await self._owned(self.git.diff(row, against))

    @forwardable("checkpoints")
    async def checkpoints(self, row: SessionRow) -> dict[str, Any]:
        return await self._owned(self.git.listing(row))

    @forwardable("rewind")
    async def rewind(self, row: SessionRow, checkpoint: int) -> dict[str, Any]:
        """The session's files put back as at a checkpoint: never under a running turn (its agent would be writing
        them); said in its history and events, and to its agent at its next prompt."""
        live = self.live.get(row.id)
        if live is not None and live.turn_running:
            raise busy(row.id, SessionState.RUNNING)
        return await self._owned(self._rewind(row, checkpoint))

    async def _rewind(self, row: SessionRow, checkpoint: int) -> dict[str, Any]:
        done = await self.git.rewind(row, checkpoint)
        files = len(done["files"])
        text = (f"Rewound the files to checkpoint {checkpoint}: {files} file{'s' if files != 1 else ''} changed "
                f"(checkpoint {done['undo_checkpoint']} holds them as they were).")
        await self.store.history.append(row.id, [HistoryEntry("rewind", text, str(checkpoint))])
        await self.writer.message(row, "info", text, REWOUND)
        return done

    @forwardable("merge")
    async def merge(self, row: SessionRow) -> dict[str, Any]:
        live = self.live.get(row.id)
        if live is not None and live.turn_running:
            raise busy(row.id, SessionState.RUNNING)
        done = await self._owned(self.git.merge(row))
        if done["merged"]:
            await self.writer.message(row, "info", f"Merged branch {done['branch']} into {done['base']} "
                                      f"(commit {done['commit'][:12]}).", MERGED)
        return dict(done)

    # -- ending ----------------------------------------------------------------------------
    @forwardable("cancel")
    async def cancel(self, row: SessionRow) -> dict[str, Any]:
        """End the session for good (docs/architecture.md: The runtime, ending a session); concurrent calls share one
        cancellation."""
        pending = self._cancels.get(row.id)
        if pending is not None:
            return await asyncio.shield(pending)
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise already_terminal(row.id, row.state)
        future = self._spawn(self._cancel(row))
        self._cancels[row.id] = future
        future.add_done_callback(lambda _: self._cancels.pop(row.id, None))
        return await asyncio.shield(future)

    async def _cancel(self, row: SessionRow) -> dict[str, Any]:
        await self.store.cancels.request(row.id)  # durable first: a crash from here on still ends CANCELLED
        await self.writer.publish(row, "session_cancel_requested", {})
        await self.writer.stage(row, "cancelling")
        await self.launcher.abort(row.id, self.settings.cancel_grace)
        live = self.live.get(row.id)
        if live is not None:
            await self._stop_live(live, "cancelled", close_session=True)
        current = await self.store.sessions.get(row.id) or row
        if SessionState(current.state) not in TERMINAL_SESSION_STATES:
            current = await self.writer.apply(current, SessionEvent.CANCEL)
        late = self.live.get(row.id)  # a launch that outlasted the grace and went live meanwhile
        if late is not None:
            await self.launcher.stop(late, "cancelled")
        await self.store.cancels.clear(row.id)
        return await self.views.view(current)

    @forwardable("set_title")
    async def set_title(self, row: SessionRow, title: str) -> dict[str, Any]:
        return await self._owned(self._set_title(row, title))

    async def _set_title(self, row: SessionRow, title: str) -> dict[str, Any]:
        row = await self.writer.apply(row, None, title=title)
        await self.writer.publish(row, "session_title", {"title": title})
        return await self.views.view(row)

    @forwardable("delete")
    async def delete(self, row: SessionRow, discard: bool = False) -> None:
        await self._owned(self._delete(row, discard))

    async def _delete(self, row: SessionRow, discard: bool = False) -> None:
        # A launch in progress is told to give up and is waited for to the end (it writes the session's rows
        # until then), so that its agent, if it went live, is stopped before the rows go.
        await self.launcher.abort(row.id, self.settings.cancel_grace)
        launch = self.launcher.launches.get(row.id)
        if launch is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(launch.future)
        live = self.live.get(row.id)
        if live is not None:
            # The agent forgets it too, where it can (`session/delete`): its own store may hold the conversation.
            init = live.client.init
            if init is not None and init.agentCapabilities.can_delete and live.client.alive:
                try:
                    await asyncio.wait_for(live.client.delete_session(live.acp_session_id), self.settings.stop_grace)
                except Exception as exc:  # the gateway's delete goes on: said, not fatal
                    log.info("session %s: agent %s did not delete its session %s: %s", row.id, live.profile.id,
                             live.acp_session_id, exc)
            await self._stop_live(live)
        self.keeper.drop(row.id)
        if row.host is not None:  # what its executions left on its remote host (one whose link did not come back)
            await self.launcher.hosts.clear_remote(row.id, row.host)
        try:  # its worktree (its branch too when `discard`) and its checkpoints go first: the rows name them
            await self.git.remove(row, discard)
        except Exception as exc:  # said, not fatal: the session goes; what git kept, the log names
            log.warning("session %s: its worktree or checkpoints could not all be removed: %s", row.id, exc,
                        extra={"session_id": row.id})
        await self.store.sessions.delete(row.id)
        self.launcher.usage.deleted(row.owner)
        await self.writer.publish(row, "session_deleted", {})
