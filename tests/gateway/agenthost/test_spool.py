"""The agent host's spool (gateway/agenthost/spool.py): offsets, reads after an offset, the bound in bytes (SP-1) and
trimming by the gateway's acknowledgement (SP-2), file modes."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gateway.agenthost.spool import (
    AGENT,
    GATEWAY,
    MIN_SEGMENT_BYTES,
    SEND_AHEAD_LINES,
    Spool,
    SpoolError,
    reading_paced,
)

pytestmark = pytest.mark.unit


def lines(first: int, count: int, width: int = 100) -> list[bytes]:
    return [f"{n:<{width - 2}}|".encode() for n in range(first, first + count)]  # `width` bytes with the newline


def test_offsets_count_lines_per_direction_and_read_back_after_any(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s", max_bytes=1 << 20, segment_bytes=MIN_SEGMENT_BYTES)
    for start in range(1, 301, 30):  # several appends, several segments
        assert spool.append(AGENT, lines(start, 30)) == start + 29
    assert spool.append(GATEWAY, [b"to the agent"]) == 1
    assert (spool.head(AGENT), spool.head(GATEWAY)) == (300, 1)
    for after in (0, 1, 39, 40, 41, 150, 299):
        got: list[tuple[int, bytes]] = []
        while len(got) < 300 - after:
            got += spool.read_after(AGENT, got[-1][0] if got else after, max_bytes=1000)
        assert got == list(zip(range(after + 1, 301), lines(after + 1, 300 - after), strict=True))
    assert spool.read_after(AGENT, 300) == []
    assert spool.read_after(GATEWAY, 0) == [(1, b"to the agent")]
    with pytest.raises(SpoolError):
        spool.read_after(AGENT, 301)


def test_any_bytes_and_a_line_longer_than_a_read(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s", max_bytes=1 << 20)
    long_line, odd = b"x" * 50_000, b"\xff\x00\r"
    spool.append(AGENT, [odd, long_line, b""])
    assert spool.read_after(AGENT, 0, max_bytes=10) == [(1, odd)]
    assert spool.read_after(AGENT, 1, max_bytes=10)[0] == (2, long_line)  # whole, whatever the read size
    assert spool.read_after(AGENT, 2) == [(3, b"")]


def test_the_bound_counts_unacknowledged_bytes_and_acks_free_them(tmp_path: Path) -> None:
    """SP-1: at the bound the host must stop reading; SP-2: whole segments at or below the ack are deleted."""
    spool = Spool(tmp_path / "s", max_bytes=10_000, segment_bytes=MIN_SEGMENT_BYTES)
    spool.append(AGENT, lines(1, 99))
    assert (spool.unacked_bytes(), spool.paused) == (9_900, False)
    spool.append(AGENT, lines(100, 1))
    assert (spool.unacked_bytes(), spool.paused) == (10_000, True)
    files_before = len(spool.files())
    spool.ack(AGENT, 1)  # inside the first segment: bytes freed from the count, no file deleted yet
    assert (spool.unacked_bytes(), spool.paused, len(spool.files())) == (9_900, False, files_before)
    spool.ack(AGENT, 60)
    assert spool.unacked_bytes() == 4_000
    assert len(spool.files()) < files_before
    assert spool.floor(AGENT) > 0  # the deleted lines cannot be read again
    with pytest.raises(SpoolError):
        spool.read_after(AGENT, 0)
    assert spool.read_after(AGENT, 60)[0] == (61, lines(61, 1)[0])
    spool.ack(AGENT, 30)  # never moves back
    assert spool.acked(AGENT) == 60
    on_disk = sum(path.stat().st_size for path in (tmp_path / "s").iterdir())
    assert on_disk == spool.stored_bytes() < 10_000
    spool.ack(AGENT, 100)
    assert (spool.unacked_bytes(), spool.files(), spool.floor(AGENT)) == (0, [], 100)
    assert spool.append(AGENT, lines(101, 1)) == 101  # a new segment after everything was dropped
    assert spool.read_after(AGENT, 100) == [(101, lines(101, 1)[0])]
    with pytest.raises(SpoolError):
        spool.ack(AGENT, 102)


def test_files_are_the_hosts_alone(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s", max_bytes=1 << 20)
    spool.append(AGENT, [b"a"])
    spool.append(GATEWAY, [b"b"])
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o700
    assert [stat.S_IMODE(path.stat().st_mode) for path in spool.files()] == [0o600, 0o600]
    with pytest.raises(SpoolError):
        Spool(tmp_path / "s", max_bytes=1 << 20)  # a second spool never writes into the first's
    spool.remove()
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(("unsent", "paced"), [
    (None, False),  # no gateway attached: only SP-1 bounds reading
    (0, False), (SEND_AHEAD_LINES - 1, False), (SEND_AHEAD_LINES, True), (10 * SEND_AHEAD_LINES, True),
])
def test_sp3_reading_waits_for_the_attached_gateway(unsent: int | None, paced: bool) -> None:
    assert reading_paced(unsent) is paced
