"""The replay of recordings, sans I/O: which recorded agent frames to send for each frame a client sends.

A recording is a script: client frames to wait for, agent frames to send. A replay may hold several
scripts — every process an agent ran for a corpus (`fixtures/agents/<agent>@<version>/`) — and follows all
that agree with what the client has sent so far, speaking for the nearest one (`rules` says what
agreeing means). When none agrees, the frame diverged: the replay answers a request with an error that
shows the recorded frame beside the received one, and waits on, still expecting what it expected.
`agent.py` does the reading, writing and pacing.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from .rules import (
    ALL_RULES,
    STRICT_RULES,
    Bindings,
    Mismatch,
    Rule,
    hand_out_sessions,
    issued_session_ids,
    kind,
    localize,
    match_frame,
)

CLIENT = "client_to_agent"
AGENT = "agent_to_client"


@dataclass(frozen=True)
class Entry:
    direction: str  # CLIENT or AGENT
    msg: Mapping[str, Any]
    ts: float


@dataclass(frozen=True)
class Script:
    name: str
    entries: tuple[Entry, ...]
    # How the recorded agent ended (`agent_exit`): its status, negative when a signal ended it, and how long after
    # the client closed its stdin; None when the recording does not say.
    exit_code: int | None = None
    exited_after_eof: float | None = None

    @staticmethod
    def from_lines(name: str, lines: Sequence[bytes]) -> Script:
        entries = []
        code: int | None = None
        after: float | None = None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{name}:{number}: not JSON: {exc}") from None
            if raw.get("dir") in (CLIENT, AGENT) and isinstance(raw.get("msg"), dict):
                entries.append(Entry(raw["dir"], raw["msg"], float(raw.get("ts") or 0.0)))
            elif raw.get("dir") == "agent_exit" and isinstance(raw.get("code"), int):
                code, after = raw["code"], raw.get("after_eof")
        return Script(name, tuple(entries), code, after)


@dataclass(frozen=True)
class Cursor:
    """Where one script stands: the first entry not yet played, the client entries matched ahead of it (RM7), the
    bindings of its names, and the client's request ids for the recorded ones (RM1)."""

    script: Script
    position: int = 0
    early: frozenset[int] = frozenset()
    bindings: Bindings = field(default_factory=Bindings)
    ids: Mapping[Any, Any] = field(default_factory=dict)
    skipped: int = 0
    matched_at: float | None = None  # when the client frame matched last was recorded (pacing)

    def next_client(self) -> Entry | None:
        for i in range(self.position, len(self.script.entries)):
            if self.script.entries[i].direction == CLIENT and i not in self.early:
                return self.script.entries[i]
        return None


@dataclass(frozen=True)
class Divergence:
    """A client frame no script expected: what the nearest script expected instead, and why it did not match."""

    received: Mapping[str, Any]
    expected: Mapping[str, Any] | None
    mismatch: Mismatch | None
    script: str

    def summary(self) -> str:
        what = self.received.get("method", "a response")
        if self.expected is None:
            return f"received {what}; the recording {self.script} expects no more client frames"
        wanted = self.expected.get("method", "a response")
        why = f" ({self.mismatch.describe()})" if self.mismatch else ""
        return f"received {what}; the recording {self.script} expects {wanted}{why}"

    def side_by_side(self, width: int = 56) -> str:
        return side_by_side(self.expected, self.received, width)

    def error(self) -> dict[str, Any]:
        """The JSON-RPC error a diverging request is answered with."""
        shown = self.side_by_side()  # also as `diff`, the key earlier replays answered with
        return {"code": -32603, "message": f"replay divergence: {self.summary()}", "data": {
            "expected": self.expected, "received": dict(self.received),
            "where": self.mismatch.path if self.mismatch else None, "side_by_side": shown, "diff": shown}}


def _lines(frame: Mapping[str, Any] | None) -> list[str]:
    if frame is None:
        return ["(nothing)"]
    shown = {k: v for k, v in frame.items() if k not in ("jsonrpc", "id")}
    return orjson.dumps(shown, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()


def side_by_side(expected: Mapping[str, Any] | None, received: Mapping[str, Any] | None, width: int = 56) -> str:
    """The recorded frame on the left, the received one on the right, `|` where a line differs, `<` or `>` where
    only one side has it."""
    left, right = _lines(expected), _lines(received)
    rows = [f"{'recorded':<{width}}   received", f"{'-' * width}   {'-' * width}"]

    def cell(text: str) -> str:
        return text if len(text) <= width else text[: width - 1] + "…"

    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=left, b=right, autojunk=False).get_opcodes():
        if op == "equal":
            rows += [f"{cell(a):<{width}}   {cell(b)}" for a, b in zip(left[i1:i2], right[j1:j2], strict=True)]
            continue
        lhs, rhs = left[i1:i2], right[j1:j2]
        for k in range(max(len(lhs), len(rhs))):
            a = lhs[k] if k < len(lhs) else ""
            b = rhs[k] if k < len(rhs) else ""
            mark = "|" if a and b else ("<" if a else ">")
            rows.append(f"{cell(a):<{width}} {mark} {cell(b)}")
    return "\n".join(rows)


@dataclass(frozen=True)
class Played:
    """What one received client frame makes the replay do: frames to send (with their recorded times, for pacing),
    or a divergence to answer."""

    send: tuple[Entry, ...] = ()
    divergence: Divergence | None = None
    since: float | None = None  # when the client frame they answer was recorded: the first one's delay runs from it


class Replay:
    """The replay's state: the scripts still in play, each with its cursor."""

    def __init__(self, scripts: Sequence[Script], strict: bool = False, forget: bool = False) -> None:
        if not scripts:
            raise ValueError("a replay needs at least one recording")
        self.rules = STRICT_RULES if strict else ALL_RULES
        issued = issued_session_ids([e.msg for s in scripts for e in s.entries if e.direction == AGENT])
        base = Bindings(issued=issued, forget=forget)
        self.cursors: list[Cursor] = [Cursor(s, bindings=base) for s in scripts]

    def start(self) -> tuple[Entry, ...]:
        """What the agent says before the client says anything (rarely anything)."""
        return self._play_leader()

    def receive(self, msg: Mapping[str, Any]) -> Played:
        survivors: list[Cursor] = []
        nearest: tuple[Cursor, Entry | None, Mismatch | None] | None = None
        for cursor in self.cursors:
            moved = self._advance(cursor, msg)
            if isinstance(moved, Cursor):
                survivors.append(moved)
            elif nearest is None:
                nearest = (cursor, cursor.next_client(), moved)
        if not survivors:
            assert nearest is not None
            cursor, expected, mismatch = nearest
            return Played(divergence=Divergence(msg, expected.msg if expected else None, mismatch,
                                                cursor.script.name))
        survivors.sort(key=lambda c: c.skipped)  # the script that passed over least speaks (stable: file order)
        self.cursors = survivors
        return Played(send=self._play_leader(), since=self.cursors[0].matched_at)

    def _advance(self, cursor: Cursor, msg: Mapping[str, Any]) -> Cursor | Mismatch | None:
        """The cursor after matching `msg`, or why the nearest expected frame did not match (None: none left)."""
        entries = cursor.script.entries
        first_mismatch: Mismatch | None = None
        in_window = True  # RM7: the run of client frames before the next agent frame
        for i in range(cursor.position, len(entries)):
            entry = entries[i]
            if entry.direction == AGENT:
                if Rule.SKIP not in self.rules:
                    break
                in_window = False
                continue
            if i in cursor.early:
                continue
            got = match_frame(entry.msg, msg, cursor.bindings, self.rules)
            if isinstance(got, Mismatch):
                first_mismatch = first_mismatch or got
                if Rule.CONCURRENT_ORDER not in self.rules and Rule.SKIP not in self.rules:
                    break
                if not in_window and Rule.SKIP not in self.rules:
                    break
                continue
            ids = dict(cursor.ids)
            if kind(msg) == "request":
                ids[entry.msg.get("id")] = msg.get("id")
            if in_window:
                early = cursor.early | {i}
                position = cursor.position
                while position < len(entries) and position in early:
                    early = early - {position}
                    position += 1
                return replace(cursor, position=position, early=early, bindings=got, ids=ids, matched_at=entry.ts)
            return replace(cursor, position=i + 1, early=frozenset(), bindings=got, ids=ids,
                           skipped=cursor.skipped + 1, matched_at=entry.ts)
        return first_mismatch

    def _play_leader(self) -> tuple[Entry, ...]:
        """The agent frames the leading script sends now. Every other script in play moves past its own agent
        frames of this point: they may differ in what the agent said while it worked (a notification before or after
        its answer), never in which request the client sends next, which is what decides between them. A session
        the leader's answer handed out is the one each other script's answer stands for."""
        leader = self.cursors[0]
        played, leader = self._agent_run(leader, None)
        self.cursors = [leader] + [self._agent_run(cursor, played)[1] for cursor in self.cursors[1:]]
        return tuple(played)

    def _agent_run(self, cursor: Cursor, leader_said: list[Entry] | None) -> tuple[list[Entry], Cursor]:
        entries = cursor.script.entries
        position = cursor.position
        said: list[Entry] = []
        b = cursor.bindings
        if leader_said is not None:
            answer = next((e.msg for e in leader_said if kind(e.msg) == "response"), None)
            mine = next((entries[i].msg for i in range(position, len(entries))
                         if entries[i].direction != AGENT or kind(entries[i].msg) == "response"), None)
            if answer is not None and mine is not None and kind(mine) == "response":
                b = _follow_handout(mine, answer, b)
        while position < len(entries) and entries[position].direction == AGENT and position not in cursor.early:
            entry = entries[position]
            b = hand_out_sessions(entry.msg, b)
            msg = dict(localize(entry.msg, b))
            if kind(msg) == "response" and msg.get("id") in cursor.ids:
                msg["id"] = cursor.ids[msg["id"]]
            said.append(Entry(AGENT, msg, entry.ts))
            position += 1
        return said, replace(cursor, position=position, bindings=b)

    def ending(self) -> int | None:
        """What the agent does when the client closes its stdin, as the leading recording's agent did: the status to
        exit with, or None to stay until a signal ends it (it was killed). A recording that does not say exits 0."""
        script = self.cursors[0].script
        if script.exit_code is None:
            return 0
        if script.exit_code < 0 and script.exited_after_eof is not None:
            return None
        return script.exit_code


def _follow_handout(mine: Mapping[str, Any], sent: Mapping[str, Any], b: Bindings) -> Bindings:
    """A script that is not speaking binds the session it would have handed out to the one the leader did."""
    recorded, live = mine.get("result"), sent.get("result")
    if isinstance(recorded, dict) and isinstance(live, dict):
        r, s = recorded.get("sessionId"), live.get("sessionId")
        if isinstance(r, str) and isinstance(s, str) and r not in b.sessions:
            return b.hand_out(r, s)
    return b
