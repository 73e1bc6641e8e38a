"""An agent host's spool: every line in both directions, on disk, with its offset; bounded in bytes by what the
gateway has not acknowledged (docs/agent-hosts.md, "The spool").

Offsets are per direction and count lines: the agent's first stdout line is offset 1 of `AGENT`, the gateway's first
line to the agent is offset 1 of `GATEWAY` (which is also its sequence number on the wire). 0 means "nothing yet".
A direction's lines live in segment files `<direction>-<first offset>.lines`, each line ending in a newline (an agent
line never holds one: lines are split on it), so the k-th line of a segment is offset `first + k`. A segment is
deleted once every line in it is acknowledged (SP-2); the agent's unacknowledged bytes are the bound: at
`max_bytes` the host stops reading the agent (SP-1, backpressure, never loss). Files are 0600 in a 0700 directory.
File I/O only, synchronous: the host calls it from its one thread, and reads see every append before them.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from array import array
from dataclasses import dataclass, field
from itertools import accumulate, count
from operator import add
from pathlib import Path
from typing import Literal

Direction = Literal["agent", "gateway"]
AGENT: Direction = "agent"
GATEWAY: Direction = "gateway"
DIRECTIONS: tuple[Direction, ...] = (AGENT, GATEWAY)

MIN_SEGMENT_BYTES = 4096


class SpoolError(Exception):
    """A read the spool cannot answer: lines already trimmed, or an offset it never had."""


def reading_paused(unacked_bytes: int, max_bytes: int) -> bool:
    """SP-1: the host reads no more of the agent's stdout while the gateway has not acknowledged `max_bytes` of it.
    A line already being read is finished (a line longer than the bound still passes, alone)."""
    return unacked_bytes >= max_bytes


# SP-3's window: lines the host reads ahead of what it sent its gateway. Counted in lines, not bytes: it paces, it
# bounds nothing (SP-1 bounds the spool in bytes); a 64 KiB pipe holds a few hundred ACP lines, this a few thousand.
SEND_AHEAD_LINES = 4096


def reading_paced(unsent_lines: int | None) -> bool:
    """SP-3: with a gateway attached (`unsent_lines`: the agent's lines spooled and not yet sent to it), the host reads
    the agent only while fewer than SEND_AHEAD_LINES wait to be sent: an agent flooding faster than its gateway reads
    is paced as a pipe would pace it, instead of running ahead and taking the CPU its gateway and subscribers need.
    With none attached (None) only SP-1 applies: the agent works on while no gateway runs."""
    return unsent_lines is not None and unsent_lines >= SEND_AHEAD_LINES


def segment_droppable(first: int, count: int, acked: int) -> bool:
    """SP-2: a segment goes once its last line is at or below the acknowledged offset."""
    return first + count - 1 <= acked


@dataclass
class Segment:
    first: int  # offset of its first line
    count: int  # lines in it
    size: int  # bytes in it, newlines included
    path: Path
    ends: array[int] = field(default_factory=lambda: array("Q"))  # byte position after each line: 8 bytes a line


class _Lane:
    """One direction's segments, oldest first; the last one is appended to."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.fd: int | None = None  # the last segment's, open for appending
        self.head = 0  # offset of the last line written
        self.acked = 0  # offset of the last line acknowledged
        self.bytes = 0  # bytes in every kept segment
        self.acked_in_first = 0  # bytes of the first kept segment at or below `acked`


class Spool:
    def __init__(self, directory: Path, max_bytes: int, segment_bytes: int | None = None) -> None:
        """A new spool in `directory` (created 0700; it must hold no spool already). A segment rolls over at
        `segment_bytes` (default: an eighth of `max_bytes`), so trimming frees the bound in steps of that size."""
        if max_bytes <= 0:
            raise ValueError("spool_max_bytes must be positive")
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = max(MIN_SEGMENT_BYTES, segment_bytes or max_bytes // 8)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)  # an existing directory too: the spool holds the agent's whole conversation
        if any(directory.glob("*.lines")):
            raise SpoolError(f"{directory} already holds a spool")
        self._lanes: dict[Direction, _Lane] = {direction: _Lane() for direction in DIRECTIONS}

    # -- facts -------------------------------------------------------------------------------------------------------
    def head(self, direction: Direction) -> int:
        return self._lanes[direction].head

    def acked(self, direction: Direction) -> int:
        return self._lanes[direction].acked

    def floor(self, direction: Direction) -> int:
        """The lowest offset lines can be read after: everything up to it is trimmed."""
        lane = self._lanes[direction]
        return lane.segments[0].first - 1 if lane.segments else lane.head

    def unacked_bytes(self, direction: Direction = AGENT) -> int:
        lane = self._lanes[direction]
        return lane.bytes - lane.acked_in_first

    def stored_bytes(self) -> int:
        """Bytes on disk, both directions."""
        return sum(lane.bytes for lane in self._lanes.values())

    @property
    def paused(self) -> bool:
        """SP-1 for the agent's lines."""
        return reading_paused(self.unacked_bytes(AGENT), self.max_bytes)

    def files(self) -> list[Path]:
        return [segment.path for lane in self._lanes.values() for segment in lane.segments]

    # -- writing -----------------------------------------------------------------------------------------------------
    def append(self, direction: Direction, lines: list[bytes]) -> int:
        """Writes `lines` (without their newlines) as the next offsets; returns the new head. A segment takes lines
        until it holds `segment_bytes`, then the next one starts: an ack frees the bound in steps of that size."""
        lane = self._lanes[direction]
        start = 0
        while start < len(lines):
            if lane.fd is None or lane.segments[-1].size >= self.segment_bytes:
                self._roll(direction, lane)
            segment = lane.segments[-1]
            # The position after each line (its newline included), in C iterators, not a loop over lines: the host
            # spools every line of a flood. The segment takes lines while it holds less than segment_bytes.
            rest = lines[start:] if start else lines
            ends = list(map(add, accumulate(map(len, rest)), count(segment.size + 1)))
            end = start + min(bisect.bisect_left(ends, self.segment_bytes) + 1, len(rest))
            segment.ends.extend(ends[:end - start])
            data = b"\n".join(lines[start:end]) + b"\n"
            assert lane.fd is not None
            view = memoryview(data)
            while view:  # a regular file takes it whole, unless the disk is full (then OSError, as it should)
                view = view[os.write(lane.fd, view):]
            segment.count += end - start
            segment.size += len(data)
            lane.bytes += len(data)
            lane.head += end - start
            start = end
        return lane.head

    def _roll(self, direction: Direction, lane: _Lane) -> None:
        if lane.fd is not None:
            os.close(lane.fd)
        path = self.directory / f"{direction}-{lane.head + 1:020d}.lines"
        lane.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        lane.segments.append(Segment(lane.head + 1, 0, 0, path))

    def ack(self, direction: Direction, offset: int) -> None:
        """The gateway needs nothing up to `offset` again: whole segments below it go (SP-2). Never moves back;
        an offset past the head is the caller's error (the protocol refuses it first, AH-10)."""
        lane = self._lanes[direction]
        if offset > lane.head:
            raise SpoolError(f"ack {offset} is past the {direction} head {lane.head}")
        if offset <= lane.acked:
            return
        lane.acked = offset
        while lane.segments and segment_droppable(lane.segments[0].first, lane.segments[0].count, offset):
            dropped = lane.segments.pop(0)
            if not lane.segments and lane.fd is not None:  # the one being appended to: the next append rolls
                os.close(lane.fd)
                lane.fd = None
            lane.bytes -= dropped.size
            with contextlib.suppress(FileNotFoundError):
                dropped.path.unlink()
        lane.acked_in_first = 0
        if lane.segments and lane.segments[0].first <= offset:
            lane.acked_in_first = self._position(lane.segments[0], offset)

    # -- reading -----------------------------------------------------------------------------------------------------
    def read_after(self, direction: Direction, offset: int, max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
        """The lines after `offset`, in order, about `max_bytes` of them (at least one when there is one)."""
        data = self.read_block_after(direction, offset, max_bytes)
        if not data:
            return []
        return [(offset + 1 + i, line) for i, line in enumerate(data[:-1].split(b"\n"))]

    def read_block_after(self, direction: Direction, offset: int, max_bytes: int = 1 << 20) -> bytes:
        """`read_after`'s lines as the spool holds them, each ending in its newline (b"" when there is none): the
        first is offset + 1, and there are as many as newlines."""
        lane = self._lanes[direction]
        if offset < self.floor(direction):
            raise SpoolError(f"{direction} lines up to {self.floor(direction)} are trimmed; asked after {offset}")
        if offset > lane.head:
            raise SpoolError(f"{direction} head is {lane.head}; asked after {offset}")
        if offset == lane.head:
            return b""
        index = bisect.bisect_right([s.first for s in lane.segments], offset + 1) - 1
        segment = lane.segments[index]
        start = self._position(segment, offset) if offset >= segment.first else 0
        with open(segment.path, "rb") as file:
            file.seek(start)
            data = file.read(min(max_bytes, segment.size - start))
            while b"\n" not in data:  # one line longer than max_bytes: read to its end
                more = file.read(max(max_bytes, 65536))
                if not more:
                    raise SpoolError(f"{segment.path} ends inside a line")
                data += more
        return data[: data.rindex(b"\n") + 1]

    @staticmethod
    def _position(segment: Segment, offset: int) -> int:
        """The byte position in `segment` just after line `offset` (which is in it)."""
        return segment.ends[offset - segment.first]

    # -- the end -----------------------------------------------------------------------------------------------------
    def close(self) -> None:
        for lane in self._lanes.values():
            if lane.fd is not None:
                os.close(lane.fd)
                lane.fd = None

    def remove(self) -> None:
        """Closes and deletes every segment, and the directory when nothing else is in it."""
        self.close()
        for path in self.files():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        for lane in self._lanes.values():
            lane.segments.clear()
        with contextlib.suppress(OSError):
            self.directory.rmdir()
