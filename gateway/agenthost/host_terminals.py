"""The agent's terminals, run by its host (TM-1…6, docs/agent-hosts.md): the gateway decides what a terminal runs and
says so (`term_start`); the host starts it as its own child — so it outlives the gateway, and dies with the host —,
keeps its output in a buffer of the terminal's limit, sends what it reads to the attached gateway, and reports every
terminal not released in its welcome. `acp.terminals.Terminal` runs each command, as it does in the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from acp.budget import ByteRate
from acp.errors import RpcError
from acp.terminals import Terminal, TerminalSpec

from . import protocol
from .protocol import TermStart

PR_SET_PDEATHSIG = 1


def terminal_preexec(moves: list[tuple[int, int]]) -> Callable[[], None]:
    """What the terminal's child does before it execs: it dies when the host dies (PR_SET_PDEATHSIG; a host already
    gone: it exits at once), and takes each descriptor the command is handed at the number the gateway named
    (`moves`: (what the host holds, the number)). Only what is safe between fork and exec."""
    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl  # looked up now: after fork, only the call
    host = os.getpid()

    def arm() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != host:
            os._exit(127)
        for held, number in moves:
            os.dup2(held, number)

    return arm


def handed_descriptors(fds: tuple[tuple[int, bytes], ...]) -> tuple[tuple[int, ...], list[tuple[int, int]],
                                                                    list[int]]:
    """The descriptors a terminal is handed (a sandbox's arguments, `bwrap --args N`): each a new memory file holding
    what the gateway's held, at the same number in the child. A number free in the host is taken here first (so
    nothing the fork makes lands on it); a number the host uses is taken in the child, after the fork. Returns the
    numbers to pass, the moves the child makes, and what the host closes once the command started."""
    numbers: list[int] = []
    moves: list[tuple[int, int]] = []
    owned: list[int] = []
    try:
        for number, data in fds:
            held = os.memfd_create("acp-terminal-fd")
            owned.append(held)
            view = memoryview(data)
            while view:
                view = view[os.write(held, view):]
            os.lseek(held, 0, os.SEEK_SET)
            try:
                os.fstat(number)
            except OSError:  # free here: it is this terminal's until the command started
                os.dup2(held, number, inheritable=False)
                owned.append(number)
            else:
                moves.append((held, number))
            numbers.append(number)
    except BaseException:
        for fd in owned:
            with contextlib.suppress(OSError):
                os.close(fd)
        raise
    return tuple(numbers), moves, owned


@dataclass
class HostTerminal:
    terminal: Terminal
    status: dict[str, Any] | None = None  # its exit, once its output is read (TM-4)
    watcher: asyncio.Task[None] | None = field(default=None, repr=False)

    def report(self) -> dict[str, Any]:
        """What a welcome says of it (TM-4)."""
        terminal, output = self.terminal, self.terminal.output
        return {"id": terminal.id, "pid": terminal.pid, "shown": terminal.spec.shown, "cwd": terminal.spec.cwd,
                "limit": terminal.spec.output_limit, "total": output.total, "truncated": output.truncated,
                "output": protocol.carry(output.data()), "exit": self.status}


class HostTerminals:
    """The terminals of one host's agent, by id. `send` reaches the attached gateway (nothing while none is);
    `drain` waits until it took what was sent (a terminal's reader waits for it, as for a full pipe)."""

    def __init__(self, send: Callable[[dict[str, Any]], None], drain: Callable[[], Awaitable[None]]) -> None:
        self._send = send
        self._drain = drain
        self.held: dict[str, HostTerminal] = {}
        self._paces: dict[float, ByteRate] = {}  # the session's pace, shared by its terminals (one per rate said)

    async def start(self, start: TermStart) -> dict[str, Any]:
        """TM-1/TM-2: the answer to a `term_start`."""
        rule, accepted = protocol.decide_term_start(start.id, frozenset(self.held))
        if not accepted:
            return {"t": protocol.TERM_FAILED, "id": start.id, "rule": rule,
                    "reason": f"terminal {start.id} exists already"}
        try:
            numbers, moves, owned = handed_descriptors(start.fds)
        except OSError as exc:
            return {"t": protocol.TERM_FAILED, "id": start.id, "rule": rule,
                    "reason": f"its descriptors could not be made: {exc.strerror or exc}"}
        pace = self._paces.setdefault(start.rate, ByteRate(start.rate)) if start.rate is not None else None
        spec = TerminalSpec(start.argv, start.cwd, start.env, start.limit, start.shown, start.marker, numbers, pace)
        terminal_id = start.id
        terminal = Terminal(terminal_id, spec, lambda data: self._output(terminal_id, data), self._drain)
        try:
            await terminal.start(terminal_preexec(moves), tuple(owned))
        except RpcError as exc:
            return {"t": protocol.TERM_FAILED, "id": start.id, "rule": rule, "reason": exc.message}
        held = self.held[terminal_id] = HostTerminal(terminal)
        held.watcher = asyncio.get_running_loop().create_task(self._watch(held))
        return {"t": protocol.TERM_STARTED, "id": start.id, "pid": terminal.pid}

    def _output(self, terminal_id: str, data: bytes) -> None:
        """TM-3: kept (the Terminal's buffer), and sent to the attached gateway as it is read."""
        self._send({"t": protocol.TERM_OUTPUT, "id": terminal_id, **protocol.carry(data)})

    async def _watch(self, held: HostTerminal) -> None:
        held.status = await held.terminal.wait()
        self._send({"t": protocol.TERM_EXIT, "id": held.terminal.id, "status": held.status})  # TM-4

    def kill(self, terminal_id: str) -> None:
        """TM-5: its process group; its exit follows."""
        held = self.held.get(terminal_id)
        if held is not None:
            held.terminal.kill()

    async def release(self, terminal_id: str) -> dict[str, Any]:
        """TM-5: its whole tree killed, then forgotten."""
        held = self.held.pop(terminal_id, None)
        if held is not None:
            await held.terminal.stop()
            if held.watcher is not None:
                held.watcher.cancel()
        return {"t": protocol.TERM_RELEASED, "id": terminal_id}

    def reports(self) -> list[dict[str, Any]]:
        """TM-4: every terminal not released, for a welcome."""
        return [held.report() for held in self.held.values()]

    async def kill_all(self, timeout: float = 10.0) -> None:
        """TM-6: every terminal's tree killed; each stays readable until released. Their exits are told first."""
        stops = [held.terminal.stop() for held in self.held.values()]
        if stops:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*stops, return_exceptions=True), timeout)
        watchers = [held.watcher for held in self.held.values() if held.watcher is not None]
        if watchers:
            await asyncio.wait(watchers, timeout=1.0)
