"""The terminals an agent asks its client for (`terminal/create`, `output`, `wait_for_exit`, `kill`, `release`).

A terminal is a command run for the agent: its own process group, stdout and stderr merged, its output kept within
a byte limit (truncated from the beginning at a character boundary, as the spec says), its exit told. Where it may
run and under what (a sandbox, an environment, how many at once) is the host's policy (`TerminalHost`): this file
knows nothing of owners or workspaces. `OutputBuffer` is pure; `Terminal` runs one command; `Terminals` is one
agent connection's set, answering the five methods by id. Commands run as this process's children unless a
`TerminalRunner` runs them elsewhere (the gateway's agent hosts: `gateway/agenthost/remote_terminals.py`), whose
terminals are `Terminal`s too (`HeldTerminal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from . import proctree
from .budget import ByteRate
from .errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError
from .process import ExitProtocol

# A stable name of the peer's line being handled, set by whoever feeds the connection (a hosted agent: its host and
# the line's offset in the host's spool). A handler that creates something the peer names later (a terminal) derives
# its id from it, so the same line handled again after a gateway restart names the same thing. Tasks answering a
# request copy it as the line is dispatched.
request_key: ContextVar[str | None] = ContextVar("acp_request_key", default=None)

if TYPE_CHECKING:  # the agent host runs `Terminal` and starts in a hurry: the request models load where they parse
    from .models import CreateTerminalRequest

TERMINAL_METHODS = frozenset({"terminal/create", "terminal/output", "terminal/wait_for_exit", "terminal/kill",
                              "terminal/release"})
READ_CHUNK = 64 * 1024


def incomplete_tail(data: bytes | bytearray) -> int:
    """How many bytes at the end of `data` are the start of a UTF-8 character still to come (0-3)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): how long is its character?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if \
                byte >> 3 == 0b11110 else 1
            return back if need > back else 0
    return 0


class OutputBuffer:
    """A command's output, the last `limit` bytes of it at most: when over, cut from the beginning and then past
    any continuation bytes, so the text kept starts on a character."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._data = bytearray()
        self.truncated = False
        self.total = 0  # every byte ever appended

    def append(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self._data += chunk
        if len(self._data) > self.limit:
            cut = len(self._data) - self.limit
            while cut < len(self._data) and self._data[cut] & 0xC0 == 0x80:
                cut += 1
            del self._data[:cut]
            self.truncated = True

    def text(self) -> str:
        """What is kept, as text: a character still arriving is left for the next read."""
        end = len(self._data) - incomplete_tail(self._data)
        return self._data[:end].decode("utf-8", "replace")

    def data(self) -> bytes:
        """What is kept, as bytes: the last `len(data())` of the `total` written."""
        return bytes(self._data)

    @classmethod
    def restore(cls, limit: int, data: bytes, total: int, truncated: bool) -> OutputBuffer:
        """A buffer in the state another one's `data()`, `total` and `truncated` describe (its copy elsewhere)."""
        buffer = cls(limit)
        buffer._data = bytearray(data[-limit:] if limit else b"")
        buffer.total = max(total, len(buffer._data))
        buffer.truncated = truncated
        return buffer


@dataclass(frozen=True)
class TerminalSpec:
    """What the host decided a `terminal/create` runs: the full command line (wrapped as its policy says), where,
    with which environment, and how much output is kept."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    output_limit: int
    shown: str  # the command as the agent asked for it, for people to read (events, history)
    tree_marker: str | None = None  # an entry of `env` every process of the command carries (see acp.proctree)
    pass_fds: tuple[int, ...] = ()  # descriptors the command inherits; closed here once it started
    pace: ByteRate | None = None  # the pace its output is read at (its session's), None: as fast as it comes


def exit_status(returncode: int) -> dict[str, Any]:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return {"exitCode": None, "signal": name}
    return {"exitCode": returncode, "signal": None}


class Terminal:
    """One command, running or ended. `on_output(bytes)` sees every chunk as it is read; `drain`, when given, is
    awaited after each (its reader waits for whoever takes the output, as a pipe's would)."""

    def __init__(self, terminal_id: str, spec: TerminalSpec, on_output: Callable[[bytes], None],
                 drain: Callable[[], Awaitable[None]] | None = None) -> None:
        self.id = terminal_id
        self.spec = spec
        self.output = OutputBuffer(spec.output_limit)
        self._on_output = on_output
        self._drain = drain
        self._proc: asyncio.subprocess.Process | None = None
        self._exited: asyncio.Future[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._transport: asyncio.SubprocessTransport | None = None

    async def start(self, preexec_fn: Callable[[], None] | None = None,
                    owned_fds: tuple[int, ...] | None = None) -> None:
        """Runs the command, handed `spec.pass_fds`; the descriptors this side holds for it (`owned_fds`, default
        those) are closed once it started or failed to. `preexec_fn` runs in the child before it execs."""
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: ExitProtocol(1 << 20, loop), *self.spec.argv, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=self.spec.cwd,
                env=self.spec.env, start_new_session=True, pass_fds=self.spec.pass_fds, preexec_fn=preexec_fn)
        except OSError as exc:
            raise RpcError(INVALID_PARAMS, f"cannot run {self.spec.shown!r}: {exc.strerror or exc}",
                           {"command": self.spec.shown}) from None
        finally:
            for fd in self.spec.pass_fds if owned_fds is None else owned_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._proc = asyncio.subprocess.Process(transport, protocol, loop)
        self._transport = transport
        self._exited = protocol.exited
        self._reader = loop.create_task(self._read())

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stream = self._proc.stdout
        with contextlib.suppress(Exception):
            while chunk := await stream.read(READ_CHUNK):
                self.output.append(chunk)
                self._on_output(chunk)
                if self._drain is not None:
                    await self._drain()
                # A flooding command is one chunk per wake-up of the event loop, and no faster than its pace.
                pace = self.spec.pace
                await asyncio.sleep(pace.delay(time.monotonic(), len(chunk)) if pace is not None else 0)

    @property
    def exit(self) -> dict[str, Any] | None:
        rc = self._proc.returncode if self._proc is not None else None
        return None if rc is None else exit_status(rc)

    async def wait(self) -> dict[str, Any]:
        """The command's exit status, once it exited and what it wrote before is read."""
        assert self._exited is not None and self._proc is not None
        await asyncio.shield(self._exited)
        if self._reader is not None:  # what it wrote is read before its exit is told (children may hold the pipe)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), 0.5)
        status = self.exit
        assert status is not None
        return status

    def kill(self) -> None:
        """SIGKILL the command's process group and everything carrying its marker; the terminal stays readable."""
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)

    async def stop(self) -> None:
        """Kill it and wait until nothing of it is left (its marker's processes included), its reader done."""
        self.kill()
        if self._exited is not None:
            await asyncio.shield(self._exited)
        if self.spec.tree_marker is not None:
            value = self.spec.env.get(self.spec.tree_marker)
            if value:
                await proctree.kill_carrying(self.spec.tree_marker, value)
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        if self._transport is not None:  # a pipe left unread to its end (a flood stopped) is closed here, not at exit
            self._transport.close()


class HeldTerminal(Terminal):
    """A terminal whose command a `TerminalRunner` runs elsewhere: it answers as a `Terminal` does (its subclass
    gives `pid`, `exit`, `wait`, `kill` and `stop`), keeps a copy of its output in `output`, and hands each chunk on
    once asked to flow (so whoever serves it says it runs before any of its output)."""

    def __init__(self, terminal_id: str, spec: TerminalSpec) -> None:
        super().__init__(terminal_id, spec, self._hand_on)
        self._flowing_to: Callable[[bytes], None] | None = None
        self._pending: list[bytes] = []  # what came before anyone asked it to flow

    async def start(self, preexec_fn: Callable[[], None] | None = None,
                    owned_fds: tuple[int, ...] | None = None) -> None:
        raise NotImplementedError("a held terminal is started by its runner")

    def flow(self, on_output: Callable[[bytes], None]) -> None:
        """What it wrote since it started or was reported and was not handed on yet, then each chunk as it comes."""
        pending, self._pending = self._pending, []
        for chunk in pending:
            on_output(chunk)
        self._flowing_to = on_output

    def received(self, data: bytes) -> None:
        """A chunk of its output, as its runner got it: kept, and handed on."""
        self.output.append(data)
        self._hand_on(data)

    def _hand_on(self, data: bytes) -> None:
        if self._flowing_to is not None:
            self._flowing_to(data)
        else:
            self._pending.append(data)


class TerminalRunner(Protocol):
    """Where commands run when not as this process's children."""

    async def start(self, terminal_id: str, spec: TerminalSpec) -> HeldTerminal:
        """`spec` started under `terminal_id` (its descriptors closed here), or an RpcError saying why not."""
        ...


class TerminalHost(Protocol):
    """The policy of whoever serves an agent's terminals."""

    def plan(self, request: CreateTerminalRequest) -> TerminalSpec:
        """The command to run for `request`, or an RpcError saying why not (where, how much, how many)."""
        ...

    def opened(self, terminal: Terminal) -> None:
        """It runs (counted, recorded)."""
        ...

    def output(self, terminal: Terminal, data: bytes) -> None:
        """A chunk of its output, as read."""
        ...

    def ended(self, terminal: Terminal, status: dict[str, Any]) -> None:
        """It exited (or was killed), with this status."""
        ...

    def released(self, terminal: Terminal) -> None:
        """It is gone: no longer counted."""
        ...


@dataclass
class Terminals:
    """One agent connection's terminals, by id. Ids are random: an id from before a restart is unknown, unless
    the terminal ran on where its runner keeps it (an agent host) and was `adopt`ed again."""

    host: TerminalHost
    live: dict[str, Terminal] = field(default_factory=dict)
    runner: TerminalRunner | None = None  # where commands run; None: as this process's children
    _watchers: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, method: str, params: Any) -> Any:
        from .models import CreateTerminalRequest, TerminalRequest, parse_request

        if method == "terminal/create":
            request = parse_request(CreateTerminalRequest, params, method)
            key = request_key.get()
            if key is not None and self.runner is not None:
                # The id follows from the agent's line: a create handled again after a restart (its answer never
                # reached the agent) finds the terminal its first handling started, adopted from the host, and names
                # it again instead of running its command twice.
                terminal_id = f"term-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
                if terminal_id in self.live:
                    return {"terminalId": terminal_id}
            else:
                terminal_id = f"term-{uuid.uuid4().hex[:16]}"
            spec = self.host.plan(request)
            host = self.host
            if self.runner is not None:
                held = await self.runner.start(terminal_id, spec)
                self.live[terminal_id] = held
                host.opened(held)  # said before any of its output
                held.flow(lambda data: host.output(held, data))
                self._watch_soon(held)
                return {"terminalId": terminal_id}
            local = Terminal(terminal_id, spec, lambda data: host.output(local, data))
            await local.start()
            self.live[terminal_id] = local
            host.opened(local)
            self._watch_soon(local)
            return {"terminalId": terminal_id}
        which = parse_request(TerminalRequest, params, method)
        known = self.live.get(which.terminalId)
        if known is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"terminal {which.terminalId} is not known to this client: it was "
                           "released, or the gateway restarted since it was created (its command was stopped then); "
                           "create a new terminal", {"terminalId": which.terminalId})
        terminal = known
        if method == "terminal/output":
            answer: dict[str, Any] = {"output": terminal.output.text(), "truncated": terminal.output.truncated}
            answer["exitStatus"] = terminal.exit
            return answer
        if method == "terminal/wait_for_exit":
            return await terminal.wait()
        if method == "terminal/kill":
            terminal.kill()
            await terminal.wait()
            return {}
        # terminal/release: killed if still running, then forgotten
        del self.live[terminal.id]
        await terminal.stop()
        self.host.released(terminal)
        return {}

    def adopt(self, terminal: Terminal, watch: bool = True) -> None:
        """A terminal this connection did not create is known again (one an agent host kept running while no gateway
        ran): the agent's methods reach it by its id. `watch`: its exit is still to be told to the host."""
        self.live[terminal.id] = terminal
        if watch:
            self._watch_soon(terminal)

    def _watch_soon(self, terminal: Terminal) -> None:
        watcher = asyncio.get_running_loop().create_task(self._watch(terminal))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    async def _watch(self, terminal: Terminal) -> None:
        status = await terminal.wait()
        self.host.ended(terminal, status)

    async def close(self) -> None:
        """Every terminal stopped and released: the agent is gone, or stopped."""
        for terminal in list(self.live.values()):
            del self.live[terminal.id]
            with contextlib.suppress(Exception):
                await terminal.stop()
            self.host.released(terminal)
        for watcher in list(self._watchers):
            watcher.cancel()
