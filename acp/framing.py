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


@dataclass
class FrameStats:
    """What the reader saw that was not a JSON-RPC message. Reported, never fatal."""

    frames: int = 0
    non_json: int = 0
    non_jsonrpc: int = 0
    oversized: int = 0
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
    """Sans-I/O line splitter with a maximum line length; over-long lines are reported and dropped."""

    def __init__(self, max_line: int = DEFAULT_MAX_LINE, stats: FrameStats | None = None) -> None:
        self.max_line = max_line
        self.stats = stats
        self._buf = bytearray()
        self._discarding = False
        self.oversized = 0

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        if not self._discarding and len(buf) + len(data) <= self.max_line:
            # No line in here can be over-long: split in C, not line by line in Python (a flood is
            # hundreds of thousands of lines a second).
            lines = (bytes(buf) + data if buf else data).split(b"\n")
            buf[:] = lines.pop()
            return lines
        lines = []
        buf += data
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            if self._discarding:
                self._discarding = False
            elif nl - start <= self.max_line:
                lines.append(bytes(buf[start:nl]))
            else:
                self._oversized(buf[start : start + 200])
            start = nl + 1
        del buf[:start]
        if len(buf) > self.max_line:
            if not self._discarding:
                self._oversized(buf[:200])
            self._discarding = True
            buf.clear()
        return lines

    def _oversized(self, head: bytearray) -> None:
        self.oversized += 1
        if self.stats is not None:
            self.stats.note_noise("oversized", bytes(head))

    def tail(self) -> bytes | None:
        """What is left after EOF: a final line without a newline, if any."""
        if self._discarding or not self._buf:
            return None
        return bytes(self._buf)


def parse_frame(line: bytes, stats: FrameStats) -> dict[str, Any] | None:
    """Parse one line; return the JSON-RPC message or None (counted in `stats`) when it is not one."""
    try:
        msg = orjson.loads(line)  # JSON allows the whitespace around it (a CR before the LF, say)
    except orjson.JSONDecodeError:
        stripped = line.strip()
        if stripped:  # a blank line is no noise
            stats.note_noise("non_json", stripped)
        return None
    if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
        stats.note_noise("non_jsonrpc", line.strip())
        return None
    stats.frames += 1
    return msg


def encode_frame(msg: dict[str, Any]) -> bytes:
    return orjson.dumps(msg) + b"\n"
