"""The wire between an agent host and the gateway, and the host's decisions on it: pure rules with ids (AH-…, LG-…),
tested by the table in tests/gateway/agenthost/test_protocol.py; docs/agent-hosts.md, "The wire", says the same.

Frames are one JSON object per line, `t` naming the kind. A line of the agent or of the gateway travels as `line`
(a JSON string) when it is valid UTF-8 — every ACP line is — and as `b64` otherwise, so any bytes pass unchanged.
A gateway whose hello says `raw: true` is sent the agent's lines as raw batches instead: a header line, `>` then
the first line's offset and the number of lines in decimal, then that many lines exactly as the agent wrote them (a
line holds no newline, so any bytes pass). Nothing is escaped on either side and nothing of a line is looked into:
the gateway takes a batch's lines as one slice of what it split (`AgentLines`). A host that does not know `raw` (an
older version) sends JSON frames; the gateway reads both.
No I/O here: the host (`host.py`) and the client (`client.py`) perform what these functions decide.

The agent's terminals (`terminal/*`) run in its host too (TM-…): the gateway decides what a terminal runs (its
policy, `gateway/runtime/terminals.py`) and tells the host, which starts it as its own child, keeps its output and
streams it; so a terminal outlives the gateway as its agent does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Literal

import orjson

# Gateway -> host
HELLO, LINE, ACK, STDERR, STOP, RELEASE, STATUS = "hello", "line", "ack", "stderr", "stop", "release", "status"
TERM_START, TERM_KILL, TERM_RELEASE = "term_start", "term_kill", "term_release"
FILE = "file"  # a file read or written for the agent, where it runs (FS-1); answered FILE_DONE
# Host -> gateway (and LINE, STDERR, STATUS)
WELCOME, REFUSED, WRITTEN, EXIT = "welcome", "refused", "written", "exit"
SUPERSEDED, VIOLATION = "superseded", "violation"
FILE_DONE = "file_done"
TERM_STARTED, TERM_FAILED, TERM_OUTPUT, TERM_EXIT, TERM_RELEASED = (
    "term_started", "term_failed", "term_output", "term_exit", "term_released")
TERMINAL_FRAMES = frozenset({TERM_OUTPUT, TERM_EXIT})  # a terminal's own news, as it happens
TERMINAL_ANSWERS = frozenset({TERM_STARTED, TERM_FAILED, TERM_RELEASED})  # answers to the gateway, by terminal id

# Every rule, by id: the docs and the test table use the same ids.
RULES: dict[str, str] = {
    "AH-1": "a hello with the wrong secret is refused",
    "AH-2": "a hello from an incarnation older than the newest one accepted is refused",
    "AH-3": "a hello from the newest incarnation (or a newer one) wins: the attached connection is superseded",
    "AH-4": "a hello whose committed offset is past the spool's head is refused",
    "AH-5": "a hello whose committed offset is below what the spool still holds is refused",
    "AH-6": "a hello accepted: the agent's lines after the committed offset are replayed, then live ones follow",
    "AH-7": "a first frame that is not a well-formed hello is refused",
    "AH-8": "a gateway line whose sequence number was already written is dropped, not written again",
    "AH-9": "the gateway line with the next sequence number is written to the agent",
    "AH-10": "a gateway line past the next sequence number (a gap) is a violation: the connection is closed",
    "AH-11": "an ack past the spool's head is a violation: the connection is closed",
    "AH-12": "an ack at or below the acknowledged offset changes nothing",
    "AH-13": "a malformed or unknown frame after the hello is a violation: the connection is closed",
    "LG-1": "no gateway attached for `linger` seconds: the agent's tree is stopped and the host exits",
    "LG-2": "the attached gateway releases the host: the agent's tree is stopped (if running) and the host exits",
    "LG-3": "the agent exited: the host keeps its lines and exit for the gateway until LG-1 or LG-2",
    "FS-1": "a `file` frame (op read or write) is served by the host under its spec's `files_root` by the client's "
            "file rules (acp/fs.py: resolved inside it, opened without following a link, never a hard-linked "
            "file, never under `files_never`), answered `file_done` with its id: `content` (read), nothing (write), "
            "or `error` {code, message, data}; a host without `files_root` answers an error. Its welcome says "
            "`files: true` when it serves them (a gateway sends none to a host that does not)",
    "TM-1": "a `term_start` runs what it says (argv, cwd, env, descriptors' contents) as the host's child, in a "
            "process group of its own, killed when the host dies: answered `term_started` with its pid, or "
            "`term_failed` with why",
    "TM-2": "a `term_start` for a terminal id the host holds already is refused (`term_failed`): nothing is started",
    "TM-3": "a terminal's output is kept in a buffer of its limit (cut from its beginning at a character boundary) "
            "and sent as `term_output` to the attached gateway as it is read; with none attached it is only kept",
    "TM-4": "a terminal's exit is sent (`term_exit`) once its output is read; a welcome lists every terminal not "
            "released: its pid, its output kept, its exit",
    "TM-5": "`term_kill` kills the terminal's process group; `term_release` kills its whole tree and forgets it, "
            "answered `term_released` (an id the host does not hold too)",
    "TM-6": "the agent's tree stopped (`stop`, LG-1, LG-2) or the agent exited: every terminal's tree is killed; its "
            "output and exit stay until it is released",
    "TM-7": "a gateway that attached again publishes of a terminal's output what its mark had not, as far as the host "
            "still holds it and within the published cap; its exit once",
}


class FrameError(ValueError):
    """A line that is not a frame."""


def secret_hash(secret: str) -> str:
    """What the host keeps of the per-execution secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def secret_matches(presented: str, kept_hash: str) -> bool:
    return hmac.compare_digest(secret_hash(presented).encode(), kept_hash.encode())


# -- frames ----------------------------------------------------------------------------------------------------------
def encode(frame: dict[str, Any]) -> bytes:
    return orjson.dumps(frame) + b"\n"


RAW_BATCH = b">"  # a raw batch header's first byte (JSON frames start with `{`)


def encode_raw_batch(first: int, block: bytes) -> bytes:
    """The agent's consecutive lines from offset `first`, each ending in its newline (as the spool holds them), as
    one raw batch: its header, then the lines."""
    return b">%d %d\n" % (first, block.count(b"\n")) + block


def raw_batch(header: bytes) -> tuple[int, int]:
    """A raw batch header's first offset and line count."""
    first, space, count = header[1:].partition(b" ")
    if not space or not first.isdigit() or not count.isdigit() or int(count) == 0:
        raise FrameError("a raw batch header is `>`, the first line's offset, a space and its line count (at least 1)")
    return int(first), int(count)


class AgentLines:
    """Sans-I/O: a connection's lines as split, in; the agent's lines (as runs of consecutive offsets, each a slice of
    the lines given) and the other frames (decoded), out, in order. A batch may end in a later read than its header:
    the lines it still owes are taken from the next."""

    def __init__(self) -> None:
        self._owed = 0  # lines of the current batch not yet seen
        self._next = 0  # the offset of the next of them

    def feed(self, lines: list[bytes]) -> list[tuple[int, list[bytes]] | dict[str, Any]]:
        out: list[tuple[int, list[bytes]] | dict[str, Any]] = []
        i, n = 0, len(lines)
        while i < n:
            if self._owed:
                take = min(self._owed, n - i)
                out.append((self._next, lines[i:i + take]))
                self._next += take
                self._owed -= take
                i += take
                continue
            line = lines[i]
            i += 1
            if line[:1] == RAW_BATCH:
                self._next, self._owed = raw_batch(line)
            else:
                out.append(decode(line))
        return out


def decode(line: bytes) -> dict[str, Any]:
    try:
        frame = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"not JSON: {exc}") from exc
    if not isinstance(frame, dict) or not isinstance(frame.get("t"), str):
        raise FrameError("a frame is a JSON object with a string `t`")
    return frame


def carry(data: bytes) -> dict[str, str]:
    """The field a line travels in: `line` when it is UTF-8, else `b64`."""
    try:
        return {"line": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def carried(frame: dict[str, Any]) -> bytes:
    """The line a frame carries (`carry`'s inverse)."""
    text = frame.get("line")
    if isinstance(text, str):
        return text.encode("utf-8")
    packed = frame.get("b64")
    if isinstance(packed, str):
        try:
            return base64.b64decode(packed, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise FrameError("`b64` is not base64") from exc
    raise FrameError("a line frame carries `line` or `b64`")


def _count(value: Any) -> int | None:
    """A non-negative integer (bools are not), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class LineSplitter:
    """Bytes in, whole lines out (without their newlines); any length, any bytes."""

    def __init__(self) -> None:
        self._partial: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\n" not in chunk:
            if chunk:
                self._partial.append(chunk)
            return []
        lines = chunk.split(b"\n")
        if self._partial:
            lines[0] = b"".join([*self._partial, lines[0]])
            self._partial = []
        if lines[-1]:
            self._partial.append(lines[-1])
        return lines[:-1]

    def tail(self) -> bytes | None:
        """What came after the last newline, at the end of the stream (an agent's unterminated last line)."""
        data = b"".join(self._partial)
        self._partial = []
        return data or None


# -- the hello -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostFacts:
    """What the host knows when a hello arrives."""

    secret_hash: str
    newest_incarnation: int | None  # of the hellos accepted so far
    attached: bool  # a gateway connection is attached now
    head: int  # offset of the agent's last spooled line
    floor: int  # the spool can replay the agent's lines after this offset only


@dataclass(frozen=True)
class Hello:
    secret: str
    incarnation: int
    committed: int  # offset of the last agent line whose effects the gateway committed
    raw: bool = False  # the agent's lines go to it as raw batches


@dataclass(frozen=True)
class Verdict:
    rule: str
    accepted: bool
    reason: str
    supersede: bool = False  # the attached connection is told `superseded` and closed


def parse_hello(frame: dict[str, Any]) -> Hello | None:
    if frame.get("t") != HELLO or not isinstance(frame.get("secret"), str):
        return None
    incarnation, committed = _count(frame.get("incarnation")), _count(frame.get("committed"))
    if incarnation is None or committed is None:
        return None
    return Hello(frame["secret"], incarnation, committed, frame.get("raw") is True)


def decide_hello(frame: dict[str, Any], facts: HostFacts) -> tuple[Verdict, Hello | None]:
    """Whether a connection's first frame attaches it. The secret is checked before anything else is said."""
    hello = parse_hello(frame)
    if hello is None:
        return Verdict("AH-7", False, "the first frame must be a hello with secret, incarnation and committed"), None
    if not secret_matches(hello.secret, facts.secret_hash):
        return Verdict("AH-1", False, "wrong secret"), None
    if facts.newest_incarnation is not None and hello.incarnation < facts.newest_incarnation:
        return Verdict("AH-2", False, f"incarnation {hello.incarnation} is older than "
                                      f"{facts.newest_incarnation}, already attached"), None
    if hello.committed > facts.head:
        return Verdict("AH-4", False, f"committed offset {hello.committed} is past the spool's head {facts.head}"), None
    if hello.committed < facts.floor:
        return Verdict("AH-5", False, f"committed offset {hello.committed} is below the spool's floor {facts.floor}: "
                                      "those lines were acknowledged and dropped"), None
    if facts.attached:
        return Verdict("AH-3", True, "a newer attach wins", supersede=True), hello
    return Verdict("AH-6", True, "attached"), hello


def welcome(head: int, written: int, host_pid: int, agent_pid: int, exit_code: int | None,
            terminals: list[dict[str, Any]] | None = None, files: bool = False) -> dict[str, Any]:
    """The answer to an accepted hello: the agent's head, the last gateway line written to the agent (resend the
    ones after it), the processes, the agent's exit status when it already exited, and its terminals (TM-4:
    `terminal_report` each)."""
    return {"t": WELCOME, "head": head, "written": written, "host_pid": host_pid, "agent_pid": agent_pid,
            "exit": exit_code, "terminals": terminals or [], **({"files": True} if files else {})}


def refused(verdict: Verdict) -> dict[str, Any]:
    return {"t": REFUSED, "rule": verdict.rule, "reason": verdict.reason}


def violation(rule: str, reason: str) -> dict[str, Any]:
    return {"t": VIOLATION, "rule": rule, "reason": reason}


# -- after the hello -------------------------------------------------------------------------------------------------
GatewayLineAction = Literal["write", "drop", "violation"]


def decide_gateway_line(seq: int, written: int) -> tuple[str, GatewayLineAction]:
    """What the host does with the gateway's line `seq` when lines up to `written` reached the agent."""
    if seq <= written:
        return "AH-8", "drop"
    if seq == written + 1:
        return "AH-9", "write"
    return "AH-10", "violation"


AckAction = Literal["trim", "nothing", "violation"]


def decide_ack(offset: int, acked: int, head: int) -> tuple[str, AckAction]:
    if offset > head:
        return "AH-11", "violation"
    if offset <= acked:
        return "AH-12", "nothing"
    return "AH-6", "trim"


@dataclass(frozen=True)
class TermStart:
    """What a terminal runs, as the gateway's policy decided it (TM-1): the host adds nothing of its own."""

    id: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    limit: int  # output bytes kept
    shown: str  # the command as the agent asked for it, for people
    marker: str | None = None  # the entry of `env` every process of the terminal carries: its tree
    fds: tuple[tuple[int, bytes], ...] = ()  # descriptors the command is handed: (number, what it holds from 0)
    rate: float | None = None  # bytes a second its output is read at (the session's), None: as fast as it comes


@dataclass(frozen=True)
class Request:
    """A frame after the hello, checked: what the host must do."""

    kind: str
    seq: int = 0  # LINE
    data: bytes = b""  # LINE
    offset: int = 0  # ACK: the agent's lines
    sent: int | None = None  # ACK: the gateway's lines it no longer needs in the spool
    lines: int = 20  # STDERR
    grace: float | None = None  # STOP
    terminal_id: str = ""  # TERM_*
    start: TermStart | None = None  # TERM_START
    file: FileRequest | None = None  # FILE


@dataclass(frozen=True)
class FileRequest:
    """A `file` frame, checked (FS-1)."""

    id: str
    op: Literal["read", "write"]
    path: str
    line: int | None = None
    limit: int | None = None
    content: str = ""


def parse_file(frame: dict[str, Any]) -> FileRequest:
    file_id, op, path = _terminal_id(frame), frame.get("op"), frame.get("path")
    if op not in ("read", "write") or not isinstance(path, str) or not path:
        raise FrameError("a file frame needs `op` (read or write) and `path`")
    line, limit, content = frame.get("line"), frame.get("limit"), frame.get("content", "")
    if any(v is not None and _count(v) is None for v in (line, limit)) or not isinstance(content, str):
        raise FrameError("a file frame's `line` and `limit` are counts, its `content` a string")
    return FileRequest(file_id, op, path, line, limit, content)


TERMINAL_ID_MAX = 200


def _terminal_id(frame: dict[str, Any]) -> str:
    terminal_id = frame.get("id")
    if not isinstance(terminal_id, str) or not 0 < len(terminal_id) <= TERMINAL_ID_MAX:
        raise FrameError(f"a terminal frame needs `id`, a string of 1 to {TERMINAL_ID_MAX} characters")
    return terminal_id


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def parse_term_start(frame: dict[str, Any]) -> TermStart:
    """A `term_start`'s fields, checked (FrameError: AH-13)."""
    terminal_id = _terminal_id(frame)
    argv, cwd, env, limit = frame.get("argv"), frame.get("cwd"), frame.get("env"), _count(frame.get("limit"))
    if not _strings(argv) or not argv:
        raise FrameError("`argv` is a non-empty list of strings")
    if not isinstance(cwd, str) or not isinstance(env, dict) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise FrameError("`cwd` is a string and `env` an object of strings")
    if limit is None or not isinstance(frame.get("shown", ""), str):
        raise FrameError("`limit` is a count of bytes and `shown` a string")
    marker, rate = frame.get("marker"), frame.get("rate")
    if marker is not None and (not isinstance(marker, str) or marker not in env):
        raise FrameError("`marker` names an entry of `env`")
    if rate is not None and (not isinstance(rate, int | float) or isinstance(rate, bool) or rate <= 0):
        raise FrameError("`rate` is bytes a second")
    fds: list[tuple[int, bytes]] = []
    for item in frame.get("fds") or []:
        if not isinstance(item, list) or len(item) != 2 or _count(item[0]) is None or item[0] < 3:
            raise FrameError("`fds` holds [number >= 3, contents] pairs")
        if not isinstance(item[1], str):
            raise FrameError("a descriptor's contents are base64")
        fds.append((item[0], carried({"b64": item[1]})))
    return TermStart(terminal_id, list(argv), cwd, dict(env), limit, frame.get("shown", ""), marker, tuple(fds),
                     float(rate) if rate is not None else None)


def term_start_frame(start: TermStart) -> dict[str, Any]:
    """`parse_term_start`'s inverse: what the gateway sends."""
    frame: dict[str, Any] = {"t": TERM_START, "id": start.id, "argv": start.argv, "cwd": start.cwd, "env": start.env,
                             "limit": start.limit, "shown": start.shown,
                             "fds": [[fd, base64.b64encode(data).decode("ascii")] for fd, data in start.fds]}
    if start.marker is not None:
        frame["marker"] = start.marker
    if start.rate is not None:
        frame["rate"] = start.rate
    return frame


def parse_request(frame: dict[str, Any]) -> Request:
    """A frame from an attached gateway, or FrameError (AH-13)."""
    kind = frame.get("t")
    if kind == LINE:
        seq = _count(frame.get("seq"))
        if seq is None or seq == 0:
            raise FrameError("a line needs `seq` >= 1")
        return Request(LINE, seq=seq, data=carried(frame))
    if kind == ACK:
        offset, sent = _count(frame.get("offset")), frame.get("sent")
        if offset is None or (sent is not None and _count(sent) is None):
            raise FrameError("an ack needs `offset` >= 0 (and `sent` >= 0 if given)")
        return Request(ACK, offset=offset, sent=sent)
    if kind == STDERR:
        lines = _count(frame.get("lines", 20))
        if lines is None:
            raise FrameError("`lines` is a count")
        return Request(STDERR, lines=lines)
    if kind == STOP:
        grace = frame.get("grace")
        if grace is not None and (not isinstance(grace, int | float) or isinstance(grace, bool) or grace < 0):
            raise FrameError("`grace` is seconds")
        return Request(STOP, grace=float(grace) if grace is not None else None)
    if kind in (RELEASE, STATUS):
        return Request(kind)
    if kind == TERM_START:
        start = parse_term_start(frame)
        return Request(TERM_START, terminal_id=start.id, start=start)
    if kind in (TERM_KILL, TERM_RELEASE):
        return Request(kind, terminal_id=_terminal_id(frame))
    if kind == FILE:
        return Request(FILE, file=parse_file(frame))
    raise FrameError(f"unknown frame {kind!r}")


# -- the host's life -------------------------------------------------------------------------------------------------
Life = Literal["serve", "end"]


def decide_life(*, released: bool, attached: bool, detached_for: float, linger: float) -> tuple[str, Life]:
    """Whether the host goes on. `detached_for`: seconds since the last gateway left (or since the host started)."""
    if released:
        return "LG-2", "end"
    if not attached and detached_for >= linger:
        return "LG-1", "end"
    return "LG-3", "serve"


# -- terminals -------------------------------------------------------------------------------------------------------
def decide_term_start(terminal_id: str, held: set[str] | frozenset[str]) -> tuple[str, bool]:
    """Whether the host starts a terminal under this id (TM-1), or refuses it: the id is taken (TM-2)."""
    if terminal_id in held:
        return "TM-2", False
    return "TM-1", True


def unseen_output(marked: int, total: int, held: int, cap: int) -> tuple[str, int, int]:
    """TM-7: which bytes of a terminal's output a gateway that attached again publishes, as offsets into everything
    it wrote (`start`, `end`; nothing when equal). `marked`: the bytes its published events held at the last commit
    (the journal's mark); `total`: the bytes the terminal wrote; `held`: the last ones the host still keeps (its
    buffer); `cap`: the bytes of a terminal's output ever published. Bytes the host no longer holds are not
    published (the events skip them: `terminal_exited` says the stream is incomplete)."""
    end = min(total, cap)
    start = min(max(marked, total - held), end)
    return "TM-7", start, end
