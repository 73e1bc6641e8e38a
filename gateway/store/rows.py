"""What the store hands out: frozen row dataclasses, and events with their frames encoded once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson


@dataclass(frozen=True)
class HistoryEntry:
    kind: str  # user_message | agent_message | tool_call | tool_result | turn_interrupted | rewind
    content: str = ""
    name: str = ""


@dataclass(frozen=True)
class TaskRow:
    id: str
    owner: str
    title: str | None
    description: str | None
    state: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class SessionRow:
    seq: int
    id: str
    task_id: str
    owner: str
    agent: str
    cwd: str
    title: str | None
    state: str
    error_message: str | None
    recovery_pending: bool
    needs_resume_context: bool
    launched: bool
    created_at: float
    updated_at: float
    task_state: str
    turn_event_id: int | None = None  # while a turn runs: its `turn_started` event has this id or a greater one
    name: str | None = None  # the owner's name for it, unique among their sessions
    forked_from: str | None = None  # the session it was forked from (`task.session.fork`)
    agent_version: str | None = None  # the installed version its agent runs at (registry agents; else None)
    # its own git worktree (docs/worktrees.md), as stored: repo, path, branch, base, base_commit; None for most
    worktree: dict[str, Any] | None = field(default=None, compare=False)
    host: str | None = None  # the remote host its agent runs on (docs/remote-hosts.md); None: the gateway's machine


@dataclass(frozen=True)
class ExecutorRow:
    session_id: str
    resume_token: str | None
    execution_id: str | None
    instance_id: str | None
    cwd: str
    status: str
    last_seen: float
    pid: int | None = None  # the agent's pid, which is also its process group
    proc_start: int | None = None  # its start time, clock ticks since boot (/proc/PID/stat field 22)
    boot_id: str | None = None


EXECUTOR_COLUMNS = ("e.session_id, e.resume_token, e.execution_id, e.instance_id, e.cwd, e.status, e.last_seen, "
                    "e.pid, e.proc_start, e.boot_id")


def executor_row(row: Sequence[Any], start: int) -> ExecutorRow | None:
    """The executor columns of a (possibly joined) row from `start`; None where the join found none."""
    if row[start] is None:
        return None
    return ExecutorRow(*row[start:start + len(ExecutorRow.__dataclass_fields__)])


CONFIG_JSON_COLUMNS = ("offer", "chosen", "unapplied", "commands", "usage", "capabilities", "mcp_servers",
                       "additional_directories")
CONFIG_COLUMNS = ", ".join(f"c.{name}" for name in CONFIG_JSON_COLUMNS)


@dataclass(frozen=True)
class ConfigRow:
    """A session's configuration as stored (`acp.session_config` and `gateway.runtime.config` give it meaning), each
    JSON column decoded. `mcp_servers` holds their secrets: it never leaves the runtime as it is."""

    offer: dict[str, Any] = field(default_factory=dict)
    chosen: dict[str, Any] = field(default_factory=dict)
    unapplied: list[Any] = field(default_factory=list)
    commands: list[Any] | None = None
    usage: dict[str, Any] | None = None
    capabilities: dict[str, Any] | None = None
    mcp_servers: list[Any] = field(default_factory=list)
    additional_directories: list[Any] = field(default_factory=list)


def config_row(row: Sequence[Any], start: int) -> ConfigRow | None:
    """The configuration columns of a (possibly joined) row from `start`; None where the join found none (a session
    stored before configurations were)."""
    values = row[start:start + len(CONFIG_JSON_COLUMNS)]
    if values[0] is None:
        return None
    decoded: dict[str, Any] = {name: orjson.loads(v) if v is not None else None
                               for name, v in zip(CONFIG_JSON_COLUMNS, values, strict=True)}
    # A column of the wrong shape (a hand-edited database) reads as empty rather than breaking every view.
    objects = {k: v for k, v in decoded.items() if isinstance(v, dict)}
    lists = {k: v for k, v in decoded.items() if isinstance(v, list)}
    return ConfigRow(offer=objects.get("offer", {}), chosen=objects.get("chosen", {}),
                     unapplied=lists.get("unapplied", []), commands=lists.get("commands"), usage=objects.get("usage"),
                     capabilities=objects.get("capabilities"), mcp_servers=lists.get("mcp_servers", []),
                     additional_directories=lists.get("additional_directories", []))


@dataclass(frozen=True)
class HostRow:
    """The agent host a session's agent runs in (docs/agent-hosts.md), as stored: how to reach it again (`host`), the
    agent-line offsets the gateway committed (`mark`: None before the first commit) and the newest incarnation that
    attached to it. `host` holds the execution's secret: it is left out of the repr, so a logged row never shows it."""

    session_id: str
    execution_id: str
    host: dict[str, Any] = field(repr=False)
    mark: dict[str, Any] | None
    incarnation: int


HOST_COLUMNS = "session_id, execution_id, host, mark, incarnation"


def host_row(row: Sequence[Any]) -> HostRow:
    """A row of `HOST_COLUMNS`, its JSON columns decoded."""
    return HostRow(row[0], row[1], orjson.loads(row[2]), orjson.loads(row[3]) if row[3] is not None else None,
                   int(row[4]))


@dataclass(frozen=True)
class StoredHistory:
    id: int
    kind: str
    name: str
    content: str
    ts: float

    def entry(self) -> HistoryEntry:
        return HistoryEntry(self.kind, self.content, self.name)


@dataclass(slots=True)
class EventRow:
    id: int
    type: str
    owner: str
    session_id: str | None
    task_id: str | None
    ts: float
    data: dict[str, Any]
    _frame: bytes | None = None

    def frame(self) -> bytes:
        """The `task.session.event` notification: what every subscriber receives and what the journal
        keeps. Encoded once, whoever needs it."""
        if self._frame is None:
            self._frame = orjson.dumps({"jsonrpc": "2.0", "method": "task.session.event", "params": {
                "id": self.id, "type": self.type, "session_id": self.session_id, "task_id": self.task_id,
                "ts": self.ts, "data": self.data}})
        return self._frame


SESSION_COLUMNS = (
    "s.seq, s.id, s.task_id, s.owner, s.agent, s.cwd, s.title, s.state, s.error_message, s.recovery_pending, "
    "s.needs_resume_context, s.launched, s.created_at, s.updated_at, t.state, s.turn_event_id, s.name, s.forked_from, "
    "s.agent_version, (SELECT w.worktree FROM session_workspaces w WHERE w.session_id = s.id), "
    "(SELECT w.host FROM session_workspaces w WHERE w.session_id = s.id)"
)
SESSION_WIDTH = SESSION_COLUMNS.count(",") + 1  # where the columns joined after a session's begin


def session_row(row: Sequence[Any]) -> SessionRow:
    tree = orjson.loads(row[19]) if row[19] else None
    return SessionRow(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], bool(row[9]),
                      bool(row[10]), bool(row[11]), row[12], row[13], row[14], row[15], row[16], row[17], row[18],
                      tree if isinstance(tree, dict) else None, row[20])


class JournalHead(NamedTuple):
    """One owner's journal at start-up: its newest id and the bytes its rows hold."""

    head: int
    bytes: int


@dataclass(slots=True)
class EventGroup:
    """Events committed together (ascending ids) and their frames, each encoded once. `stream` is the
    (owner, session_id) they all share when they do: the common case, one agent streaming, whose
    group is written and fanned out without touching each event again."""

    events: list[EventRow]
    frames: list[bytes]
    stream: tuple[str, str | None] | None
    _message: bytes | None = None
    # Other encodings of these frames, made once and shared by every subscriber that gets them all (a sink's
    # wire format, say): what a sink puts here is its own business.
    shared: dict[str, Any] = field(default_factory=dict)
    # Agent hosts' marks (session id -> the mark, JSON-encoded) committed with these events, in the same transaction:
    # the agent lines that produced them are then never replayed, and lines not yet committed never lost. None (the
    # common case, no agent host) costs the commit nothing.
    marks: dict[str, bytes] | None = None

    def message(self) -> bytes:
        """The frames as one JSON array (a JSON-RPC batch of notifications), joined once for every
        subscriber that gets them all."""
        if self._message is None:
            self._message = b"[" + b",".join(self.frames) + b"]"
        return self._message

    @classmethod
    def of(cls, events: list[EventRow]) -> EventGroup:
        first = events[0]
        shared = (len(events) == events[-1].id - first.id + 1 and len({e.owner for e in events}) == 1
                  and len({e.session_id for e in events}) == 1)
        return cls(events, [e.frame() for e in events], (first.owner, first.session_id) if shared else None)
