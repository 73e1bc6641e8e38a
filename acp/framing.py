"""NDJSON framing: split a byte stream into lines, parse each as JSON, count what is not JSON-RPC.

Everything here is sans-I/O: the caller reads chunks (`READ_CHUNK` at a time) and feeds them in.
asyncio's default 64 KiB line limit is a known trap for agents that send whole files in one
update, so the limit is ours (64 MiB by default) and an over-long line is skipped, never fatal.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson

DEFAULT_MAX_LINE = 64 * 1024 * 1024
READ_CHUNK = 256 * 1024
SAMPLE_BYTES = 400  # of a line that is not JSON-RPC, what is kept as a sample
BIG_LINE = 4 * 1024 * 1024  # a line longer than this is received into one buffer, not kept as its chunks


@dataclass
class FrameStats:
    """What the reader saw that was not a JSON-RPC message. Reported, never fatal."""

    frames: int = 0
    non_json: int = 0
    non_jsonrpc: int = 0
    oversized: int = 0
    invalid_utf8: int = 0  # of the non-JSON lines, those refused for not being UTF-8 (ACP's stdio is UTF-8)
    samples: deque[str] = field(default_factory=lambda: deque(maxlen=10))

    def note_noise(self, kind: str, line: bytes) -> None:
        if kind == "non_json":
            self.non_json += 1
        elif kind == "non_jsonrpc":
            self.non_jsonrpc += 1
        else:
            self.oversized += 1
        self.samples.append(f"{kind}: {line[:200].decode('utf-8', 'replace')}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "non_json": self.non_json,
            "non_jsonrpc": self.non_jsonrpc,
            "oversized": self.oversized,
            "samples": list(self.samples),
        }


class LineSplitter:
    """Sans-I/O line splitter with a maximum line length; over-long lines are reported and dropped.

    Linear in the bytes fed: a line still being received is kept as the chunks it came in (joined once, when its
    newline arrives), each chunk is searched once, and an over-long line is dropped as it streams, never held
    (re-joining the partial line on every chunk made a 16 MB line cost seconds of the event loop)."""

    def __init__(self, max_line: int = DEFAULT_MAX_LINE, stats: FrameStats | None = None,
                 big_line: int = BIG_LINE) -> None:
        self.max_line = max_line
        self.big_line = big_line
        self.stats = stats
        # The line being received: its chunks, until it is long enough to be kept in one growing buffer (joining
        # chunks at the end held a long line twice: its parts and the joined copy).
        self._parts: list[bytes] = []
        self._big: bytearray | None = None
        self._pending = 0  # its length
        self._discarding = False  # inside an over-long line: dropped up to its newline
        self.oversized = 0

    def feed(self, data: bytes) -> list[bytes]:
        data = bytes(data)
        if self._discarding:
            nl = data.find(b"\n")
            if nl < 0:
                return []
            self._discarding = False
            data = data[nl + 1:]
        nl = data.find(b"\n")
        if nl < 0:
            self._hold(data)
            return []
        lines: list[bytes] = []
        if self._big is not None:  # parsed as it is (orjson reads a bytearray): never copied once more
            self._big += data[:nl]
            first: bytes = self._big  # type: ignore[assignment]
        else:
            first = b"".join((*self._parts, data[:nl])) if self._parts else data[:nl]
        self._parts, self._big, self._pending = [], None, 0
        self._keep(first, lines)
        rest = data[nl + 1:].split(b"\n")  # in C: a flood is hundreds of thousands of lines a second
        tail = rest.pop()
        if len(data) - nl > self.max_line:  # only a chunk longer than a line can hold an over-long one
            for line in rest:
                self._keep(line, lines)
        else:
            lines += rest
        self._hold(tail)
        return lines

    def _keep(self, line: bytes, lines: list[bytes]) -> None:
        if len(line) <= self.max_line:
            lines.append(line)
        else:
            self._oversized(line[:200])

    def _hold(self, piece: bytes) -> None:
        """Part of a line whose newline has not come yet: kept, unless the line is over-long by now."""
        if not piece:
            return
        if self._pending + len(piece) > self.max_line:
            head = bytes(self._big[:200]) if self._big is not None else (self._parts[0] if self._parts else piece)[:200]
            self._oversized(head)
            self._parts, self._big, self._pending, self._discarding = [], None, 0, True
            return
        self._pending += len(piece)
        if self._big is not None:
            self._big += piece
        elif self._pending > self.big_line:
            self._big = bytearray().join((*self._parts, piece))
            self._parts = []
        else:
            self._parts.append(piece)

    def _oversized(self, head: bytes) -> None:
        self.oversized += 1
        if self.stats is not None:
            self.stats.note_noise("oversized", bytes(head))

    def tail(self) -> bytes | None:
        """What is left after EOF: a final line without a newline, if any."""
        if self._discarding or not (self._parts or self._big):
            return None
        return bytes(self._big) if self._big is not None else b"".join(self._parts)


def parse_frame(line: bytes, stats: FrameStats) -> dict[str, Any] | None:
    """Parse one line; return the JSON-RPC message or None (counted in `stats`) when it is not one."""
    try:
        # A JSON-RPC message is an object: anything else is noise, told without parsing it (orjson sets aside a
        # buffer the size of its input, so a 64 MiB line of junk would cost 64 MiB more just to be refused).
        # The length first: the head's copy is only made for a long line (a flood's short lines skip it).
        if len(line) > SAMPLE_BYTES and not bytes(line[:SAMPLE_BYTES]).lstrip().startswith(b"{"):
            raise orjson.JSONDecodeError("not an object", "", 0)
        msg = orjson.loads(line)  # JSON allows the whitespace around it (a CR before the LF, say)
    except orjson.JSONDecodeError as exc:
        if "UTF-8" in str(exc):
            stats.invalid_utf8 += 1
        # Only its head is looked at: the line may be 64 MiB, and a copy of it stripped would cost that again.
        if len(line) > SAMPLE_BYTES or line.strip():  # a blank line is no noise
            stats.note_noise("non_json", bytes(line[:SAMPLE_BYTES]).strip())
        return None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        stats.note_noise("non_jsonrpc", bytes(line[:SAMPLE_BYTES]).strip())
        return None
    stats.frames += 1
    return msg


def encode_frame(msg: dict[str, Any]) -> bytes:
    return orjson.dumps(msg) + b"\n"
