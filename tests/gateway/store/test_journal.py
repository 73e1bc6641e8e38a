"""The event journal's storage: one row per owner per group commit, read back in id order, pruned whole."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.errors import GatewayError
from gateway.journal import EventBus
from gateway.store import (
    MIGRATIONS,
    REPLAY_PAGE,
    EventGroup,
    EventRow,
    PruneGoal,
    Store,
    StoreBase,
    journal_frames,
    journal_rows,
)


class Frames:
    """A sink that keeps what it is sent."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send(self, frame: bytes) -> None:
        self.frames.append(frame)

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False) -> None:
        self.frames += frames

    def full(self) -> bool:
        return False

    async def drain(self) -> None:
        return None


def event(id_: int, owner: str = "o", session_id: str | None = "s1") -> EventRow:
    return EventRow(id_, "session_update", owner, session_id, "t", 1.5, {"update": {"n": id_}, "replay": False})


def ids(frames: list[bytes]) -> list[int]:
    return [orjson.loads(f)["params"]["id"] for f in frames]


def decode(rows: list[tuple[int, int, str, bytes, bytes]], since: int = 0, until: int = 1 << 40,
           session_id: str | None = None) -> dict[str, list[int]]:
    return {owner: ids(journal_frames(spans, frames, since, until, session_id))
            for _first, _last, owner, spans, frames in rows}


@pytest.mark.parametrize(("events", "rows"), [
    # one owner, one session: one row, one span
    ([event(1), event(2), event(3)], [(1, 3, "o", [[1, 3, "s1"]])]),
    # sessions interleaved: a span per run of one session
    ([event(1), event(2, session_id="s2"), event(3, session_id="s2"), event(4)],
     [(1, 4, "o", [[1, 1, "s1"], [2, 2, "s2"], [4, 1, "s1"]])]),
    # owners interleaved: a row per owner; an owner's ids are not consecutive, so each is its own span
    ([event(1, "a"), event(2, "b"), event(3, "a")],
     [(1, 3, "a", [[1, 1, "s1"], [3, 1, "s1"]]), (2, 2, "b", [[2, 1, "s1"]])]),
    # events of no session
    ([event(5, session_id=None), event(6, session_id=None)], [(5, 6, "o", [[5, 2, None]])]),
    # one owner and session, ids with a gap: two spans
    ([event(1), event(3)], [(1, 3, "o", [[1, 1, "s1"], [3, 1, "s1"]])]),
])
def test_journal_rows_group_by_owner(events: list[EventRow], rows: list[tuple[Any, ...]]) -> None:
    got = journal_rows(EventGroup.of(events))
    assert [(r[0], r[1], r[2], orjson.loads(r[3])) for r in got] == rows
    by_owner: dict[str, list[int]] = {}
    for e in events:
        by_owner.setdefault(e.owner, []).append(e.id)
    assert decode(got) == by_owner
    for row in got:  # the frames are exactly the notifications subscribers get
        assert row[4].split(b"\n") == [e.frame() for e in events if e.owner == row[2]]


@pytest.mark.parametrize(("since", "until", "session_id", "expected"), [
    (0, 100, None, [1, 2, 3, 4, 5]),
    (2, 100, None, [3, 4, 5]),
    (0, 3, None, [1, 2, 3]),
    (1, 4, None, [2, 3, 4]),
    (0, 100, "s2", [2, 3]),
    (2, 100, "s2", [3]),
    (0, 100, "s1", [1, 4, 5]),
    (3, 4, "s1", [4]),
    (5, 100, None, []),
])
def test_journal_frames_cut_a_row_by_range_and_session(since: int, until: int, session_id: str | None,
                                                      expected: list[int]) -> None:
    events = [event(1), event(2, session_id="s2"), event(3, session_id="s2"), event(4), event(5)]
    (row,) = journal_rows(EventGroup.of(events))
    assert ids(journal_frames(row[3], row[4], since, until, session_id)) == expected


async def test_replay_pages_keep_id_order_across_owners_and_commits(any_store: StoreBase) -> None:
    store = any_store
    expected: dict[str, list[int]] = {"a": [], "b": []}
    next_id = {"a": 1, "b": 1}  # ids count per owner, as the event bus gives them
    for batch in range(30):  # 30 group commits of interleaved owners
        rows = []
        for k in range(batch % 4 + 1):
            owner = "a" if (batch + k) % 3 else "b"
            rows.append(event(next_id[owner], owner, session_id=f"s{k % 2}"))
            expected[owner].append(next_id[owner])
            next_id[owner] += 1
        await store.events.append_batch(EventGroup.of(rows))
    head = max(next_id.values()) - 1
    assert await store.events.head("a") == expected["a"][-1]
    assert await store.events.head("b") == expected["b"][-1]
    for owner in ("a", "b"):
        got: list[int] = []
        cursor: int | None = 0
        while cursor is not None:
            frames, cursor = await store.events.after(owner, cursor, head, window=3)
            got += ids(frames)
        assert got == expected[owner]
    frames, _ = await store.events.after("a", 10, 20, session_id="s1")
    assert all(10 < i <= 20 for i in ids(frames)) and ids(frames) == sorted(ids(frames))


async def test_pruning_moves_each_owners_horizon_and_never_loses_a_newer_event(any_store: StoreBase) -> None:
    store = any_store
    await store.events.append_batch(EventGroup.of([event(i, "a") for i in (1, 2, 3)] + [event(1, "b")]))
    pruned = await store.events.append_batch(EventGroup.of([event(4, "a"), event(2, "b")]),
                                           {"a": PruneGoal(through=3)})
    assert pruned["a"] > 0 and set(pruned) == {"a"}
    assert (await store.events.horizon("a"), await store.events.horizon("b")) == (3, 0)
    assert ids((await store.events.after("a", 3, 4))[0]) == [4]
    assert ids((await store.events.after("b", 0, 2))[0]) == [1, 2]  # another owner's journal is untouched
    assert await store.events.prune("b", PruneGoal(through=1)) > 0
    assert await store.events.horizon("b") == 1
    assert ids((await store.events.after("b", 1, 2))[0]) == [2]


@pytest.mark.parametrize(("drop_bytes", "horizon", "kept"), [
    (1, 1, [2, 3, 4]),  # one byte: the oldest whole row
    (0, 0, [1, 2, 3, 4]),
    (10**9, 3, [4]),  # more than all: everything but the newest row
])
async def test_pruning_by_bytes_drops_the_oldest_rows_and_keeps_the_newest(
        any_store: StoreBase, drop_bytes: int, horizon: int, kept: list[int]) -> None:
    store = any_store
    for i in (1, 2, 3, 4):
        await store.events.append_batch(EventGroup.of([event(i, "a")]))
    size = len(event(1, "a").frame())
    freed = await store.events.prune("a", PruneGoal(through=0, drop_bytes=drop_bytes))
    assert freed == pytest.approx(size * (4 - len(kept)), abs=4)
    assert await store.events.horizon("a") == horizon
    assert ids((await store.events.after("a", 0, 4))[0]) == kept
    heads, _floor = await store.events.heads()
    assert heads["a"].head == 4 and heads["a"].bytes == pytest.approx(size * len(kept), abs=4)


async def test_event_ids_count_per_owner_and_say_nothing_of_other_owners(any_store: StoreBase) -> None:
    store = any_store
    bus = EventBus(store)
    await bus.open()
    try:
        for i in range(6):
            bus.enqueue("session_update", "a" if i % 3 else "b", "s", "t", {"n": i})
        await bus.flush()
        assert (bus.head("a"), bus.head("b"), bus.head("nobody")) == (4, 2, 0)
        await bus.close()
        bus = EventBus(store)
        await bus.open()  # a restart continues each owner's count
        assert bus.next_id("a") == 5 and bus.next_id("b") == 3
        sink = Frames()
        await bus.start_replay(await bus.subscribe("b", sink, 0, None))
        assert ids(sink.frames)[:-1] == [1, 2]
    finally:
        await bus.close()


async def test_an_owners_journal_is_bounded_in_bytes(any_store: StoreBase) -> None:
    store = any_store
    limit = 200_000
    bus = EventBus(store, retention_bytes=limit)
    await bus.open()
    try:
        for i in range(100):  # 100 x 10 kB for owner a: five times its limit
            bus.enqueue("session_update", "a", "s", "t", {"text": "x" * 10_000, "n": i})
            bus.enqueue("session_update", "b", "s", "t", {"n": i})
            await bus.flush()
        heads, _ = await store.events.heads()
        assert limit * 0.8 <= heads["a"].bytes <= limit
        assert bus.journal_bytes("a") == heads["a"].bytes
        assert heads["b"].head == 100 and await store.events.horizon("b") == 0  # b's small journal is whole
        horizon = await store.events.horizon("a")
        frames, _ = await store.events.after("a", horizon, 100)
        assert ids(frames) == list(range(horizon + 1, 101))  # the newest, without a gap
        assert await store.events.horizon("a") > 0
    finally:
        await bus.close()


async def test_subscribe_behind_the_horizon_must_resync(any_store: StoreBase) -> None:
    store = any_store
    bus = EventBus(store, retention=10)
    bus.PRUNE_EVERY = 10
    await bus.open()
    try:
        for i in range(40):
            bus.enqueue("session_update", "o", "s", "t", {"n": i})
            await bus.flush()
        horizon = await store.events.horizon("o")
        assert horizon >= 40 - 10 - bus.PRUNE_EVERY
        with pytest.raises(GatewayError) as err:
            await bus.subscribe("o", Frames(), horizon - 1, None)
        assert err.value.data["reason"] == "too_far_behind"
        sink = Frames()
        sub = await bus.subscribe("o", sink, horizon, None)
        await bus.start_replay(sub)
        replayed = [orjson.loads(f)["params"]["id"] for f in sink.frames]
        assert replayed[:-1] == list(range(horizon + 1, 41)) and replayed[-1] is None  # then caught_up
    finally:
        await bus.close()


async def test_migration_5_keeps_the_old_events_and_their_horizon(tmp_path: Path) -> None:
    path = tmp_path / "g.db"
    db = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:4]:
        for statement in filter(str.strip, script.split(";")):
            db.execute(statement)
    db.execute("PRAGMA user_version = 4")
    now = time.time()
    for i in (7, 8, 9):  # 1..6 were pruned by the old gateway
        db.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (i, "session_message", "o", f"s{i % 2}", "t", now, orjson.dumps({"text": f"m{i}"})))
    db.close()
    store = await Store.open(path)
    try:
        assert await store.events.head("o") == 9
        assert await store.events.horizon("o") == 6
        assert await store.events.head("another") == 6  # an owner new to the journal starts above the old ids
        frames, cursor = await store.events.after("o", 6, 9)
        assert cursor is None
        params = [orjson.loads(f)["params"] for f in frames]
        assert [(p["id"], p["type"], p["session_id"], p["data"]) for p in params] == [
            (7, "session_message", "s1", {"text": "m7"}), (8, "session_message", "s0", {"text": "m8"}),
            (9, "session_message", "s1", {"text": "m9"})]
        assert params[0]["ts"] == pytest.approx(now)
        assert ids((await store.events.after("o", 6, 9, session_id="s1"))[0]) == [7, 9]
    finally:
        await store.close()


async def test_the_wal_is_checkpointed_off_the_loop_and_stays_bounded(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "g.db")
    try:
        assert store.journal is not None
        limit = store.journal.CHECKPOINT_BYTES
        big = {"text": "x" * 60_000}
        next_id, written = 1, 0
        while written < 4 * limit:  # without checkpoints the WAL would hold all of it
            events = [EventRow(next_id + k, "session_update", "o", "s", "t", 1.0, big) for k in range(10)]
            next_id += 10
            store.events.append_batch_now(EventGroup.of(events))
            written += sum(len(e.frame()) for e in events)
            await store.checkpoint_done()
        wal = tmp_path / "g.db-wal"
        assert wal.stat().st_size < 2 * limit, wal.stat().st_size
        assert await store.events.head("o") == next_id - 1
    finally:
        await store.close()


async def test_a_replay_page_seeks_by_index_and_never_scans_the_journal(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "g.db")
    await store.close()
    db = sqlite3.connect(tmp_path / "g.db")
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + REPLAY_PAGE, ("o", 1, 9, "o", 9, 9))]
    db.close()
    assert plan and not any(step.startswith("SCAN journal") for step in plan), plan
    # the window is bounded on both sides, not read from `since` to the end of the owner's rows
    assert any("journal_by_owner (owner=? AND last_id>? AND last_id<?)" in step for step in plan), plan
