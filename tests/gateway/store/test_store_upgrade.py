"""gateway.store: a file from an older gateway upgrades in place, keeps every row, and gives deleted space back."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from gateway.store import MIGRATIONS, HistoryEntry, Store


def old_store(path: Path, version: int) -> sqlite3.Connection:
    """A file as a gateway of schema `version` left it (no auto_vacuum: made before it was set)."""
    db = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:version]:
        for statement in filter(str.strip, script.split(";")):
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {version}")
    return db


def add_session(db: sqlite3.Connection, owner: str, session_id: str, task_id: str) -> None:
    now = time.time()
    db.execute("INSERT OR IGNORE INTO tasks VALUES (?, ?, 'title', 'what to do', 'WAITING', ?, ?)",
               (task_id, owner, now, now))
    db.execute("INSERT INTO sessions (id, task_id, owner, agent, cwd, state, created_at, updated_at) "
               "VALUES (?, ?, ?, 'ref', '/w', 'WAITING_FOR_INPUT', ?, ?)", (session_id, task_id, owner, now, now))
    db.execute("INSERT INTO executors (session_id, cwd, status, last_seen) VALUES (?, '/w', 'stopped', ?)",
               (session_id, now))
    db.execute("INSERT INTO history (session_id, kind, content, ts) VALUES (?, 'user', 'hello', ?)", (session_id, now))


async def test_task_ids_become_per_owner_and_every_row_survives_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "gateway.db"
    db = old_store(path, 8)
    add_session(db, "alice", "s-1", "t-shared")
    add_session(db, "alice", "s-2", "t-shared")
    db.close()
    store = await Store.open(path)
    try:
        row = await store.sessions.get("s-1", "alice")
        assert row is not None and row.task_id == "t-shared" and row.task_state == "WAITING"
        assert [e.content for e in await store.history.all("s-2")] == ["hello"]
        # bob may now name his own task "t-shared": a different task, alice's is untouched
        bobs = await store.sessions.create(owner="bob", agent="ref", cwd="/b", title=None, description="bob's",
                                           task_id="t-shared", task_state="WAITING", session_state="STARTING")
        assert bobs.task_id == "t-shared" and bobs.owner == "bob"
        alices = await store.tasks.get("alice", "t-shared")
        assert alices is not None and alices.description == "what to do"
        bobs_task = await store.tasks.get("bob", "t-shared")
        assert bobs_task is not None and bobs_task.description == "bob's"
        assert await store.tasks.get("carol", "t-shared") is None
        await store.sessions.delete("s-1")
        await store.sessions.delete("s-2")  # alice's last session of the task: her task goes, bob's stays
        assert await store.tasks.get("alice", "t-shared") is None
        assert await store.tasks.get("bob", "t-shared") is not None
        assert await store.fetchall("PRAGMA foreign_key_check") == []
        assert (await store.fetchone("PRAGMA foreign_keys"))[0] == 1
        assert (await store.fetchone("PRAGMA auto_vacuum"))[0] == 2  # rewritten once, so deletes give space back
    finally:
        await store.close()


async def test_a_deleted_sessions_space_goes_back_to_the_file_system(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "gateway.db")
    try:
        rows = []
        for _ in range(4):
            row = await store.sessions.create(owner="o", agent="ref", cwd="/w", title=None, description=None,
                                              task_id=None, task_state="WAITING", session_state="STARTING")
            await store.history.append(row.id, [HistoryEntry("agent", "x" * 100_000) for _ in range(20)])
            rows.append(row)
        assert store.journal is not None
        full, _, _ = store.journal.page_counts()
        for row in rows[:3]:
            await store.sessions.delete(row.id)
        assert store._reclaim is not None
        await store._reclaim  # the reclaim that the deletes started
        pages, free, _ = store.journal.page_counts()
        assert free == 0
        assert pages < full * 0.5, (pages, full)  # three of four sessions' history gone from the file
    finally:
        await store.close()


@pytest.mark.parametrize("version", [4, 8])
async def test_an_old_file_keeps_its_event_ids_above_what_it_handed_out(tmp_path: Path, version: int) -> None:
    path = tmp_path / "gateway.db"
    db = old_store(path, version)
    if version == 4:
        db.execute("INSERT INTO events VALUES (41, 'session_update', 'alice', 's', 't', 1.0, '{}')")
    else:
        db.execute("UPDATE journal_horizon SET through = 40")
        db.execute("INSERT INTO journal VALUES (41, 41, 'alice', '[[41,1,\"s\"]]', CAST('{}' AS BLOB))")
    db.close()
    store = await Store.open(path)
    try:
        heads, floor = await store.events.heads()
        assert heads["alice"].head == 41
        assert floor == 40  # bob never had events here, but ids up to 40 may have been his
        assert await store.events.head("bob") == 40
    finally:
        await store.close()
