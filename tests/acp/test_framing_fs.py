"""Sans-I/O pieces: the NDJSON splitter and parser, the stderr ring, and fs confinement."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp import fs
from acp.errors import RpcError
from acp.framing import FrameStats, LineSplitter, parse_frame
from acp.fs import confine, select_lines
from acp.process import StderrRing


def test_splitter_joins_partial_lines() -> None:
    s = LineSplitter(max_line=100)
    assert s.feed(b'{"a":') == []
    assert s.feed(b'1}\n{"b"') == [b'{"a":1}']
    assert s.feed(b":2}\n\n") == [b'{"b":2}', b""]
    assert s.tail() is None


def test_splitter_drops_over_long_lines_and_keeps_going() -> None:
    s = LineSplitter(max_line=10)
    assert s.feed(b"x" * 25) == []
    assert s.feed(b"yyy\nok\n") == [b"ok"]
    assert s.feed(b"z" * 11 + b"\nfine\n") == [b"fine"]
    assert s.oversized == 2


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=20),
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10), big_line=st.sampled_from([0, 5, 1000]))
def test_splitter_matches_a_plain_split_however_the_stream_is_cut(lines: list[bytes], cuts: list[int],
                                                                  big_line: int) -> None:
    """Whole lines out, in order, whatever the chunking (and whether a long line is held as its chunks or in one
    buffer); lines over the limit dropped and counted."""
    limit = 12
    stream = b"".join(line + b"\n" for line in lines)
    splitter = LineSplitter(max_line=limit, big_line=big_line)
    got: list[bytes] = []
    start = 0
    for cut in [*sorted({min(c, len(stream)) for c in cuts}), len(stream)]:
        got += splitter.feed(stream[start:cut])
        start = cut
    assert got == [line for line in lines if len(line) <= limit]
    assert splitter.oversized == sum(len(line) > limit for line in lines)
    assert splitter.tail() is None


def test_parse_counts_noise() -> None:
    stats = FrameStats()
    assert parse_frame(b"hello there", stats) is None
    assert parse_frame(b"[1, 2]", stats) is None
    assert parse_frame(b'{"id": 1}', stats) is None
    assert parse_frame(b'{"jsonrpc": "2.0", "method": "x"}', stats) == {"jsonrpc": "2.0", "method": "x"}
    assert (stats.non_json, stats.non_jsonrpc, stats.frames) == (1, 2, 1)
    assert stats.samples[0].startswith("non_json: hello")


def test_stderr_ring_is_bounded() -> None:
    ring = StderrRing(capacity=100)
    for i in range(1000):
        ring.append(f"line {i}\n".encode())
    assert len(ring.text().encode()) <= 100
    assert ring.tail_lines(1) == ["line 999"]
    assert ring.total_bytes == ring.dropped_bytes + len(ring.text().encode())
    ring.append(b"z" * 500)
    assert ring.text() == "z" * 100


def test_select_lines() -> None:
    text = "a\nb\nc\nd\n"
    assert select_lines(text, None, None) == text
    assert select_lines(text, 2, None) == "b\nc\nd\n"
    assert select_lines(text, 2, 2) == "b\nc\n"
    assert select_lines(text, None, 1) == "a\n"


def test_confine(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside.txt").write_text("secret")
    os.symlink(tmp_path / "outside.txt", root / "link.txt")
    os.symlink(tmp_path, root / "dirlink")
    assert confine(root, str(root / "sub" / "f.txt")) == (root / "sub" / "f.txt").resolve()
    assert confine(root, "sub/f.txt") == (root / "sub" / "f.txt").resolve()
    for bad in ("../outside.txt", str(tmp_path / "outside.txt"), "link.txt", "dirlink/outside.txt",
                str(root / "sub" / ".." / ".." / "outside.txt"), "/etc/passwd"):
        with pytest.raises(RpcError) as info:
            confine(root, bad)
        assert info.value.code == -32602 and "outside the session directory" in info.value.message
    with pytest.raises(RpcError):
        confine(root, "")


def test_a_directory_swapped_for_a_symlink_after_the_check_is_refused(tmp_path: Path) -> None:
    from acp.fs import open_beneath

    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text("secret")
    (root / "sub" / "f.txt").write_text("mine")
    target = confine(root, "sub/f.txt")  # checked while `sub` is a real directory...
    (root / "sub" / "f.txt").unlink()
    (root / "sub").rmdir()
    os.symlink(tmp_path / "outside", root / "sub")  # ...then swapped for a link out of the root
    with pytest.raises(OSError):
        open_beneath(root, target, os.O_RDONLY)
    with pytest.raises(OSError):
        open_beneath(root, target, os.O_WRONLY | os.O_CREAT, create_dirs=True)
    assert (tmp_path / "outside" / "f.txt").read_text() == "secret"


def test_read_write_round_trip_with_new_directories(tmp_path: Path) -> None:
    from acp.fs import read_text_file, write_text_file

    write_text_file(str(tmp_path), "a/b/c.txt", "x\ny\n")
    assert read_text_file(str(tmp_path), str(tmp_path / "a" / "b" / "c.txt"), 2, None) == "y\n"
    with pytest.raises(RpcError) as info:
        read_text_file(str(tmp_path), "a/missing.txt")
    assert info.value.code == -32002


def test_special_files_are_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO with no writer would block an ordinary open forever; a socket or FIFO is no text file."""
    os.mkfifo(tmp_path / "pipe")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "sock"))
    try:
        for name, says in (("pipe", "not a regular file"), ("sock", "No such device")):  # a socket fails its open
            with pytest.raises(RpcError, match=says):
                fs.read_text_file(str(tmp_path), name)
            with pytest.raises(RpcError):
                fs.write_text_file(str(tmp_path), name, "x")
    finally:
        listener.close()
    (tmp_path / "plain.txt").write_text("old and long")
    fs.write_text_file(str(tmp_path), "plain.txt", "new")
    assert fs.read_text_file(str(tmp_path), "plain.txt") == "new"  # truncated only once known to be a file


def test_a_long_line_is_kept_as_it_came_and_an_over_long_one_is_not_held() -> None:
    """A line arriving over many chunks comes out whole; one over the limit is dropped as it streams (nothing of it
    is held past the limit) and the next line comes out as usual."""
    s = LineSplitter(max_line=1000)
    assert [s.feed(b"a" * 100) for _ in range(9)] == [[]] * 9
    assert s.feed(b"a" * 50 + b"\nnext") == [b"a" * 950]
    assert s.feed(b"b" * 2000) == [] and s.oversized == 1  # "next" and these: over the limit
    assert s._pending == 0 and s._parts == []  # dropped, not held
    assert s.feed(b"b" * 5000) == []
    assert s.feed(b"\nafter\n") == [b"after"] and s.oversized == 1
    assert s.tail() is None


def test_errors_to_the_agent_name_paths_relative_to_its_session_directory(tmp_path: Path) -> None:
    """The host's layout is not the agent's business: an error names the path as the agent gave it, or relative to
    the session directory it lies in, and never where a link leads."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    os.mkfifo(root / "sub" / "pipe")
    os.symlink(tmp_path / "elsewhere" / "deep", root / "out")
    cases = [
        (lambda: fs.read_text_file(str(root), str(root / "sub" / "pipe")), "not a regular file: sub/pipe"),
        (lambda: fs.read_text_file(str(root), str(root / "sub" / "missing")), "file not found: sub/missing"),
        (lambda: fs.read_text_file(str(root), "out/x"), "access outside the session directory is refused: out/x"),
        (lambda: fs.write_text_file(str(root), str(root / "sub"), "x"), "cannot write sub:"),
        (lambda: fs.read_text_file(str(root), str(root)), "the session directory itself is not a file"),
    ]
    for call, says in cases:
        with pytest.raises(RpcError) as info:
            call()
        said = str(info.value.to_dict())
        assert says in info.value.message
        assert str(tmp_path) not in said, said


async def test_a_file_system_error_in_a_handler_is_one_log_line_and_a_clear_answer(
        caplog: pytest.LogCaptureFixture) -> None:
    """A peer racing its own files (a directory swapped mid-call) makes the handler's open fail: that is expected,
    so one warning line without a traceback, and an answer that names the failure, not the host's paths."""
    import asyncio

    from acp.jsonrpc import Connection

    async def handler(method: str, params: object) -> object:
        raise NotADirectoryError(20, "Not a directory", "/srv/gateway/state/secret-path")

    reader = asyncio.StreamReader()
    sent: list[bytes] = []
    all_answered = asyncio.Event()

    class Sink:
        def write(self, data: bytes) -> None:
            sent.append(data)
            if len(b"".join(sent).splitlines()) == 50:
                all_answered.set()

        async def drain(self) -> None:
            return None

        def is_closing(self) -> bool:
            return False

        def close(self) -> None:
            return None

    conn = Connection(reader, Sink(), on_request=handler, name="agent x")  # type: ignore[arg-type]
    conn.start()
    for i in range(50):
        reader.feed_data(b'{"jsonrpc":"2.0","id":%d,"method":"fs/read_text_file","params":{}}\n' % i)
    await asyncio.wait_for(all_answered.wait(), 10)
    reader.feed_eof()
    conn.close("done")
    answers = b"".join(sent).splitlines()
    assert all(b"fs/read_text_file failed: Not a directory" in a for a in answers)
    assert not any(b"/srv/gateway" in a for a in answers)
    records = [r for r in caplog.records if "fs/read_text_file failed" in r.getMessage()]
    assert len(records) == 50 and not any(r.exc_info for r in records)
