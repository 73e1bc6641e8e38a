"""Agents run in agent hosts (docs/agent-hosts.md): starting one for a launch, attaching to it again after the gateway
restarted, and the agent as the ACP client sees it (`HostedAgent`, a stand-in for `acp.process.AgentProcess`).

What the gateway has done with each of the agent's lines is kept by a `Ledger` (`gateway/agenthost/ledger.py`): its
mark is written in the journal's group commits (`Hosts.marks`, called as each group is cut), and once a group is
committed the host is told it may drop the lines before the mark's committed offset (`Hosts.committed`).

The agent's terminals run in its host too (`HostedAgent.terminals`, TM-…): the mark also says what the session's
events hold of each one's output (`terminals`), so a gateway that attached again publishes the rest, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from acp.models import InitializeResponse
from acp.process import StderrRing

from ..agenthost.client import HostConnection, HostError, Relink, new_secret, start_host
from ..agenthost.ledger import Ledger, Mark
from ..agenthost.remote_terminals import RemoteTerminals
from ..agenthost.spec import HostSpec, private_directory
from ..agenthost.ssh import Forward, kill_remote_host, run_remote, ship_host, start_remote_host
from ..store import StoreBase
from .remote_hosts import RemoteHost, RemotePlaces, clear_command
from .spawn_env import Spawn

log = logging.getLogger(__name__)

DEFAULT_REMOTE_LINGER = 900.0  # a remote host waits this long for its gateway (host_linger 0 has no remote say)

# A reattach's request ids count from its incarnation times this: above every id an earlier attach used.
IDS_PER_INCARNATION = 1 << 32


@dataclass(frozen=True)
class HostRecord:
    """What the store keeps of a session's host (the secret included: a later gateway attaches with it)."""

    socket: str
    spool: str
    secret: str
    host_pid: int
    agent_pid: int
    argv: list[str]
    started: float
    # A host on a remote machine (docs/remote-hosts.md): its name there, its socket there (`socket` is the local
    # end of the forward to it) and the remote user's home; None for a host on this machine.
    remote: str | None = None
    remote_socket: str | None = None
    remote_home: str | None = None

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> HostRecord:
        def text(key: str) -> str | None:
            value = raw.get(key)
            return str(value) if value is not None else None

        return cls(str(raw["socket"]), str(raw["spool"]), str(raw["secret"]), int(raw["host_pid"]),
                   int(raw["agent_pid"]), [str(a) for a in raw.get("argv", [])], float(raw.get("started", 0)),
                   text("remote"), text("remote_socket"), text("remote_home"))


class TerminalMarks(Protocol):
    """What the session's events hold of its terminals' output (`terminals.SessionTerminals`)."""

    version: int

    def mark(self) -> dict[str, list[int]]: ...


class HostedAgent:
    """An agent that runs in a host, as `acp.client.AcpClient` speaks to it: its lines through the host's connection
    (a reattach passes over the ones whose effects are committed), its exit when the host says so, its stderr asked
    of the host. A connection that ends without the agent's exit counts as the agent gone (the restore rules
    follow); a gateway that stops detaches (`detach`) and the agent goes on."""

    def __init__(self, connection: HostConnection, record: HostRecord, ledger: Ledger, incarnation: int,
                 init: dict[str, Any] | None = None, marked_terminals: Mapping[str, Any] | None = None) -> None:
        self.connection = connection
        self.init = init  # the agent's answer to `initialize`, as stored
        # request ids count above every earlier attach's (the first attach's start at 0, as an unhosted agent's)
        self.first_request_id = max(0, incarnation - 1) * IDS_PER_INCARNATION
        self.record = record
        self.ledger = ledger
        self.argv = list(record.argv)
        self.pid = connection.welcome.agent_pid
        self.host_pid = connection.welcome.host_pid
        self.stderr = StderrRing()
        self.detached = False
        self.on_stopped: Callable[[], Awaitable[None]] | None = None  # the host is gone for good
        # Its terminals, which run in the host: those it reported are known again from the start, so a request of
        # the agent's replayed at once finds them (the connection's news reaches them from its first frame).
        self.terminals = RemoteTerminals(connection, lambda: self.detached)
        self.marked_terminals = dict(marked_terminals or {})  # what the stored mark said of each
        connection.stdout.skip = ledger.skip
        connection.stdout.skip_until = ledger.replay_until
        connection.on_sent = ledger.sent
        connection.on_taken = ledger.taken
        if connection.welcome.exit_code is not None and not connection.exit_code.done():
            connection.exit_code.set_result(connection.welcome.exit_code)

    @property
    def stdin(self) -> Any:
        return self.connection.stdin

    @property
    def stdout(self) -> Any:
        return self.connection.stdout

    @property
    def returncode(self) -> int | None:
        if self.connection.exit_code.done():
            return self.connection.exit_code.result()
        if self.connection.ended.done() and not self.detached:
            return -signal.SIGKILL  # the host is gone, and its agent with it (PR_SET_PDEATHSIG)
        return None

    def observe(self, direction: str, message: dict[str, Any]) -> None:
        """Every message the peer is handed, with the offset of its line (a Connection observer)."""
        if direction == "in":
            self.ledger.read(self.connection.stdout.consumed, message)

    async def wait(self) -> int:
        waits: list[asyncio.Future[Any]] = [self.connection.exit_code, self.connection.ended]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        code = self.returncode
        return code if code is not None else -signal.SIGKILL

    async def stderr_tail(self, lines: int = 3, drain_wait: float = 1.0) -> str:
        with contextlib.suppress(HostError, TimeoutError):
            said, total = await asyncio.wait_for(self.connection.stderr(200), drain_wait + 1.0)
            ring = StderrRing()
            ring.append("\n".join(said).encode() + (b"\n" if said else b""))
            ring.total_bytes = max(total, ring.total_bytes)
            self.stderr = ring
        return " | ".join(line.strip() for line in self.stderr.tail_lines(lines) if line.strip())

    async def stop(self, grace: float = 2.0) -> int:
        """The agent's tree stopped by its host (stdin closed, SIGTERM, SIGKILL), then the host let go (LG-2); a host
        that does not answer is killed, and its agent dies with it."""
        with contextlib.suppress(HostError):
            self.connection.stop(grace)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wait(), 3 * grace + 5)
        if self.connection.closed_reason is None:  # what it said on stderr is kept here: the host goes next
            await self.stderr_tail()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.connection.release(), grace + 5)
        if not self.connection.exit_code.done() and _is_host(self.record):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.host_pid, signal.SIGKILL)
        if self.on_stopped is not None:
            await self.on_stopped()
        return self.returncode if self.returncode is not None else -signal.SIGKILL

    async def detach(self) -> None:
        """The gateway goes away; the host and its agent stay (until the host's linger runs out)."""
        self.detached = True
        await self.connection.close()


def host_paths(state_dir: Path, execution_id: str) -> tuple[str, str]:
    """The socket and the spool of an execution's host: under the state directory, which no sandbox shows."""
    base = state_dir / "hosts" / execution_id
    return str(base / "socket"), str(base / "spool")


class Hosts:
    """This gateway's hosted agents, by session: their ledgers go into the journal's group commits."""

    def __init__(self, store: StoreBase, state_dir: Path, linger: float,
                 remote_hosts: Mapping[str, RemoteHost] | None = None, relink_timeout: float = 60.0) -> None:
        self.store = store
        self.state_dir = state_dir
        self.linger = linger
        self.remote_hosts = dict(remote_hosts or {})
        self.relink_timeout = relink_timeout
        self.forwards: dict[str, Forward] = {}  # each remote host's link, by session
        self.agents: dict[str, HostedAgent] = {}
        self._acks: dict[str, int] = {}  # the committed offset of each mark in the group being committed
        # What each session's events hold of its agent's terminals (`serve_terminals`), and the version of it last
        # handed to a group commit; before they are served, what the stored mark said of them.
        self._terminal_marks: dict[str, TerminalMarks] = {}
        self._terminals_stored: dict[str, int] = {}
        self._marked_terminals: dict[str, dict[str, Any]] = {}

    @property
    def enabled(self) -> bool:
        return self.linger > 0

    async def start(self, session_id: str, execution_id: str, spawn: Spawn, stop_grace: float,
                    tree_marker: str | None, stderr_bytes: int) -> HostedAgent:
        """A new host for this launch, attached; raises HostError when it could not start."""
        socket, spool = host_paths(self.state_dir, execution_id)
        secret, secret_hash = new_secret()
        spec = HostSpec(argv=list(spawn.argv), cwd=spawn.cwd, env=dict(spawn.env), spool_dir=spool,
                        socket_path=socket, secret_hash=secret_hash, linger=self.linger, stop_grace=stop_grace,
                        stderr_bytes=stderr_bytes, tree_marker=tree_marker if tree_marker in spawn.env else None,
                        log_path=str(Path(socket).parent / "host.log"), pass_fds=list(spawn.fds))
        handle = await start_host(spec)
        record = HostRecord(socket, spool, secret, handle.host_pid, handle.agent_pid, list(spawn.argv), time.time())
        await self.store.hosts.put(session_id, execution_id, asdict(record))
        try:
            return await self._attach(session_id, record, Ledger())
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(handle.host_pid, signal.SIGKILL)
            await self.store.hosts.drop(session_id)
            raise

    async def start_remote(self, session_id: str, execution_id: str, host: RemoteHost, spawn: Spawn, home: str,
                           stop_grace: float, tree_marker: str | None, stderr_bytes: int) -> HostedAgent:
        """A new host for this launch on a remote machine (`spawn`: the command and environment there, `home`: the
        remote user's), reached through a forward of its socket; raises HostError when it could not start."""
        places = RemotePlaces(home)
        remote_dir = places.host_dir(session_id, execution_id)
        socket, _ = host_paths(self.state_dir, execution_id)  # names it this gateway's (`ours`); never made
        secret, secret_hash = new_secret()
        spec = HostSpec(argv=list(spawn.argv), cwd=spawn.cwd, env=dict(spawn.env), spool_dir=f"{remote_dir}/spool",
                        socket_path=f"{remote_dir}/socket", secret_hash=secret_hash,
                        linger=self.linger or DEFAULT_REMOTE_LINGER, stop_grace=stop_grace, stderr_bytes=stderr_bytes,
                        tree_marker=tree_marker if tree_marker in spawn.env else None,
                        log_path=f"{remote_dir}/host.log",
                        # FS-1: its files served there, in its directory; never the hosts', homes' or application's
                        files_root=spawn.cwd, files_never=[places.state()])
        if len(spec.socket_path.encode()) > 107:  # sshd reaches it by path: a socket address holds no more
            raise HostError(f"remote host {host.name}: its user's home {home} is too long a path for the agent "
                            f"host's socket there ({spec.socket_path}); use an SSH user with a shorter home")
        application = await ship_host(host.target, host.options, home)
        handle = await start_remote_host(host.target, host.options, application, spec, python=host.python)
        record = HostRecord(socket, spec.spool_dir, secret, handle.host_pid, handle.agent_pid, list(spawn.argv),
                            time.time(), host.name, spec.socket_path, home)
        try:
            await self.store.hosts.put(session_id, execution_id, asdict(record))
            return await self._attach(session_id, record, Ledger())
        except BaseException:
            with contextlib.suppress(Exception):
                await kill_remote_host(host.target, host.options, handle.host_pid, remote_dir)
            await self.store.hosts.drop(session_id)
            raise

    async def _link(self, session_id: str, record: HostRecord) -> str:
        """A remote host's socket forwarded to a local one (a forward left by an earlier link is replaced): its path.
        It lies in a private directory of short name (ssh takes no socket path longer than a sockaddr holds), made
        once per gateway: each link makes its socket anew."""
        host = self.remote_hosts.get(record.remote or "")
        if host is None or record.remote_socket is None:
            raise HostError(f"remote host {record.remote!r} is no longer configured: its agent cannot be reached")
        old = self.forwards.pop(session_id, None)
        if old is not None:
            await old.stop()
        links = links_directory(self.state_dir)  # checked at every link: still ours, still private
        local = links / f"{hashlib.sha256(session_id.encode()).hexdigest()[:16]}.sock"
        forward = Forward(host.target, host.options, local, record.remote_socket)
        await forward.start()
        self.forwards[session_id] = forward
        return str(local)

    async def unlink(self, session_id: str) -> None:
        forward = self.forwards.pop(session_id, None)
        if forward is not None:
            await forward.stop()
            with contextlib.suppress(OSError):  # its socket (the directory stays: another link may be starting)
                forward.local.unlink()

    async def _kill_remote(self, record: HostRecord) -> None:
        host = self.remote_hosts.get(record.remote or "")
        if host is not None and record.remote_socket is not None:
            with contextlib.suppress(HostError):
                await kill_remote_host(host.target, host.options, record.host_pid,
                                       str(Path(record.remote_socket).parent))

    async def clear_remote(self, session_id: str, host_name: str) -> None:
        """Whatever a session's executions left running or stored on its remote host, ended and removed (a deleted
        session's: a host whose link did not come back waits there for a gateway). Said, not raised, when ssh
        cannot reach it: the host ends by its linger there."""
        host = self.remote_hosts.get(host_name)
        if host is None:
            return
        try:
            await run_remote(host.target, host.options, clear_command(session_id))
        except HostError as exc:
            log.warning("session %s: what it left on remote host %s could not be removed (%s); its host ends by "
                        "itself within host_linger", session_id, host_name, exc, extra={"session_id": session_id})

    async def reattach(self, session_id: str) -> HostedAgent | None:
        """The session's host, attached again with what the journal holds of its lines; None when there is none to
        attach to (it died, lingered out, or refused): the session then goes by the restore rules."""
        row = await self.store.hosts.get(session_id)
        if row is None:
            return None
        record = HostRecord.of(row.host)
        marked = (row.mark or {}).get("terminals")
        try:
            return await self._attach(session_id, record, Ledger(Mark.decode(row.mark)), row.host.get("init"),
                                      marked if isinstance(marked, dict) else None)
        except (HostError, OSError) as exc:
            log.warning("session %s: its agent host could not be attached again (%s); the session goes by the "
                        "restore rules", session_id, exc, extra={"session_id": session_id})
            await self.unlink(session_id)
            if record.remote is not None:
                await self._kill_remote(record)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if _is_host(record):
                    os.kill(record.host_pid, signal.SIGKILL)
            self._clear(record)  # a host killed -9 left its socket and its spool (the agent's conversation)
            await self.store.hosts.drop(session_id)
            return None

    async def _attach(self, session_id: str, record: HostRecord, ledger: Ledger, init: dict[str, Any] | None = None,
                      marked_terminals: Mapping[str, Any] | None = None) -> HostedAgent:
        socket = record.socket
        if record.remote is not None:  # its socket, forwarded here over a new link
            socket = await self._link(session_id, record)
        incarnation = await self.store.hosts.next_incarnation(session_id)  # a newer attach wins at the host (AH-3)
        connection = await HostConnection.attach(socket, record.secret, incarnation, ledger.committed(),
                                                 timeout=10.0)
        if record.remote is not None:  # a dropped link is replaced while this gateway runs: no line lost (RH-5)
            async def again() -> tuple[str, int]:
                socket = await self._link(session_id, record)
                try:
                    return socket, await self.store.hosts.next_incarnation(session_id)
                except Exception as exc:  # its row is gone (the session ended meanwhile), or the store failed
                    raise HostError(f"session {session_id}: its agent host is no longer this gateway's to attach "
                                    f"({exc})", "gone") from exc

            connection.relink = Relink(again, self.relink_timeout,
                                       f"session {session_id} on remote host {record.remote}")
        agent = HostedAgent(connection, record, ledger, incarnation, init, marked_terminals)
        self.agents[session_id] = agent
        self._forget_terminals(session_id)
        if agent.marked_terminals:
            self._marked_terminals[session_id] = agent.marked_terminals

        async def stopped() -> None:
            self.forget(session_id, agent)
            await self.store.hosts.drop(session_id)
            self._clear(record)
            await self.unlink(session_id)
            if record.remote is not None:  # ended there too if it did not end by its rules; its directory goes
                await self._kill_remote(record)

        agent.on_stopped = stopped
        return agent

    async def remember_init(self, session_id: str, agent: HostedAgent, init: InitializeResponse | None) -> None:
        """The agent's answer to `initialize`, for a later gateway that attaches without asking it again."""
        agent.init = init.model_dump(mode="json", by_alias=True, exclude_none=True) if init is not None else None
        await self.store.hosts.set_host(session_id, {**asdict(agent.record), "init": agent.init})

    def init_of(self, agent: HostedAgent) -> InitializeResponse | None:
        return InitializeResponse.model_validate(agent.init) if agent.init is not None else None

    async def abandon(self, session_id: str) -> None:
        """A host no gateway will attach to again: killed (its agent dies with it), and forgotten."""
        row = await self.store.hosts.get(session_id)
        if row is not None:
            with contextlib.suppress(KeyError, ValueError, TypeError, ProcessLookupError, PermissionError):
                record = HostRecord.of(row.host)
                if record.remote is not None:
                    await self._kill_remote(record)
                if _is_host(record):
                    os.kill(record.host_pid, signal.SIGKILL)
                self._clear(record)
            await self.store.hosts.drop(session_id)
        await self.unlink(session_id)
        agent = self.agents.pop(session_id, None)
        self._forget_terminals(session_id)
        if agent is not None:
            agent.detached = True
            await agent.connection.close()

    def ours(self, host: Mapping[str, Any]) -> bool:
        """Whether a stored host is this gateway's: its socket lies under this state directory (on a shared
        PostgreSQL store, the other nodes' rows are theirs; nothing of them may be signalled here)."""
        socket = host.get("socket")
        return isinstance(socket, str) and Path(socket).parent.parent == self.state_dir / "hosts"

    def _clear(self, record: HostRecord) -> None:
        """What a host killed with SIGKILL leaves (its socket, its spool: the agent's conversation) is removed; a
        host that ended by its rules removed them itself. Only ever under this state directory's `hosts/`."""
        directory = Path(record.socket).parent
        if directory.parent == self.state_dir / "hosts":
            shutil.rmtree(directory, ignore_errors=True)

    def forget(self, session_id: str, agent: HostedAgent) -> None:
        if self.agents.get(session_id) is agent:
            del self.agents[session_id]
            self._forget_terminals(session_id)

    def serve_terminals(self, session_id: str, marks: TerminalMarks) -> None:
        """The session's terminals are served (`terminals.SessionTerminals`): its marks say what its events hold of
        them from now on."""
        self._terminal_marks[session_id] = marks
        self._marked_terminals.pop(session_id, None)
        self._terminals_stored.pop(session_id, None)

    def _forget_terminals(self, session_id: str) -> None:
        self._terminal_marks.pop(session_id, None)
        self._terminals_stored.pop(session_id, None)
        self._marked_terminals.pop(session_id, None)

    # -- the journal's group commits ----------------------------------------------------------------------------
    def marks(self) -> dict[str, bytes] | None:
        """The marks that changed since the last group: they go into this one (the bus calls this as it cuts it)."""
        changed: dict[str, bytes] = {}
        for session_id, agent in self.agents.items():
            ledger, terminals = agent.ledger, self._terminal_marks.get(session_id)
            version = terminals.version if terminals is not None else -1
            if ledger.changed() or version != self._terminals_stored.get(session_id, -1):
                ledger.stored = ledger.version
                mark = ledger.mark().encode()
                if terminals is not None:  # what the events of this group and before hold of its terminals' output
                    self._terminals_stored[session_id] = version
                    mark = orjson.dumps({**orjson.loads(mark), "terminals": terminals.mark()})
                elif session_id in self._marked_terminals:  # not served yet (a reattach under way): they stand
                    mark = orjson.dumps({**orjson.loads(mark), "terminals": self._marked_terminals[session_id]})
                changed[session_id] = mark
                self._acks[session_id] = ledger.committed()
        return changed or None

    def committed(self, marks: Mapping[str, bytes]) -> None:
        """A group with these marks is committed: each host may drop what its gateway needs no more."""
        for session_id in marks:
            agent, offset = self.agents.get(session_id), self._acks.pop(session_id, None)
            if agent is not None and not agent.detached and offset is not None:
                with contextlib.suppress(HostError):
                    agent.connection.ack(offset)

    async def write_marks(self) -> None:
        """The marks that changed with no group commit to carry them (a question answered, a response read): written
        alone. The caller makes sure no event is queued or being committed, so every event of the lines they cover
        is committed already."""
        marks = self.marks()
        for session_id, mark in (marks or {}).items():
            try:
                await self.store.hosts.set_mark(session_id, orjson.loads(mark))
            except Exception:
                self.failed({session_id: mark})
                raise
        if marks:
            self.committed(marks)

    async def keep_marks(self, idle: Callable[[], bool], every: float = 0.5) -> None:
        """Until cancelled: `write_marks` whenever the journal is idle."""
        while True:
            await asyncio.sleep(every)
            if self.agents and idle():
                with contextlib.suppress(Exception):
                    await self.write_marks()

    def failed(self, marks: Mapping[str, bytes]) -> None:
        """A group was not committed: its marks go again with the next one."""
        for session_id in marks:
            self._acks.pop(session_id, None)
            agent = self.agents.get(session_id)
            self._terminals_stored.pop(session_id, None)
            if agent is not None:
                agent.ledger.stored = -1


def links_directory(state_dir: Path) -> Path:
    """Where this gateway's forwards put their sockets: `<state_dir>/links` when its path is short enough for a
    socket's address (107 bytes), else one in the temporary directory named after the state directory (the same
    for the next gateway on it, which replaces a killed one's sockets) — used only when it is this user's own 0700
    directory and no link; else a fresh one of unforeseeable name."""
    links = state_dir / "links"
    if len(str(links)) > 80:
        name = f"acp-links-{os.geteuid()}-{hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]}"
        links = Path(tempfile.gettempdir()) / name
        with contextlib.suppress(FileExistsError):
            links.mkdir(mode=0o700)
        found = links.lstat()
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
            return Path(tempfile.mkdtemp(prefix="acp-links-"))  # someone else's, or opened up: not used
        return links
    private_directory(links)
    return links


def _is_host(record: HostRecord) -> bool:
    """Whether the recorded host pid is still an agent host of this machine (never signal a recycled pid; a remote
    host's pid is that machine's, and here may well be another session's local host: `_kill_remote` ends it)."""
    if record.remote is not None:
        return False
    try:
        cmdline = Path(f"/proc/{record.host_pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"gateway.agenthost" in cmdline
