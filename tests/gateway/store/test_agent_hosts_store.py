"""The store's side of agent hosts (docs/agent-hosts.md), on SQLite and on a real PostgreSQL server: a session's host
row, its incarnations, and its mark, committed in the journal's group commit or not at all."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import asyncpg
import orjson
import pytest

from gateway.store import EventGroup, EventRow, HostRow, Store, StoreBase, open_store
from gateway.store.migrations import MIGRATIONS
from gateway.store.pg_migrations import PG_MIGRATIONS
from gateway.store.postgres import PostgresStore
from tests.gateway.store.test_store_upgrade import add_session, old_store

SECRET = "host-secret-0123456789abcdef"  # a dummy: it must never show in a row's repr


def host(n: int = 1) -> dict[str, object]:
    return {"socket": f"/state/hosts/x{n}/sock", "spool_dir": f"/state/hosts/x{n}/spool", "host_pid": 4000 + n,
            "agent_pid": 5000 + n, "secret": SECRET}


async def new_session(store: StoreBase, owner: str = "alice") -> str:
    row = await store.sessions.create(owner=owner, agent="reference", cwd="/w", title=None, description=None,
                                      task_id=None, task_state="CREATED", session_state="CREATED")
    return row.id


def group(first: int, count: int, session_id: str, marks: dict[str, dict[str, int]] | None = None,
          owner: str = "alice") -> EventGroup:
    """`count` events of the session from id `first`, committed with these marks."""
    events = [EventRow(i, "session_update", owner, session_id, None, 1.0, {"n": i})
              for i in range(first, first + count)]
    built = EventGroup.of(events)
    if marks is not None:
        built.marks = {sid: orjson.dumps(mark) for sid, mark in marks.items()}
    return built


async def test_a_host_row_is_put_read_listed_replaced_and_dropped(any_store: StoreBase) -> None:
    store = any_store
    first, second = await new_session(store), await new_session(store)
    assert await store.hosts.get(first) is None and await store.hosts.all() == []
    await store.hosts.put(first, "x1", host(1))
    await store.hosts.put(second, "x2", host(2))
    assert await store.hosts.get(first) == HostRow(first, "x1", host(1), None, 0)
    assert [(r.session_id, r.execution_id) for r in await store.hosts.all()] == sorted(
        [(first, "x1"), (second, "x2")])
    await store.hosts.set_mark(first, {"agent": 7, "sent": 2})
    assert await store.hosts.next_incarnation(first) == 1
    await store.hosts.set_host(first, {**host(1), "host_pid": 4242})  # the host's own: mark and incarnation stay
    assert await store.hosts.get(first) == HostRow(first, "x1", {**host(1), "host_pid": 4242}, {"agent": 7, "sent": 2},
                                                   1)
    await store.hosts.put(first, "x3", host(3))  # a new execution: nothing committed, no incarnation yet
    assert await store.hosts.get(first) == HostRow(first, "x3", host(3), None, 0)
    await store.hosts.drop(first)
    assert await store.hosts.get(first) is None
    assert [r.session_id for r in await store.hosts.all()] == [second]
    assert SECRET not in repr(await store.hosts.get(second))  # a logged row shows no secret


async def test_incarnations_count_up_once_each_even_when_asked_together(any_store: StoreBase) -> None:
    store = any_store
    sid = await new_session(store)
    await store.hosts.put(sid, "x1", host())
    got = await asyncio.gather(*(store.hosts.next_incarnation(sid) for _ in range(5)))
    assert sorted(got) == [1, 2, 3, 4, 5]
    row = await store.hosts.get(sid)
    assert row is not None and row.incarnation == 5
    with pytest.raises(LookupError, match="has no agent host"):
        await store.hosts.next_incarnation(await new_session(store))


async def test_a_group_commit_writes_its_marks_with_its_events(any_store: StoreBase) -> None:
    store = any_store
    sid, other, bare = await new_session(store), await new_session(store), await new_session(store)
    await store.hosts.put(sid, "x1", host(1))
    await store.hosts.put(other, "x2", host(2))
    await store.events.append_batch(group(1, 3, sid))  # no marks: the hosts' rows are untouched
    assert (await store.hosts.get(sid)).mark is None  # type: ignore[union-attr]
    await store.events.append_batch(group(4, 2, sid, {sid: {"agent": 5}, other: {"agent": 1, "sent": 1},
                                                      bare: {"agent": 9}}))  # `bare` has no host: nothing to mark
    assert (await store.hosts.get(sid)).mark == {"agent": 5}  # type: ignore[union-attr]
    assert (await store.hosts.get(other)).mark == {"agent": 1, "sent": 1}  # type: ignore[union-attr]
    assert await store.hosts.get(bare) is None
    assert await store.events.head("alice") == 5  # the events went in with them, numbered on
    await store.events.append_batch(group(6, 1, sid, {sid: {"agent": 6}}))
    assert (await store.hosts.get(sid)).mark == {"agent": 6}  # type: ignore[union-attr]
    frames, _ = await store.events.after("alice", 0, 6)
    assert [orjson.loads(f)["params"]["id"] for f in frames] == [1, 2, 3, 4, 5, 6]


async def test_a_synchronous_group_commit_writes_its_marks_too(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "gateway.db")
    try:
        sid = await new_session(store)
        await store.hosts.put(sid, "x1", host())
        assert store.events.can_append_now()
        store.events.append_batch_now(group(1, 2, sid, {sid: {"agent": 2}}))
        assert (await store.hosts.get(sid)).mark == {"agent": 2}  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_a_group_commit_that_fails_writes_no_mark_on_sqlite(tmp_path: Path) -> None:
    """Ids an owner's journal already holds (its unique index refuses them): the commit fails whole, marks and all."""
    store = await Store.open(tmp_path / "gateway.db")
    try:
        sid = await new_session(store)
        await store.hosts.put(sid, "x1", host())
        await store.events.append_batch(group(1, 2, sid, {sid: {"agent": 2}}))
        with pytest.raises(sqlite3.IntegrityError):
            await store.events.append_batch(group(1, 2, sid, {sid: {"agent": 4}}))
        with pytest.raises(sqlite3.IntegrityError):
            store.events.append_batch_now(group(2, 1, sid, {sid: {"agent": 3}}))
        assert (await store.hosts.get(sid)).mark == {"agent": 2}  # type: ignore[union-attr]
        assert await store.events.head("alice") == 2
    finally:
        await store.close()


async def test_a_group_commit_that_fails_writes_no_mark_on_postgresql(pg_url: str) -> None:
    """Fencing refuses the journal rows of a session another node holds: the marks of that commit, even for a
    session nobody holds, are not written; and a mark alone for the held session is refused too."""
    a = await open_store(pg_url, node="node-a/1")
    b = await open_store(pg_url, node="node-b/1")
    assert isinstance(a, PostgresStore) and isinstance(b, PostgresStore)
    try:
        held, free = await new_session(a), await new_session(a)
        await a.hosts.put(held, "x1", host(1))
        await a.hosts.put(free, "x2", host(2))
        await a.events.append_batch(group(1, 1, free, {free: {"agent": 1}}))
        assert await b.leases.acquire(held, "node-b/1", 15) is not None
        with pytest.raises(asyncpg.PostgresError) as err:
            await a.events.append_batch(group(2, 2, held, {free: {"agent": 9}}))
        assert err.value.sqlstate == "AL001"
        with pytest.raises(asyncpg.PostgresError) as err:
            await a.hosts.set_mark(held, {"agent": 9})
        assert err.value.sqlstate == "AL001"
        assert (await a.hosts.get(free)).mark == {"agent": 1}  # type: ignore[union-attr]
        assert (await a.hosts.get(held)).mark is None  # type: ignore[union-attr]
        assert await a.events.head("alice") == 1
        await b.events.append_batch(group(2, 2, held, {held: {"agent": 2}}))  # the holder commits both
        assert (await a.hosts.get(held)).mark == {"agent": 2}  # type: ignore[union-attr]
    finally:
        await a.close()
        await b.close()


async def test_deleting_a_session_deletes_its_host_row(any_store: StoreBase) -> None:
    store = any_store
    sid, kept = await new_session(store), await new_session(store)
    await store.hosts.put(sid, "x1", host(1))
    await store.hosts.put(kept, "x2", host(2))
    await store.sessions.delete(sid)
    assert await store.hosts.get(sid) is None
    assert [r.session_id for r in await store.hosts.all()] == [kept]


async def test_an_sqlite_file_from_before_agent_hosts_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    db = old_store(path, 14)
    add_session(db, "alice", "s-1", "t-1")
    db.close()
    store = await Store.open(path)
    try:
        assert (await store.fetchone("PRAGMA user_version"))[0] == len(MIGRATIONS) == 17
        assert (await store.sessions.get("s-1")) is not None
        await store.hosts.put("s-1", "x1", host())
        await store.hosts.set_mark("s-1", {"agent": 3})
        assert (await store.hosts.get("s-1")) == HostRow("s-1", "x1", host(), {"agent": 3}, 0)
        await store.sessions.delete("s-1")
        assert await store.hosts.all() == []
        assert await store.fetchall("PRAGMA foreign_key_check") == []
    finally:
        await store.close()


async def test_a_postgresql_store_from_before_agent_hosts_upgrades_in_place(pg_url: str) -> None:
    conn = await asyncpg.connect(pg_url)
    try:
        await conn.execute("CREATE TABLE schema_version (version BIGINT NOT NULL)")
        for number, script in enumerate(PG_MIGRATIONS[:12], start=1):
            await conn.execute(script)
            await conn.execute("INSERT INTO schema_version VALUES ($1)", number)
        now = time.time()
        await conn.execute("INSERT INTO tasks VALUES ('t-1', 'alice', NULL, NULL, 'CREATED', $1, $1)", now)
        await conn.execute("INSERT INTO sessions (id, task_id, owner, agent, cwd, state, created_at, updated_at) "
                           "VALUES ('s-1', 't-1', 'alice', 'ref', '/w', 'CREATED', $1, $1)", now)
    finally:
        await conn.close()
    store = await open_store(pg_url, node="node-a/1")
    try:
        assert (await store.fetchone("SELECT MAX(version) FROM schema_version"))[0] == len(PG_MIGRATIONS) == 15
        await store.hosts.put("s-1", "x1", host())
        assert await store.hosts.next_incarnation("s-1") == 1
        assert (await store.hosts.get("s-1")) == HostRow("s-1", "x1", host(), None, 1)
        await store.sessions.delete("s-1")
        assert await store.hosts.all() == []
    finally:
        await store.close()
