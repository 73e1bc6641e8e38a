"""The gateway's side of a hosted agent's terminals: they run in the agent's host (TM-…, docs/agent-hosts.md), and
answer the agent's `terminal/*` methods here as `acp.terminals.Terminal` does (`RemoteTerminal`), from a copy of
the output the host keeps (the same bytes, the same limit) and the exit it tells.

`RemoteTerminals` is one connection's runner (`acp.terminals.TerminalRunner`): it asks the host to start what the
gateway's policy planned, and knows again the terminals the host reported in its welcome — those an earlier gateway
started, which ran on while none was attached.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from acp.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError
from acp.terminals import HeldTerminal, OutputBuffer, TerminalSpec

from . import protocol
from .client import HostConnection, HostError
from .protocol import FrameError, TermStart

RELEASE_TIMEOUT = 30.0  # a host that does not say its terminal is gone: the agent's stop goes on without it
KILLED_WITH_HOST = {"exitCode": None, "signal": signal.Signals.SIGKILL.name}


@dataclass(frozen=True)
class Reported:
    """What the host said of a terminal when this gateway attached (TM-4): its output then, and how much it wrote."""

    data: bytes
    total: int


class RemoteTerminal(HeldTerminal):
    """One terminal in the host, as `acp.terminals.Terminals` serves it."""

    def __init__(self, terminals: RemoteTerminals, terminal_id: str, spec: TerminalSpec,
                 output: OutputBuffer | None = None, pid: int | None = None, status: dict[str, Any] | None = None,
                 reported: Reported | None = None) -> None:
        super().__init__(terminal_id, spec)
        self._terminals = terminals
        if output is not None:
            self.output = output
        self.reported = reported
        self._pid = pid
        self._status = status
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if status is not None:
            self._ended.set_result(None)

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def exit(self) -> dict[str, Any] | None:
        return self._status

    def _exit(self, status: dict[str, Any]) -> None:
        if self._status is None:
            self._status = status
        if not self._ended.done():
            self._ended.set_result(None)

    async def wait(self) -> dict[str, Any]:
        ended = self._terminals.connection.ended
        if self._status is None:
            await asyncio.wait([self._ended, ended], return_when=asyncio.FIRST_COMPLETED)
        if self._status is None:
            if self._terminals.detached():  # the gateway goes away, the terminal runs on: the next one tells its end
                await asyncio.shield(self._ended)
            self._exit(dict(KILLED_WITH_HOST))  # the host is gone, and its terminals with it (PR_SET_PDEATHSIG)
        assert self._status is not None
        return self._status

    def kill(self) -> None:
        with contextlib.suppress(HostError):
            self._terminals.connection.term_kill(self.id)

    async def stop(self) -> None:
        """Killed with its tree and forgotten by the host (TM-5). Not when this gateway detached: the host keeps it
        for the next one; nor when the host is gone: it died with it."""
        if self._terminals.detached():
            return
        with contextlib.suppress(HostError, TimeoutError):
            await asyncio.wait_for(self._terminals.connection.term_release(self.id), RELEASE_TIMEOUT)
        self._terminals.terminals.pop(self.id, None)


def handed(fds: tuple[int, ...]) -> tuple[tuple[int, bytes], ...]:
    """What each descriptor a terminal is handed holds from its start (a sandbox's arguments in a memory file): the
    host makes its own copies. They are closed here, as a local terminal's are once started."""
    found: list[tuple[int, bytes]] = []
    try:
        for fd in fds:
            found.append((fd, os.pread(fd, os.fstat(fd).st_size, 0)))
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    return tuple(found)


class RemoteTerminals:
    """A hosted agent's terminals over one connection to its host. `detached()`: this gateway let the host go on
    without it (its terminals run on)."""

    def __init__(self, connection: HostConnection, detached: Callable[[], bool]) -> None:
        self.connection = connection
        self.detached = detached
        self.terminals: dict[str, RemoteTerminal] = {}
        self.reported: list[RemoteTerminal] = [self._known_again(report) for report in connection.welcome.terminals]
        connection.on_terminal = self._news
        connection.on_relinked = self._relinked

    def _known_again(self, report: dict[str, Any]) -> RemoteTerminal:
        """A terminal of the welcome (TM-4), its output copied as the host keeps it."""
        try:
            data = protocol.carried(report.get("output") or {"line": ""})
        except FrameError:
            data = b""
        limit, total = int(report.get("limit") or 0), int(report.get("total") or 0)
        output = OutputBuffer.restore(limit, data, total, bool(report.get("truncated")))
        spec = TerminalSpec([], str(report.get("cwd") or ""), {}, limit, str(report.get("shown") or ""))
        status = report.get("exit")
        terminal = RemoteTerminal(self, str(report["id"]), spec, output, report.get("pid"),
                                  status if isinstance(status, dict) else None, Reported(output.data(), output.total))
        self.terminals[terminal.id] = terminal
        return terminal

    async def start(self, terminal_id: str, spec: TerminalSpec) -> RemoteTerminal:
        """TM-1: the host runs `spec` (its argv, cwd, env and descriptors, as the gateway's policy planned them)."""
        fds = handed(spec.pass_fds)
        marker = spec.tree_marker if spec.tree_marker in spec.env else None
        start = TermStart(terminal_id, list(spec.argv), spec.cwd, dict(spec.env), spec.output_limit, spec.shown,
                          marker, fds, spec.pace.rate if spec.pace is not None else None)
        terminal = RemoteTerminal(self, terminal_id, spec)
        self.terminals[terminal_id] = terminal  # its output may follow its answer at once
        try:
            answer = await self.connection.term_start(start)
        except HostError as exc:
            self.terminals.pop(terminal_id, None)
            raise RpcError(INTERNAL_ERROR, f"cannot run {spec.shown!r}: the agent's host did not start it ({exc})",
                           {"command": spec.shown}) from None
        if answer.get("t") != protocol.TERM_STARTED:
            self.terminals.pop(terminal_id, None)
            raise RpcError(INVALID_PARAMS, str(answer.get("reason") or f"cannot run {spec.shown!r}"),
                           {"command": spec.shown})
        terminal._pid = answer.get("pid")
        return terminal

    def _relinked(self, welcome: Any) -> None:
        """A new link to the host (the old one dropped): what each terminal wrote and how it ended meanwhile, from
        what the host keeps of it (its output's tail and its total: the bytes past what is here are the new ones)."""
        for report in welcome.terminals:
            terminal = self.terminals.get(str(report.get("id")))
            if terminal is None or self.detached():
                continue
            try:
                data = protocol.carried(report.get("output") or {"line": ""})
            except FrameError:
                data = b""
            missing = int(report.get("total") or 0) - terminal.output.total
            if missing > 0:  # beyond what the host keeps, bytes are lost to the host's own limit as well
                terminal.received(data[-missing:])
            status = report.get("exit")
            if isinstance(status, dict) and terminal.exit is None:
                terminal._exit(status)

    def _news(self, frame: dict[str, Any]) -> None:
        terminal = self.terminals.get(str(frame.get("id")))
        if terminal is None or self.detached():  # a detached gateway publishes nothing more: the next one will
            return
        if frame.get("t") == protocol.TERM_OUTPUT:
            with contextlib.suppress(FrameError):
                terminal.received(protocol.carried(frame))
        elif isinstance(frame.get("status"), dict):
            terminal._exit(frame["status"])
