"""The agent host's wire rules (gateway/agenthost/protocol.py), by id: the table docs/agent-hosts.md describes."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.agenthost import protocol
from gateway.agenthost.protocol import FrameError, HostFacts, LineSplitter

pytestmark = pytest.mark.unit

SECRET = "s3cret-for-the-table"
FACTS = HostFacts(protocol.secret_hash(SECRET), newest_incarnation=5, attached=True, head=100, floor=40)


def hello(secret: str = SECRET, incarnation: Any = 5, committed: Any = 50) -> dict[str, Any]:
    return {"t": "hello", "secret": secret, "incarnation": incarnation, "committed": committed}


HELLOS = [
    # (case, frame, facts, rule, accepted, supersede)
    ("wrong secret", hello(secret="guess"), FACTS, "AH-1", False, False),
    ("wrong secret is said before a stale incarnation", hello(secret="guess", incarnation=1), FACTS, "AH-1", False,
     False),
    ("an older incarnation", hello(incarnation=4), FACTS, "AH-2", False, False),
    ("the same incarnation again (a reconnect) wins", hello(incarnation=5), FACTS, "AH-3", True, True),
    ("a newer incarnation wins", hello(incarnation=6), FACTS, "AH-3", True, True),
    ("committed past the head", hello(committed=101), FACTS, "AH-4", False, False),
    ("committed at the head", hello(committed=100), FACTS, "AH-3", True, True),
    ("committed below the floor", hello(committed=39), FACTS, "AH-5", False, False),
    ("committed at the floor", hello(committed=40), FACTS, "AH-3", True, True),
    ("nobody attached", hello(), HostFacts(FACTS.secret_hash, 5, False, 100, 40), "AH-6", True, False),
    ("the first hello ever", hello(incarnation=0, committed=0), HostFacts(FACTS.secret_hash, None, False, 0, 0),
     "AH-6", True, False),
    ("not a hello", {"t": "ack", "offset": 3}, FACTS, "AH-7", False, False),
    ("no frame at all", {}, FACTS, "AH-7", False, False),
    ("a negative offset", hello(committed=-1), FACTS, "AH-7", False, False),
    ("a boolean incarnation", hello(incarnation=True), FACTS, "AH-7", False, False),
    ("a secret that is no string", {**hello(), "secret": 7}, FACTS, "AH-7", False, False),
]


@pytest.mark.parametrize("case,frame,facts,rule,accepted,supersede", HELLOS, ids=[row[0] for row in HELLOS])
def test_hello_rules(case: str, frame: dict[str, Any], facts: HostFacts, rule: str, accepted: bool,
                     supersede: bool) -> None:
    verdict, parsed = protocol.decide_hello(frame, facts)
    assert (verdict.rule, verdict.accepted, verdict.supersede) == (rule, accepted, supersede)
    assert (parsed is not None) == accepted
    assert SECRET not in verdict.reason and "guess" not in verdict.reason  # a refusal never repeats a secret


@pytest.mark.parametrize("seq,written,rule,action", [
    (3, 5, "AH-8", "drop"), (5, 5, "AH-8", "drop"), (6, 5, "AH-9", "write"), (1, 0, "AH-9", "write"),
    (7, 5, "AH-10", "violation"),
])
def test_gateway_line_rules(seq: int, written: int, rule: str, action: str) -> None:
    assert protocol.decide_gateway_line(seq, written) == (rule, action)


@pytest.mark.parametrize("offset,acked,head,rule,action", [
    (11, 5, 10, "AH-11", "violation"), (5, 5, 10, "AH-12", "nothing"), (3, 5, 10, "AH-12", "nothing"),
    (10, 5, 10, "AH-6", "trim"),
])
def test_ack_rules(offset: int, acked: int, head: int, rule: str, action: str) -> None:
    assert protocol.decide_ack(offset, acked, head) == (rule, action)


@pytest.mark.parametrize("released,attached,detached_for,linger,rule,life", [
    (True, True, 0.0, 10.0, "LG-2", "end"),
    (False, False, 10.0, 10.0, "LG-1", "end"),
    (False, False, 9.9, 10.0, "LG-3", "serve"),
    (False, True, 1000.0, 10.0, "LG-3", "serve"),  # attached: the clock does not run
])
def test_life_rules(released: bool, attached: bool, detached_for: float, linger: float, rule: str, life: str) -> None:
    assert protocol.decide_life(released=released, attached=attached, detached_for=detached_for,
                                linger=linger) == (rule, life)


@pytest.mark.parametrize("frame", [
    {"t": "line", "seq": 0, "line": "x"}, {"t": "line", "seq": 1}, {"t": "line", "seq": 1, "b64": "%%%"},
    {"t": "ack"}, {"t": "ack", "offset": 1, "sent": -1}, {"t": "stderr", "lines": "all"},
    {"t": "stop", "grace": -1}, {"t": "dance"},
])
def test_a_malformed_request_is_a_violation(frame: dict[str, Any]) -> None:
    """AH-13."""
    with pytest.raises(FrameError):
        protocol.parse_request(frame)


@pytest.mark.parametrize("data", [b'{"jsonrpc":"2.0","method":"x"}', "ünïcødé ✓".encode(), b"\xff\xfe not utf-8",
                                  b"", b"\x00\r\t"])
def test_a_line_travels_unchanged(data: bytes) -> None:
    frame = protocol.decode(protocol.encode({"t": "line", "offset": 1, **protocol.carry(data)}))
    assert protocol.carried(frame) == data
    assert ("line" in frame) == (data != b"\xff\xfe not utf-8")


RAW_LINES = [b'{"jsonrpc":"2.0","method":"x"}', "ünïcødé ✓".encode(), b"\xff\xfe not utf-8", b"", b"\x00\r\t",
             b">7 1", b'{"t":"exit","code":0}', b" leading space"]


def split(data: bytes, cuts: list[int]) -> list[list[bytes]]:
    """`data` as a connection's reads cut at `cuts`, each split into whole lines (LineSplitter)."""
    splitter, reads, start = LineSplitter(), [], 0
    for cut in [*cuts, len(data)]:
        reads.append(splitter.feed(data[start:cut]))
        start = cut
    return reads


@pytest.mark.parametrize("cuts", [[], [1], [5], [9, 20, 21], list(range(1, 140, 3))])
def test_a_raw_batch_carries_any_lines_unchanged_however_its_reads_are_cut(cuts: list[int]) -> None:
    """Lines that look like headers or JSON frames inside a batch are the agent's; frames around it are decoded."""
    block = b"".join(line + b"\n" for line in RAW_LINES)
    data = (protocol.encode({"t": "written", "seq": 3}) + protocol.encode_raw_batch(12, block)
            + protocol.encode({"t": "exit", "code": 0, "head": 19}))
    reader = protocol.AgentLines()
    items = [item for read in split(data, cuts) for item in reader.feed(read)]
    frames = [item for item in items if isinstance(item, dict)]
    runs = [item for item in items if isinstance(item, tuple)]
    assert [f["t"] for f in frames] == ["written", "exit"]
    assert [(offset, line) for first, lines in runs for offset, line in enumerate(lines, first)] == \
        list(enumerate(RAW_LINES, 12))
    assert items.index(frames[1]) == len(items) - 1  # the exit after every line


@pytest.mark.parametrize("header", [b">", b">12", b"> 12 1", b">x 1", b">-1 1", b">1.5 1", b">1 0", b">1 x"])
def test_a_malformed_raw_batch_header_is_refused(header: bytes) -> None:
    with pytest.raises(FrameError):
        protocol.AgentLines().feed([header])


@pytest.mark.parametrize(("frame", "raw"), [
    ({"t": "hello", "secret": "s", "incarnation": 1, "committed": 0}, False),
    ({"t": "hello", "secret": "s", "incarnation": 1, "committed": 0, "raw": True}, True),
    ({"t": "hello", "secret": "s", "incarnation": 1, "committed": 0, "raw": 1}, False),
])
def test_a_hello_asks_for_raw_frames_only_with_true(frame: dict[str, Any], raw: bool) -> None:
    hello = protocol.parse_hello(frame)
    assert hello is not None and hello.raw is raw


def test_every_rule_id_is_in_the_docs() -> None:
    from tests.support.paths import REPO

    text = (REPO / "docs" / "agent-hosts.md").read_text()
    assert [rule for rule in protocol.RULES if f"| {rule} |" not in text] == []


def test_the_splitter_keeps_any_line_whole() -> None:
    splitter = protocol.LineSplitter()
    assert splitter.feed(b"ab") == []
    assert splitter.feed(b"c\nd") == [b"abc"]
    assert splitter.feed(b"\n\n") == [b"d", b""]
    assert splitter.feed(b"tail") == []
    assert splitter.tail() == b"tail"
    assert splitter.tail() is None


# -- terminals (TM-…) ----------------------------------------------------------------------------------------------
def term_start(**fields: Any) -> dict[str, Any]:
    return {"t": "term_start", "id": "term-1", "argv": ["sh", "-c", "true"], "cwd": "/", "env": {"M": "t-1"},
            "limit": 1000, "shown": "sh -c true", "marker": "M", "fds": [[9, "YWJj"]], "rate": 4096, **fields}


def test_a_term_start_travels_whole() -> None:
    """TM-1: what the gateway's policy planned reaches the host unchanged, a descriptor's contents included."""
    request = protocol.parse_request(protocol.decode(protocol.encode(term_start())))
    assert request.kind == "term_start" and request.terminal_id == "term-1" and request.start is not None
    start = request.start
    assert (start.argv, start.cwd, start.env, start.limit, start.marker, start.fds, start.rate) == (
        ["sh", "-c", "true"], "/", {"M": "t-1"}, 1000, "M", ((9, b"abc"),), 4096.0)
    assert protocol.parse_term_start(protocol.term_start_frame(start)) == start


@pytest.mark.parametrize("frame", [
    term_start(id=""), term_start(id=7), term_start(id="x" * 201), term_start(argv=[]), term_start(argv="sh"),
    term_start(argv=["sh", 1]), term_start(cwd=None), term_start(env={"A": 1}), term_start(env=["A=1"]),
    term_start(limit=-1), term_start(limit=True), term_start(shown=3), term_start(marker="NOT_IN_ENV"),
    term_start(fds=[[2, "YWJj"]]), term_start(fds=[[9]]), term_start(fds=[[9, "%%%"]]), term_start(fds=[[9, 3]]),
    term_start(rate=0), term_start(rate="fast"), {"t": "term_kill"}, {"t": "term_release", "id": ""},
])
def test_a_malformed_terminal_frame_is_a_violation(frame: dict[str, Any]) -> None:
    """AH-13, for the terminals' frames."""
    with pytest.raises(FrameError):
        protocol.parse_request(frame)


@pytest.mark.parametrize("kind", ["term_kill", "term_release"])
def test_a_terminal_is_named_by_its_id(kind: str) -> None:
    """TM-5."""
    assert protocol.parse_request({"t": kind, "id": "term-1"}) == protocol.Request(kind, terminal_id="term-1")


@pytest.mark.parametrize("terminal_id,held,rule,accepted", [
    ("term-1", set(), "TM-1", True),
    ("term-2", {"term-1"}, "TM-1", True),
    ("term-1", {"term-1"}, "TM-2", False),
])
def test_term_start_rules(terminal_id: str, held: set[str], rule: str, accepted: bool) -> None:
    assert protocol.decide_term_start(terminal_id, held) == (rule, accepted)


UNSEEN = [
    # (case, marked, total, held, cap) -> (start, end): the output offsets a gateway that attached again publishes
    ("all of it published already", 100, 100, 100, 1000, 100, 100),
    ("what came after the mark, all held", 40, 100, 100, 1000, 40, 100),
    ("nothing published, all held", 0, 100, 100, 1000, 0, 100),
    ("the host holds only its last bytes: the rest is skipped", 10, 100, 30, 1000, 70, 100),
    ("the cap reached before the restart", 1000, 5000, 500, 1000, 1000, 1000),
    ("the cap reached since", 900, 5000, 4500, 1000, 900, 1000),
    ("the cap reached since, and the bytes up to it no longer held", 900, 5000, 500, 1000, 1000, 1000),
    ("a limit of 0: nothing held", 10, 100, 0, 1000, 100, 100),
    ("nothing written", 0, 0, 0, 1000, 0, 0),
]


@pytest.mark.parametrize("case,marked,total,held,cap,start,end", UNSEEN, ids=[row[0] for row in UNSEEN])
def test_unseen_output_rule(case: str, marked: int, total: int, held: int, cap: int, start: int, end: int) -> None:
    """TM-7: published once, from what the host still holds, within the cap."""
    assert protocol.unseen_output(marked, total, held, cap) == ("TM-7", start, end)


def test_a_welcome_lists_the_terminals() -> None:
    """TM-4."""
    report = {"id": "term-1", "pid": 7, "total": 3, "output": {"line": "abc"}, "exit": None}
    assert protocol.welcome(1, 0, 2, 3, None, [report])["terminals"] == [report]
    assert protocol.welcome(1, 0, 2, 3, None)["terminals"] == []


@pytest.mark.parametrize(("frame", "ok"), [
    ({"t": "file", "id": "f1", "op": "read", "path": "a.txt"}, True),
    ({"t": "file", "id": "f1", "op": "read", "path": "a.txt", "line": 2, "limit": 3}, True),
    ({"t": "file", "id": "f1", "op": "write", "path": "a.txt", "content": "x"}, True),
    ({"t": "file", "id": "f1", "op": "delete", "path": "a.txt"}, False),
    ({"t": "file", "id": "f1", "op": "read", "path": ""}, False),
    ({"t": "file", "op": "read", "path": "a.txt"}, False),
    ({"t": "file", "id": "f1", "op": "read", "path": "a.txt", "line": -1}, False),
    ({"t": "file", "id": "f1", "op": "write", "path": "a.txt", "content": 3}, False),
])
def test_a_file_frame_is_checked_before_it_is_served(frame: dict[str, Any], ok: bool) -> None:
    if ok:
        request = protocol.parse_request(frame)
        assert request.kind == "file" and request.file is not None and request.file.path == "a.txt"
    else:
        with pytest.raises(protocol.FrameError):
            protocol.parse_request(frame)
