"""The gateway's policy for an agent's terminals: where a command may run, under what, how many, and who sees it.

A terminal's command runs like the agent itself: in the session's directory or another one the owner's workspace
rules allow, under the agent's sandbox, home and allowlisted environment, carrying the agent's execution marker (so
the agent's stop and the reaper after a crash end it too) and one of its own (its tree, when it is released). Its
output streams to the session's frontends as `terminal_output` events (at most `PUBLISHED_BYTES` of it: a flooding
command must not fill the journal), its exit as `terminal_exited`, and what it kept goes into the session's history.
`refusal` is the one decision; the rest reports.

A hosted agent's terminals run in its host (docs/agent-hosts.md, TM-…): the policy stays here, and what of each
terminal's output the session's events hold rides in the host's mark, in the same commit as those events (`mark`),
so a gateway that attached again (`adopt`) publishes what the host kept since, and nothing twice (TM-7).
"""

from __future__ import annotations

import codecs
import os
import shlex
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from acp.budget import ByteRate
from acp.errors import INVALID_PARAMS, RpcError
from acp.models import CreateTerminalRequest
from acp.terminals import Terminal, TerminalSpec

from ..agenthost.protocol import unseen_output
from ..agenthost.remote_terminals import RemoteTerminal, Reported
from ..errors import LIMIT_EXCEEDED
from ..store import HistoryEntry, SessionRow
from . import failpoints
from .settings import Settings
from .spawn_env import Source, Spawn
from .spawn_env import refusal as env_refusal
from .writer import HistoryWriter

TERMINAL_MARKER = "ACP_TERMINAL_EXECUTION"  # beside the agent's ACP_AGENT_EXECUTION, which the reaper looks for
PUBLISHED_BYTES = 1 << 20  # of one terminal's output, streamed to frontends as events (all of it is kept as asked)
HISTORY_BYTES = 64 << 10  # of one terminal's output, kept in the session's history (its end)


@dataclass
class TerminalCounts:
    """Live terminals per session and per owner, across the gateway."""

    by_session: dict[str, int] = field(default_factory=dict)
    by_owner: dict[str, int] = field(default_factory=dict)

    def add(self, owner: str, session_id: str, delta: int) -> None:
        self.by_session[session_id] = self.by_session.get(session_id, 0) + delta
        self.by_owner[owner] = self.by_owner.get(owner, 0) + delta


def refusal(request: CreateTerminalRequest, *, session_cwd: str, settings: Settings, live_in_session: int,
            live_of_owner: int, directory_refusal: Callable[[str], str | None]) -> RpcError | None:
    """Why `request` may not run (where, how much, how many), or None. Nothing is started when refused."""
    cwd = request.cwd if request.cwd is not None else session_cwd
    if not os.path.isabs(cwd):
        return RpcError(INVALID_PARAMS, f"terminal/create: cwd must be an absolute path, not {cwd!r}", {"field": "cwd"})
    if os.path.normpath(cwd) != os.path.normpath(session_cwd):
        why = directory_refusal(cwd)
        if why is not None:
            return RpcError(INVALID_PARAMS, f"terminal/create: cwd {cwd} is refused: {why}", {"field": "cwd"})
    limit = request.outputByteLimit
    if limit is not None and not 0 <= limit <= settings.max_terminal_output_bytes:
        return RpcError(INVALID_PARAMS, f"terminal/create: outputByteLimit must be between 0 and "
                        f"{settings.max_terminal_output_bytes} (max_terminal_output_bytes), not {limit}",
                        {"field": "outputByteLimit"})
    if live_in_session >= settings.max_terminals_per_session:
        return RpcError(LIMIT_EXCEEDED, f"terminal/create: this session has {live_in_session} terminals already "
                        f"(max_terminals_per_session = {settings.max_terminals_per_session}): release one first",
                        {"limit": settings.max_terminals_per_session, "name": "max_terminals_per_session"})
    if live_of_owner >= settings.max_terminals_per_owner:
        return RpcError(LIMIT_EXCEEDED, f"terminal/create: this owner's sessions have {live_of_owner} terminals "
                        f"already (max_terminals_per_owner = {settings.max_terminals_per_owner}): release one first",
                        {"limit": settings.max_terminals_per_owner, "name": "max_terminals_per_owner"})
    return None


class SessionTerminals:
    """The `acp.terminals.TerminalHost` of one live session."""

    def __init__(self, row: SessionRow, settings: Settings, counts: TerminalCounts, env: Mapping[str, str],
                 marker: str, confined: bool, wrap: Callable[[list[str], str, Mapping[str, str]], Spawn],
                 directory_refusal: Callable[[str], str | None],
                 publish: Callable[[str, dict[str, Any]], object], history: HistoryWriter) -> None:
        self.row = row
        self.settings = settings
        self.counts = counts
        self.env = dict(env)
        self.marker = marker
        self.confined = confined  # its commands run in the agent's sandbox: their environment is set only inside
        self.pace = ByteRate(settings.terminal_output_rate)  # the session's terminals' output, read at most this fast
        self.wrap = wrap  # (command line, cwd, its environment) -> how to start it (sandboxed as the agent is)
        self.directory_refusal = directory_refusal
        self.publish = publish  # (event type, data): queued to the session's journal
        self.history = history
        self._published: dict[str, int] = {}  # of each terminal: its output's offset published up to (fed to decoding)
        self._decoders: dict[str, codecs.IncrementalDecoder] = {}  # the terminals opened and not released
        self._told_exit: set[str] = set()  # their `terminal_exited` is published
        self.version = 0  # changes with every change of `mark()`

    def plan(self, request: CreateTerminalRequest) -> TerminalSpec:
        refused = refusal(request, session_cwd=self.row.cwd, settings=self.settings,
                          live_in_session=self.counts.by_session.get(self.row.id, 0),
                          live_of_owner=self.counts.by_owner.get(self.row.owner, 0),
                          directory_refusal=self.directory_refusal)
        if refused is not None:
            raise refused
        refused_env = env_refusal(((e.name, e.value) for e in request.env), Source.AGENT, self.confined)
        if refused_env is not None:
            raise RpcError(INVALID_PARAMS, f"terminal/create: env: {refused_env}", {"field": "env"})
        cwd = request.cwd or self.row.cwd
        command = [request.command, *request.args]
        # The agent's own environment (allowlisted, its owner's home, its marker), with what the agent adds; the
        # marker is the agent's whatever it asks: its terminals end with it.
        # Its own marker too: what carries it is this terminal's tree (the agent's marker would take the agent along).
        env = {**self.env, **{e.name: e.value for e in request.env}, self.marker: self.env[self.marker],
               TERMINAL_MARKER: f"t-{uuid.uuid4().hex}"}
        limit = request.outputByteLimit if request.outputByteLimit is not None else self.settings.terminal_output_bytes
        spawn = self.wrap(command, cwd, env)
        return TerminalSpec(spawn.argv, spawn.cwd, spawn.env, limit, shlex.join(command), TERMINAL_MARKER, spawn.fds,
                            self.pace)

    def opened(self, terminal: Terminal) -> None:
        failpoints.reached("terminal-started")  # started, its id not yet answered to the agent
        self.counts.add(self.row.owner, self.row.id, 1)
        self._decoders[terminal.id] = codecs.getincrementaldecoder("utf-8")("replace")
        self._started(terminal)

    def _started(self, terminal: Terminal) -> None:
        self.version += 1
        self.publish("terminal_started", {"terminal_id": terminal.id, "command": terminal.spec.shown,
                                          "cwd": terminal.spec.cwd, "output_byte_limit": terminal.spec.output_limit})

    def output(self, terminal: Terminal, data: bytes) -> None:
        sent = self._published.get(terminal.id, 0)
        if sent >= PUBLISHED_BYTES:
            return
        piece = data[:PUBLISHED_BYTES - sent]
        self._published[terminal.id] = sent + len(piece)
        self.version += 1
        decoder = self._decoders.get(terminal.id)
        text = decoder.decode(piece) if decoder is not None else piece.decode("utf-8", "replace")
        if text:
            self.publish("terminal_output", {"terminal_id": terminal.id, "text": text})

    def mark(self) -> dict[str, list[int]]:
        """What the session's events hold of each terminal not released, as queued so far: [the bytes of its output
        published as text (a character still being decoded is not), 1 if its exit is published]. A hosted agent's
        mark carries it, in the commit of those events (`hosting.Hosts.marks`)."""
        return {terminal_id: [self._published.get(terminal_id, 0) - len(decoder.getstate()[0]),
                              int(terminal_id in self._told_exit)]
                for terminal_id, decoder in self._decoders.items()}

    def adopt(self, terminal: RemoteTerminal, marked: Any) -> bool:
        """A terminal the agent's host kept running (or kept the end of) while no gateway ran, known again: counted,
        its start published unless `marked` (its entry of the mark: what the events held of it at the last commit)
        says it was, then its output the events lack and the host still holds (TM-7), then what comes. Returns
        whether its exit is still to be published."""
        self.counts.add(self.row.owner, self.row.id, 1)
        self._decoders[terminal.id] = codecs.getincrementaldecoder("utf-8")("replace")
        published, told_exit = 0, False
        if isinstance(marked, list) and len(marked) == 2 and all(isinstance(v, int) for v in marked):
            published, told_exit = max(0, marked[0]), bool(marked[1])
        else:
            self._started(terminal)
        reported = terminal.reported or Reported(b"", 0)
        _, start, end = unseen_output(published, reported.total, len(reported.data), PUBLISHED_BYTES)
        first = reported.total - len(reported.data)  # the offset of the first byte the host still held
        self._published[terminal.id] = start
        if end > start:  # then published up to `end`: where what comes next starts, or the cap
            self.output(terminal, reported.data[start - first:end - first])
        if told_exit:
            self._told_exit.add(terminal.id)
        self.version += 1
        terminal.flow(lambda data: self.output(terminal, data))
        return not told_exit

    def ended(self, terminal: Terminal, status: dict[str, Any]) -> None:
        output = terminal.output
        streamed = self._published.get(terminal.id, 0)
        self.publish("terminal_exited", {
            "terminal_id": terminal.id, "exit_code": status.get("exitCode"), "signal": status.get("signal"),
            "output_bytes": output.total, "truncated": output.truncated,
            "streamed_bytes": streamed, "complete": streamed >= output.total})
        text = output.text()
        kept = text[-HISTORY_BYTES:]
        how = (f"exit code {status['exitCode']}" if status.get("exitCode") is not None
               else f"killed by {status.get('signal')}")
        self.history.add([HistoryEntry("terminal", ("…" if len(kept) < len(text) or output.truncated else "")
                                       + kept + f"\n[{how}]", terminal.spec.shown)])
        self._told_exit.add(terminal.id)
        self.version += 1

    def released(self, terminal: Terminal) -> None:
        self.counts.add(self.row.owner, self.row.id, -1)
        self._published.pop(terminal.id, None)
        self._decoders.pop(terminal.id, None)
        self._told_exit.discard(terminal.id)
        self.version += 1
