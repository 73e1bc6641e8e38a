"""What a PostgreSQL journal commit tells the other nodes (gateway.store.notices): a table of payloads, sealed and
encrypted with the cluster's key; two buses on one database, where events in the notification are handed out
without reading the journal, and anything a notification cannot carry (too big, lost, or not sealed with the
cluster's key: any role that can connect may NOTIFY) comes from the journal, in order; and a role with nothing but
CONNECT, listening while owners work, hears nothing it can read."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import orjson
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway.journal import EventBus
from gateway.store import EventGroup, EventRow, journal_rows, open_store
from gateway.store.commands import COMMANDS_CHANNEL
from gateway.store.notices import (
    AAD,
    JOURNAL_CHANNEL,
    NOTICE_MAX_BYTES,
    SEALED,
    commit_notice,
    notice_key,
    read_notice,
)
from tests.support.frames import Frames

SECRET = b"cluster-secret-for-the-notice-tests-0123456789"
KEY = notice_key(SECRET)


def row_of(first: int, count: int, owner: str = "alice", text: str = "hi") -> tuple[int, int, str, bytes, bytes]:
    events = [EventRow(first + i, "session_update", owner, "s-1", "t", 1.0, {"text": text}) for i in range(count)]
    return journal_rows(EventGroup.of(events))[0]


@pytest.mark.unit
def test_small_commits_carry_their_events_and_read_back_as_the_journal_would() -> None:
    _, last, owner, spans, frames = row_of(5, 3)
    owner_read, last_read, writer, entries = read_notice(commit_notice(last, "w1", owner, spans, frames, KEY),
                                                         KEY) or ()
    assert (owner_read, last_read, writer) == ("alice", 7, "w1")
    assert entries is not None
    assert [e[0] for e in entries] == [5, 6, 7] and {e[1] for e in entries} == {"s-1"}
    assert [orjson.loads(e[2])["params"]["id"] for e in entries] == [5, 6, 7]


def sealed(head: str, spans: str, frames: str) -> str:
    """A notice with these parts, sealed as a node would seal it."""
    last, writer, owner = head.split(" ", 2)
    return commit_notice(int(last), writer, owner, spans.encode(), frames.encode(), KEY)


def wake_up(head: str) -> str:
    """A sealed notice of `head` alone (as a commit too big to carry its events sends)."""
    nonce = bytes(12)
    return SEALED + base64.b64encode(nonce + AESGCM(KEY).encrypt(nonce, b"H" + head.encode(), AAD)).decode()


def tampered(payload: str, at: int) -> str:
    """`payload` with one byte of its ciphertext flipped."""
    raw = bytearray(base64.b64decode(payload[len(SEALED):]))
    raw[at] ^= 1
    return SEALED + base64.b64encode(bytes(raw)).decode()


FRAME = '{"jsonrpc":"2.0","method":"task.session.event","params":{"id":12}}'


NOTICES: list[tuple[str, str, Any]] = [
    ("sealed events", sealed("12 w1 alice", '[[12,1,"s"]]', FRAME), ("alice", 12, "w1", [(12, "s", FRAME.encode())])),
    ("an owner with spaces", sealed("12 w1 team a", '[[12,1,"s"]]', FRAME),
     ("team a", 12, "w1", [(12, "s", FRAME.encode())])),
    ("a head in clear: a forgery, or a node without the secret", "12 w1 alice", None),
    ("not a notice", "hello", None),
    ("sealed garbage", SEALED + "!!!not base64", None),
    ("too short to hold a nonce", SEALED + base64.b64encode(b"short").decode(), None),
    ("a byte of the ciphertext changed", tampered(sealed("12 w1 alice", '[[12,1,"s"]]', FRAME), 20), None),
    ("a byte of the nonce changed", tampered(sealed("12 w1 alice", '[[12,1,"s"]]', FRAME), 0), None),
    ("sealed by another cluster", commit_notice(12, "w1", "alice", b'[[12,1,"s"]]', FRAME.encode(),
                                                notice_key(b"another-cluster-secret-0123456789abcdef")), None),
    ("sealed but garbled events", sealed("12 w1 alice", "[[1,2,", "{}"), ("alice", 12, "w1", None)),
    ("sealed events that end before the id named", sealed("12 w1 alice", '[[10,1,"s"]]', '{"x":1}'),
     ("alice", 12, "w1", None)),
]


# Named by case: the payloads hold fresh nonces, and pytest-xdist's workers must collect the same ids.
@pytest.mark.unit
@pytest.mark.parametrize(("case", "payload", "expected"), NOTICES, ids=[case for case, _, _ in NOTICES])
def test_read_notice_table(case: str, payload: str, expected: Any) -> None:
    assert read_notice(payload, KEY) == expected, case


@pytest.mark.unit
def test_a_notice_says_nothing_readable_without_the_key() -> None:
    # Names long enough that random ciphertext never holds them by chance ("w1" did, one run in forty).
    head = "12 worker-node-seventy-seven alice-the-owner-of-it"
    payload = sealed(head, '[[12,1,"s"]]', FRAME)
    assert payload.startswith(SEALED)
    assert not any(word in payload for word in ("alice-the-owner-of-it", "worker-node-seventy-seven", "jsonrpc"))
    assert sealed(head, '[[12,1,"s"]]', FRAME) != payload  # a fresh nonce each time: no two alike
    assert read_notice(payload, None) is None
    # One node on PostgreSQL has no secret and no other node to tell: the bare head, in clear.
    assert commit_notice(12, "w1", "alice", b'[[12,1,"s"]]', FRAME.encode(), None) == "12 w1 alice"
    assert read_notice("12 w1 alice", None) == ("alice", 12, "w1", None)


@pytest.mark.unit
def test_what_does_not_fit_is_a_sealed_wake_up() -> None:
    _, last, owner, spans, frames = row_of(1, 40, text="x" * 300)
    assert len(frames) > NOTICE_MAX_BYTES
    payload = commit_notice(last, "w1", owner, spans, frames, KEY)
    assert len(payload) < NOTICE_MAX_BYTES and read_notice(payload, KEY) == ("alice", last, "w1", None)
    _, last, _, spans, frames = row_of(1, 1, owner="two\nlines")  # its lines would be taken for the events'
    assert read_notice(commit_notice(last, "w1", "two\nlines", spans, frames, KEY), KEY) == (
        "two\nlines", last, "w1", None)


class Counted:
    """Counts a store's journal reads (the real ones: it calls through)."""

    def __init__(self, events: Any) -> None:
        self.reads = 0
        self._entries_after = events.entries_after
        events.entries_after = self.entries_after

    async def entries_after(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self._entries_after(*args, **kwargs)


Heard = Callable[[str, int, Any], None]


@contextlib.asynccontextmanager
async def two_nodes(pg_url: str, hearing: Callable[[Heard], Heard] | None = None) -> AsyncIterator[
        tuple[EventBus, EventBus]]:
    """A writer's and a reader's event bus on one database, with the cluster's secret; the reader is woken by
    notifications only (its poll an hour away). `hearing` wraps what the reader hears, before it listens."""
    writer = EventBus(await open_store(pg_url, cluster_secret=SECRET))
    reader = EventBus(await open_store(pg_url, cluster_secret=SECRET))
    reader.poll_interval = 3600.0
    if hearing is not None:
        reader._heard = hearing(reader._heard)  # type: ignore[method-assign]
    await writer.open()
    await reader.open()
    try:
        yield writer, reader
    finally:
        for bus in (writer, reader):
            await bus.close()
            await bus.store.close()


async def subscribed(reader: EventBus, owner: str, sink: Frames) -> Frames:
    await reader.start_replay(await reader.subscribe(owner, sink, 0, None))
    return sink


async def test_another_nodes_events_come_in_its_notifications_and_the_journal_fills_what_they_cannot_carry(
        pg_url: str) -> None:
    async with two_nodes(pg_url) as (writer, reader):
        await writer.publish("session_update", "carol", "s", "t", {"n": 0})
        sink = await subscribed(reader, "carol", Frames())
        counted = Counted(reader.store.events)
        for n in range(1, 21):  # one small commit each: every one fits in its notification
            await writer.publish("session_update", "carol", "s", "t", {"n": n})
        await sink.until(21)
        assert counted.reads == 0  # handed out from the notifications alone
        for n in range(21, 61):  # one commit too big for a notification: the journal has it
            writer.enqueue("session_update", "carol", "s", "t", {"n": n, "pad": "x" * 300})
        await writer.flush()
        await sink.until(61)
        assert counted.reads >= 1
        assert sink.ids == list(range(1, 62))


async def test_a_lost_notification_is_filled_from_the_journal_before_the_next_ones_events(pg_url: str) -> None:
    dropped: list[int] = []

    def lossy(heard: Heard) -> Heard:
        def hear(owner: str, last_id: int, entries: Any = None) -> None:
            if last_id == 3 and not dropped:  # the notification of event 3 never arrives
                dropped.append(last_id)
                return
            heard(owner, last_id, entries)
        return hear

    async with two_nodes(pg_url, lossy) as (writer, reader):
        sink = await subscribed(reader, "dave", Frames())
        for n in range(6):
            await writer.publish("session_update", "dave", "s", "t", {"n": n})
        await sink.until(6)
        assert dropped == [3] and sink.ids == [1, 2, 3, 4, 5, 6]  # 4's notification found the gap: read, in order


async def test_journal_commits_skip_the_wal_flush_only_when_configured(pg_url: str) -> None:
    for synchronous, expected in ((True, "on"), (False, "off")):
        store = await open_store(pg_url, journal_synchronous_commit=synchronous)
        bus = EventBus(store)
        await bus.open()
        try:
            await bus.publish("session_update", "erin", "s", "t", {"n": 1})
            journal = store._journal  # type: ignore[attr-defined]
            assert await journal.fetchval("SHOW synchronous_commit") == expected
            assert await store.fetchone("SHOW synchronous_commit") == ("on",)  # every other write waits for it
        finally:
            await bus.close()
            await store.close()


class Recorder(Frames):
    """Frames that also keeps each event's params."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        self.seen.extend(orjson.loads(f)["params"] for f in frames)
        super().send_many(frames, message, batch, shared)


async def test_a_forged_notification_hands_out_nothing(pg_url: str) -> None:
    """Any role that can connect may NOTIFY: a notice with events but without the cluster's seal only wakes the node,
    which finds nothing new in the journal; the real event with that id comes later, as the writer wrote it."""
    async with two_nodes(pg_url) as (writer, reader):
        attacker = await asyncpg.connect(pg_url)
        try:
            sink = await subscribed(reader, "frank", Recorder())
            await writer.publish("session_update", "frank", "s", "t", {"n": 1})
            await sink.until(1)
            forged_frame = orjson.dumps({"jsonrpc": "2.0", "method": "task.session.event", "params": {
                "id": 2, "type": "session_update", "session_id": "s", "task_id": "t", "ts": 0,
                "data": {"n": "forged"}}})
            forged = f'2 someone frank\n{"a" * 64}\n[[2,1,"s"]]\n{forged_frame.decode()}'
            await attacker.execute("SELECT pg_notify($1, $2)", JOURNAL_CHANNEL, forged)
            await writer.publish("session_update", "frank", "s", "t", {"n": 2})
            await sink.until(2)
            events = [p for p in sink.seen if p["id"] is not None]
            assert [(e["id"], e["data"]["n"]) for e in events] == [(1, 1), (2, 2)]
        finally:
            await attacker.close()


async def test_a_notice_heard_while_a_catch_up_reads_the_journal_is_not_left_to_the_poll(pg_url: str) -> None:
    """A catch-up that finds nothing new stops; a notice heard while it was reading (its events committed after the read
    began) must make it read once more, not wait for the poll (an hour here)."""
    second_heard = asyncio.Event()

    def noting(heard: Heard) -> Heard:
        def hear(owner: str, last_id: int, entries: Any = None) -> None:
            heard(owner, last_id, entries)
            if last_id == 2:
                second_heard.set()
        return hear

    async with two_nodes(pg_url, noting) as (writer, reader):
        attacker = await asyncpg.connect(pg_url)
        try:
            sink = await subscribed(reader, "gina", Frames())
            await writer.publish("session_update", "gina", "s", "t", {"n": 1})
            await sink.until(1)
            read = reader.store.events.entries_after
            reads = 0

            async def read_then_commit(*args: Any, **kwargs: Any) -> Any:
                nonlocal reads
                reads += 1
                found = await read(*args, **kwargs)
                if reads == 1:  # event 2 is committed, and its notice heard, after this read saw the journal
                    await writer.publish("session_update", "gina", "s", "t", {"n": 2})
                    await asyncio.wait_for(second_heard.wait(), 15)
                return found

            reader.store.events.entries_after = read_then_commit  # type: ignore[method-assign]
            await attacker.execute("SELECT pg_notify($1, $2)", JOURNAL_CHANNEL, wake_up("5 someone gina"))  # a read
            await sink.until(2)
            assert sink.ids == [1, 2] and reads >= 2
        finally:
            await attacker.close()


async def test_a_role_that_can_only_connect_hears_no_word_of_what_owners_do(pg_url: str) -> None:
    """PostgreSQL lets any role that can connect LISTEN on any channel. One with nothing but CONNECT listens on every
    channel the gateway uses while an owner's events are committed: it hears that commits happen, nothing more."""
    role = f"acp_listener_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f"CREATE ROLE {role} LOGIN")
    heard: list[str] = []
    try:
        listener = await asyncpg.connect(pg_url, user=role)
        for channel in (JOURNAL_CHANNEL, COMMANDS_CHANNEL):
            await listener.add_listener(channel, lambda _c, _p, _ch, payload: heard.append(payload))
        async with two_nodes(pg_url) as (writer, reader):
            assert await listener.fetchval("SELECT has_table_privilege(current_user, 'journal', 'SELECT')") is False
            sink = await subscribed(reader, "alice", Frames())
            for n in range(5):
                await writer.publish("session_update", "alice", "s-secret", "t",
                                     {"text": f"ALICE-CONFIDENTIAL-PROMPT-{n}"})
            await sink.until(5)
        await listener.close()
    finally:
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()
    assert len(heard) >= 5, heard  # it did hear the commits: the test could fail
    for payload in heard:
        assert "CONFIDENTIAL" not in payload and "alice" not in payload and "s-secret" not in payload, payload
