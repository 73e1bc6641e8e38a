"""The terminals `acp-gateway check` serves an agent when it offers them: commands run in the check's scratch
directory, bounded, and every terminal's creation and release noted for the checks that judge them.

The checker already runs the agent itself with the user's rights, so running the commands the agent asks for adds
no power; the bounds keep a runaway agent from costing the machine (at most `MAX_LIVE` at once, `OUTPUT_LIMIT`
bytes of output each), and the client's stop ends them all (`acp.terminals.Terminals.close`).
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import INVALID_PARAMS, RpcError
from ..models import CreateTerminalRequest
from ..terminals import Terminal, TerminalSpec

MAX_LIVE = 8
OUTPUT_LIMIT = 1 << 20


class ScratchTerminals:
    """A `TerminalHost` for one checked agent process: the commands it asks for, in `workdir`."""

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.realpath(workdir)
        self.created: list[str] = []  # terminal ids, in order
        self.released_ids: set[str] = set()  # released by the agent (or by the client's stop)
        self.live = 0

    def plan(self, request: CreateTerminalRequest) -> TerminalSpec:
        if self.live >= MAX_LIVE:
            raise RpcError(INVALID_PARAMS, f"terminal/create: {MAX_LIVE} terminals are live already (the checker's "
                           "limit): release one first")
        cwd = os.path.realpath(request.cwd) if request.cwd else self.workdir
        if os.path.commonpath([cwd, self.workdir]) != self.workdir or not os.path.isdir(cwd):
            raise RpcError(INVALID_PARAMS, f"terminal/create: cwd {request.cwd!r} is not a directory inside the "
                           f"session's {self.workdir}")
        limit = request.outputByteLimit
        if limit is None or limit > OUTPUT_LIMIT:
            limit = OUTPUT_LIMIT
        if limit < 0:
            raise RpcError(INVALID_PARAMS, f"terminal/create: outputByteLimit {limit} is negative")
        env = {**os.environ, **{e.name: e.value for e in request.env}}
        argv = [request.command, *request.args]
        return TerminalSpec(argv, cwd, env, limit, " ".join(argv))

    def opened(self, terminal: Terminal) -> None:
        self.created.append(terminal.id)
        self.live += 1

    def output(self, terminal: Terminal, data: bytes) -> None:
        pass

    def ended(self, terminal: Terminal, status: dict[str, Any]) -> None:
        pass

    def released(self, terminal: Terminal) -> None:
        self.released_ids.add(terminal.id)
        self.live -= 1

    def unreleased(self) -> list[str]:
        return [t for t in self.created if t not in self.released_ids]
