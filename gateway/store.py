"""The durable store (DESIGN §4.1): one SQLite file in WAL mode, a repository per concern.

Rules of this file:
- All SQL of the gateway lives here; callers see repositories and row dataclasses.
- A write returns only after it is committed: what the gateway acknowledged survives `kill -9`
  (WAL + synchronous=NORMAL is durable against process death; power loss may drop the last
  commits, which is the documented limit).
- Multi-statement changes go through `Store.transaction()`, serialised by one lock.
- Schema changes are numbered migrations recorded in `PRAGMA user_version`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import orjson

from .resume_context import HistoryEntry

log = logging.getLogger(__name__)

MIGRATIONS: list[str] = [
    # 1: the first schema
    """
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        title TEXT,
        description TEXT,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE TABLE sessions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        task_id TEXT NOT NULL REFERENCES tasks(id),
        owner TEXT NOT NULL,
        agent TEXT NOT NULL,
        cwd TEXT NOT NULL,
        title TEXT,
        state TEXT NOT NULL,
        error_message TEXT,
        recovery_pending INTEGER NOT NULL DEFAULT 0,
        needs_resume_context INTEGER NOT NULL DEFAULT 0,
        launched INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX sessions_by_owner ON sessions(owner, seq);
    CREATE TABLE executors (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        resume_token TEXT,
        execution_id TEXT,
        instance_id TEXT,
        cwd TEXT NOT NULL,
        status TEXT NOT NULL,
        last_seen REAL NOT NULL
    );
    CREATE TABLE history (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        name TEXT NOT NULL DEFAULT '',
        content TEXT NOT NULL DEFAULT '',
        ts REAL NOT NULL
    );
    CREATE INDEX history_by_session ON history(session_id, id);
    CREATE TABLE cancel_requests (
        session_id TEXT PRIMARY KEY,
        requested_at REAL NOT NULL
    );
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        type TEXT NOT NULL,
        owner TEXT NOT NULL,
        session_id TEXT,
        task_id TEXT,
        ts REAL NOT NULL,
        data TEXT NOT NULL
    );
    CREATE TABLE instances (
        id TEXT PRIMARY KEY,
        pid INTEGER NOT NULL,
        started_at REAL NOT NULL,
        alive INTEGER NOT NULL DEFAULT 1
    );
    CREATE TABLE permissions (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        params TEXT NOT NULL,
        state TEXT NOT NULL,
        answer TEXT,
        created_at REAL NOT NULL
    );
    """,
    # 2: replay by owner reads the journal in id order; permissions remember the event that offered them
    """
    CREATE INDEX events_by_owner ON events(owner, id);
    ALTER TABLE permissions ADD COLUMN event_id INTEGER;
    ALTER TABLE permissions ADD COLUMN request_id TEXT
    """,
    # 3: the journal is read by id range (a reconnecting client asks for what came after its cursor),
    # which the primary key serves; an (owner, id) index only doubled the cost of every event written.
    """
    DROP INDEX events_by_owner
    """,
    # 4: event ids are assigned by the bus (in memory, past the journal's head), so AUTOINCREMENT's
    # per-row sqlite_sequence update is pure cost. Pruning keeps the newest events, so the head stays.
    """
    CREATE TABLE events_new (
        id INTEGER PRIMARY KEY,
        type TEXT NOT NULL,
        owner TEXT NOT NULL,
        session_id TEXT,
        task_id TEXT,
        ts REAL NOT NULL,
        data TEXT NOT NULL
    );
    INSERT INTO events_new SELECT id, type, owner, session_id, task_id, ts, data FROM events;
    DROP TABLE events;
    ALTER TABLE events_new RENAME TO events
    """,
    # 5: the journal keeps one row per owner per group commit, holding the events' notifications as
    # sent: a row per event cost ~2.5 µs of SQLite each (insert, then the retention delete), the largest
    # share of relaying an update. `spans` lists [first_id, count, session_id] runs in id order; frames
    # are joined by newlines (JSON text never holds a raw one). Old events become one-event rows.
    """
    CREATE TABLE journal (
        first_id INTEGER PRIMARY KEY,
        last_id INTEGER NOT NULL,
        owner TEXT NOT NULL,
        spans TEXT NOT NULL,
        frames BLOB NOT NULL
    );
    CREATE INDEX journal_by_last ON journal(last_id);
    CREATE INDEX journal_by_owner ON journal(owner, last_id);
    CREATE TABLE journal_horizon (through INTEGER NOT NULL);
    INSERT INTO journal_horizon SELECT COALESCE(MIN(id) - 1, 0) FROM events;
    INSERT INTO journal SELECT id, id, owner, json_array(json_array(id, 1, session_id)),
        CAST(json_object('jsonrpc', '2.0', 'method', 'task.session.event', 'params', json_object(
            'id', id, 'type', type, 'session_id', session_id, 'task_id', task_id, 'ts', ts,
            'data', json(CAST(data AS TEXT)))) AS BLOB) FROM events;
    DROP TABLE events
    """,
    # 6: a session's pending permission requests are counted on every status call
    """
    CREATE INDEX permissions_by_session ON permissions(session_id, state)
    """,
]


@dataclass(frozen=True)
class TaskRow:
    id: str
    owner: str
    title: str | None
    description: str | None
    state: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class SessionRow:
    seq: int
    id: str
    task_id: str
    owner: str
    agent: str
    cwd: str
    title: str | None
    state: str
    error_message: str | None
    recovery_pending: bool
    needs_resume_context: bool
    launched: bool
    created_at: float
    updated_at: float
    task_state: str


@dataclass(frozen=True)
class ExecutorRow:
    session_id: str
    resume_token: str | None
    execution_id: str | None
    instance_id: str | None
    cwd: str
    status: str
    last_seen: float


@dataclass(frozen=True)
class StoredHistory:
    id: int
    kind: str
    name: str
    content: str
    ts: float

    def entry(self) -> HistoryEntry:
        return HistoryEntry(self.kind, self.content, self.name)


@dataclass(slots=True)
class EventRow:
    id: int
    type: str
    owner: str
    session_id: str | None
    task_id: str | None
    ts: float
    data: dict[str, Any]
    _frame: bytes | None = None

    def frame(self) -> bytes:
        """The `task.session.event` notification: what every subscriber receives and what the journal
        keeps. Encoded once, whoever needs it."""
        if self._frame is None:
            self._frame = orjson.dumps({"jsonrpc": "2.0", "method": "task.session.event", "params": {
                "id": self.id, "type": self.type, "session_id": self.session_id, "task_id": self.task_id,
                "ts": self.ts, "data": self.data}})
        return self._frame


_SESSION_COLUMNS = (
    "s.seq, s.id, s.task_id, s.owner, s.agent, s.cwd, s.title, s.state, s.error_message, s.recovery_pending, "
    "s.needs_resume_context, s.launched, s.created_at, s.updated_at, t.state"
)


def _session(row: Sequence[Any]) -> SessionRow:
    return SessionRow(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8], bool(row[9]),
                      bool(row[10]), bool(row[11]), row[12], row[13], row[14])


@dataclass(slots=True)
class EventGroup:
    """Events committed together (ascending ids) and their frames, each encoded once. `stream` is the
    (owner, session_id) they all share when they do: the common case, one agent streaming, whose
    group is written and fanned out without touching each event again."""

    events: list[EventRow]
    frames: list[bytes]
    stream: tuple[str, str | None] | None
    _message: bytes | None = None

    def message(self) -> bytes:
        """The frames as one JSON array (a JSON-RPC batch of notifications), joined once for every
        subscriber that gets them all."""
        if self._message is None:
            self._message = b"[" + b",".join(self.frames) + b"]"
        return self._message

    @classmethod
    def of(cls, events: list[EventRow]) -> EventGroup:
        first = events[0]
        shared = (len(events) == events[-1].id - first.id + 1 and len({e.owner for e in events}) == 1
                  and len({e.session_id for e in events}) == 1)
        return cls(events, [e.frame() for e in events], (first.owner, first.session_id) if shared else None)


def journal_rows(group: EventGroup) -> list[tuple[int, int, str, bytes, bytes]]:
    """One journal row per owner: (first_id, last_id, owner, spans, frames). An owner's rows never
    overlap in ids (a group commit holds all of its events of that moment), so reading them in
    `last_id` order reads its events in id order."""
    events = group.events
    if group.stream is not None:
        owner, session_id = group.stream
        first, last = events[0].id, events[-1].id
        return [(first, last, owner, orjson.dumps([[first, len(events), session_id]]), b"\n".join(group.frames))]
    by_owner: dict[str, list[tuple[EventRow, bytes]]] = {}
    for event, frame in zip(events, group.frames, strict=True):
        by_owner.setdefault(event.owner, []).append((event, frame))
    out = []
    for owner, pairs in by_owner.items():
        spans: list[list[Any]] = []
        for event, _ in pairs:
            span = spans[-1] if spans else None
            if span is not None and span[2] == event.session_id and span[0] + span[1] == event.id:
                span[1] += 1
            else:
                spans.append([event.id, 1, event.session_id])
        out.append((pairs[0][0].id, pairs[-1][0].id, owner, orjson.dumps(spans), b"\n".join([f for _, f in pairs])))
    return out


def journal_frames(spans: str | bytes, frames: bytes, since: int, until: int,
                   session_id: str | None) -> list[bytes]:
    """The frames of one journal row with since < id <= until (and of `session_id`, when given)."""
    parts = bytes(frames).split(b"\n")
    out: list[bytes] = []
    index = 0
    for first, count, sid in orjson.loads(spans):
        if session_id is None or sid == session_id:
            lo, hi = max(first, since + 1), min(first + count - 1, until)
            if lo <= hi:
                out.extend(parts[index + lo - first: index + hi - first + 1])
        index += count
    return out


class JournalWriter:
    """Writes the event journal: group commits on its own connection, on the event loop's thread.

    A group commit is a few microseconds of SQLite per event, far less than hops through a worker
    thread (a writer thread was tried: SQLite releases the GIL on every row, and the two threads
    fought over it, costing more than it saved). It may only write while no other statement holds
    the store (`Store._lock`), so it never busy-waits on SQLite's write lock with the loop blocked.
    Retention deletes ride in the same transaction as the inserts.
    """

    CHECKPOINT_BYTES = 4 << 20  # SQLite's own default: about 1000 pages

    def __init__(self, path: Path) -> None:
        self._conn: sqlite3.Connection | None = sqlite3.connect(str(path), isolation_level=None)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.execute("PRAGMA wal_autocheckpoint=0")  # Store.start_checkpoint does it off the loop
        self.unchecked_bytes = 0  # written to the WAL since the last checkpoint was started

    def append(self, group: EventGroup, prune_through: int | None = None) -> None:
        """Commit a group (ids assigned by the caller, ascending) as one row per owner, and delete the rows
        that end at or before `prune_through`, in one transaction."""
        with self._transaction() as conn:
            values = journal_rows(group)
            conn.executemany("INSERT INTO journal (first_id, last_id, owner, spans, frames) VALUES (?, ?, ?, ?, ?)",
                             values)
            self.unchecked_bytes += sum(len(v[4]) for v in values)
            if prune_through is not None:
                self._delete_through(conn, prune_through)

    def prune(self, through: int) -> None:
        """Delete the rows that end at or before `through`, in a transaction of its own."""
        with self._transaction() as conn:
            self._delete_through(conn, through)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if conn is None:
            raise RuntimeError("the store is closed")
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @staticmethod
    def _delete_through(conn: sqlite3.Connection, through: int) -> None:
        if through > 0:
            conn.execute("DELETE FROM journal WHERE last_id <= ?", (through,))
            conn.execute("UPDATE journal_horizon SET through = max(through, ?)", (through,))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class Store:
    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        self.db = db
        self.path = path
        # The event journal is written on its own connection (see JournalWriter).
        self.journal: JournalWriter | None = None
        self._lock = asyncio.Lock()
        self._checkpoint: asyncio.Task[None] | None = None
        self.tasks = TaskRepo(self)
        self.sessions = SessionRepo(self)
        self.executors = ExecutorRepo(self)
        self.history = HistoryRepo(self)
        self.cancels = CancelRepo(self)
        self.events = EventRepo(self)
        self.permissions = PermissionRepo(self)
        self.instances = InstanceRepo(self)

    @classmethod
    async def open(cls, path: Path) -> Store:
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        db = await aiosqlite.connect(str(path), isolation_level=None)
        if fresh:
            os.chmod(path, 0o600)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.execute("PRAGMA foreign_keys=ON")
        await db.execute("PRAGMA busy_timeout=5000")
        store = cls(db, path)
        await store._migrate()
        store.journal = JournalWriter(path)
        return store

    async def _migrate(self) -> None:
        async with self.db.execute("PRAGMA user_version") as cur:
            row = await cur.fetchone()
        version = int(row[0]) if row else 0
        if version > len(MIGRATIONS):
            raise RuntimeError(
                f"database {self.path} has schema version {version}, newer than this gateway "
                f"({len(MIGRATIONS)}): upgrade the gateway"
            )
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            async with self.transaction() as db:
                for statement in filter(str.strip, script.split(";")):
                    await db.execute(statement)
                await db.execute(f"PRAGMA user_version = {number}")

    async def close(self) -> None:
        await self.checkpoint_done()
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        await self.db.close()

    async def checkpoint_done(self) -> None:
        """Wait for a running WAL checkpoint, if any."""
        if self._checkpoint is not None:
            with contextlib.suppress(Exception):
                await self._checkpoint

    def start_checkpoint(self) -> None:
        """Copy the WAL into the database on aiosqlite's thread, unless a copy is already running.
        The journal's own connection never checkpoints: that copy and its fsync took milliseconds,
        and on the loop's thread they stalled every session. Without the store lock: a checkpoint is
        no transaction, and holding the lock would push journal commits onto their slow path."""
        if self.journal is None or (self._checkpoint is not None and not self._checkpoint.done()):
            return
        self.journal.unchecked_bytes = 0
        self._checkpoint = asyncio.ensure_future(self._run_checkpoint())

    async def _run_checkpoint(self) -> None:
        try:
            async with self.db.execute("PRAGMA wal_checkpoint(PASSIVE)") as cur:
                await cur.fetchall()
        except Exception:
            log.exception("WAL checkpoint failed (the next one retries)")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                await self.db.execute("ROLLBACK")
                raise
            await self.db.execute("COMMIT")

    async def write(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self._lock:
            cur = await self.db.execute(sql, params)
            rowcount = cur.rowcount
            await cur.close()
            return rowcount

    # Reads take the lock too: a cursor left open across an await holds an old snapshot, and a write
    # begun on this connection meanwhile would have to upgrade that snapshot after the journal
    # connection committed, which SQLite refuses at once (SQLITE_BUSY_SNAPSHOT, no busy wait).
    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async with self._lock, self.db.execute(sql, params) as cur:
            return await cur.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        async with self._lock, self.db.execute(sql, params) as cur:
            return list(await cur.fetchall())


class _Repo:
    def __init__(self, store: Store) -> None:
        self.store = store


class TaskRepo(_Repo):
    async def get(self, task_id: str) -> TaskRow | None:
        row = await self.store.fetchone("SELECT id, owner, title, description, state, created_at, updated_at "
                                        "FROM tasks WHERE id = ?", (task_id,))
        return TaskRow(*row) if row else None


class SessionRepo(_Repo):
    async def create(self, *, owner: str, agent: str, cwd: str, title: str | None, description: str | None,
                     task_id: str | None, task_state: str, session_state: str) -> SessionRow:
        now = time.time()
        session_id = f"s-{uuid.uuid4().hex}"
        async with self.store.transaction() as db:
            if task_id is None:
                task_id = f"t-{uuid.uuid4().hex}"
                await db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (task_id, owner, title, description, task_state, now, now))
            else:
                await db.execute("INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (task_id, owner, title, description, task_state, now, now))
            await db.execute(
                "INSERT INTO sessions (id, task_id, owner, agent, cwd, title, state, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, task_id, owner, agent, cwd, title, session_state, now, now),
            )
            await db.execute("INSERT INTO executors (session_id, cwd, status, last_seen) VALUES (?, ?, 'created', ?)",
                             (session_id, cwd, now))
        row = await self.get(session_id)
        assert row is not None
        return row

    async def get(self, session_id: str, owner: str | None = None) -> SessionRow | None:
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions s JOIN tasks t ON t.id = s.task_id WHERE s.id = ?"
        params: list[Any] = [session_id]
        if owner is not None:
            sql += " AND s.owner = ?"
            params.append(owner)
        row = await self.store.fetchone(sql, params)
        return _session(row) if row else None

    async def with_status_facts(self, session_id: str, owner: str) -> tuple[SessionRow, ExecutorRow | None, int] | None:
        """A session with its executor row and its count of pending permission requests: what a status
        call needs, in one read (a status call is the frontends' most frequent one)."""
        row = await self.store.fetchone(
            f"SELECT {_SESSION_COLUMNS}, e.session_id, e.resume_token, e.execution_id, e.instance_id, e.cwd, "
            "e.status, e.last_seen, (SELECT COUNT(*) FROM permissions p WHERE p.session_id = s.id "
            "AND p.state = 'pending') FROM sessions s JOIN tasks t ON t.id = s.task_id "
            "LEFT JOIN executors e ON e.session_id = s.id WHERE s.id = ? AND s.owner = ?", (session_id, owner))
        if row is None:
            return None
        executor = ExecutorRow(*row[15:22]) if row[15] is not None else None
        return _session(row), executor, int(row[22])

    async def list(self, owner: str, *, states: Iterable[str] | None, before_seq: int | None,
                   limit: int) -> list[SessionRow]:
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions s JOIN tasks t ON t.id = s.task_id WHERE s.owner = ?"
        params: list[Any] = [owner]
        if before_seq is not None:
            sql += " AND s.seq < ?"
            params.append(before_seq)
        state_list = list(states or [])
        if state_list:
            sql += f" AND s.state IN ({', '.join('?' * len(state_list))})"
            params += state_list
        sql += " ORDER BY s.seq DESC LIMIT ?"
        params.append(limit)
        return [_session(r) for r in await self.store.fetchall(sql, params)]

    async def update(self, session_id: str, *, state: str | None = None, task_state: str | None = None,
                     **fields: Any) -> None:
        """Change the session (and its task) in one transaction. `fields` are session columns."""
        allowed = {"title", "error_message", "recovery_pending", "needs_resume_context", "launched"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not session columns: {sorted(unknown)}")
        now = time.time()
        sets = ["updated_at = ?"]
        params: list[Any] = [now]
        if state is not None:
            sets.append("state = ?")
            params.append(state)
        for key, value in fields.items():
            sets.append(f"{key} = ?")
            params.append(int(value) if isinstance(value, bool) else value)
        async with self.store.transaction() as db:
            await db.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", (*params, session_id))
            if task_state is not None:
                await db.execute("UPDATE tasks SET state = ?, updated_at = ? WHERE id = "
                                 "(SELECT task_id FROM sessions WHERE id = ?)", (task_state, now, session_id))

    async def delete(self, session_id: str) -> None:
        async with self.store.transaction() as db:
            row = await (await db.execute("SELECT task_id FROM sessions WHERE id = ?", (session_id,))).fetchone()
            await db.execute("DELETE FROM history WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM executors WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM permissions WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM cancel_requests WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            if row:
                await db.execute("DELETE FROM tasks WHERE id = ? AND NOT EXISTS "
                                 "(SELECT 1 FROM sessions WHERE task_id = ?)", (row[0], row[0]))


class ExecutorRepo(_Repo):
    async def get(self, session_id: str) -> ExecutorRow | None:
        row = await self.store.fetchone(
            "SELECT session_id, resume_token, execution_id, instance_id, cwd, status, last_seen "
            "FROM executors WHERE session_id = ?", (session_id,))
        return ExecutorRow(*row) if row else None

    async def set_running(self, session_id: str, *, execution_id: str, instance_id: str, cwd: str) -> None:
        await self.store.write(
            "INSERT INTO executors (session_id, execution_id, instance_id, cwd, status, last_seen) "
            "VALUES (?, ?, ?, ?, 'running', ?) ON CONFLICT(session_id) DO UPDATE SET "
            "execution_id = excluded.execution_id, instance_id = excluded.instance_id, cwd = excluded.cwd, "
            "status = 'running', last_seen = excluded.last_seen",
            (session_id, execution_id, instance_id, cwd, time.time()))

    async def set_token(self, session_id: str, token: str | None) -> None:
        await self.store.write("UPDATE executors SET resume_token = ?, last_seen = ? WHERE session_id = ?",
                               (token, time.time(), session_id))

    async def set_stopped(self, session_id: str, status: str = "stopped") -> None:
        await self.store.write("UPDATE executors SET status = ?, execution_id = NULL, last_seen = ? "
                               "WHERE session_id = ?", (status, time.time(), session_id))

    async def touch(self, instance_id: str) -> None:
        await self.store.write("UPDATE executors SET last_seen = ? WHERE instance_id = ? AND status = 'running'",
                               (time.time(), instance_id))


class HistoryRepo(_Repo):
    async def append(self, session_id: str, entries: Iterable[HistoryEntry]) -> None:
        now = time.time()
        rows = [(session_id, e.kind, e.name, e.content, now) for e in entries]
        if not rows:
            return
        async with self.store.transaction() as db:
            await db.executemany("INSERT INTO history (session_id, kind, name, content, ts) VALUES (?, ?, ?, ?, ?)",
                                 rows)

    async def page(self, session_id: str, after: int, limit: int) -> list[StoredHistory]:
        rows = await self.store.fetchall(
            "SELECT id, kind, name, content, ts FROM history WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
            (session_id, after, limit))
        return [StoredHistory(*r) for r in rows]

    async def all(self, session_id: str) -> list[HistoryEntry]:
        rows = await self.store.fetchall(
            "SELECT kind, content, name FROM history WHERE session_id = ? ORDER BY id", (session_id,))
        return [HistoryEntry(r[0], r[1], r[2]) for r in rows]

    async def exists(self, session_id: str) -> bool:
        return await self.store.fetchone("SELECT 1 FROM history WHERE session_id = ? LIMIT 1", (session_id,)) \
            is not None


class CancelRepo(_Repo):
    async def request(self, session_id: str) -> None:
        await self.store.write("INSERT OR IGNORE INTO cancel_requests VALUES (?, ?)", (session_id, time.time()))

    async def pending(self) -> list[str]:
        return [r[0] for r in await self.store.fetchall("SELECT session_id FROM cancel_requests")]

    async def clear(self, session_id: str) -> None:
        await self.store.write("DELETE FROM cancel_requests WHERE session_id = ?", (session_id,))


# The owner's rows that end inside (since, end], and the one row that may start inside it and end
# after it (an owner's rows never overlap, so it is their first one past `end`): two index seeks on
# (owner, last_id), whatever the size of the journal.
REPLAY_PAGE = """
    SELECT last_id, spans, frames FROM journal WHERE owner = :owner AND last_id > :since AND last_id <= :end
    UNION ALL
    SELECT last_id, spans, frames FROM (
        SELECT first_id, last_id, spans, frames FROM journal WHERE owner = :owner AND last_id > :end
        ORDER BY last_id LIMIT 1)
    WHERE first_id <= :end
    ORDER BY 1
"""


class EventRepo(_Repo):
    def can_append_now(self) -> bool:
        """True when no other statement holds the store, so `append_batch_now` may write at once."""
        return not self.store._lock.locked()

    def append_batch_now(self, group: EventGroup, prune_through: int | None = None) -> None:
        """One transaction for a whole batch (group commit), written synchronously: only when
        `can_append_now()`, which nothing can change before this returns."""
        if self.store._lock.locked():
            raise RuntimeError("append_batch_now while the store is busy: use append_batch")
        self._append(group, prune_through)

    async def append_batch(self, group: EventGroup, prune_through: int | None = None) -> None:
        """The same, waiting for the store when another statement holds it."""
        async with self.store._lock:
            self._append(group, prune_through)

    def _journal(self) -> JournalWriter:
        if self.store.journal is None:
            raise RuntimeError("the store is closed")
        return self.store.journal

    def _append(self, group: EventGroup, prune_through: int | None) -> None:
        journal = self._journal()
        journal.append(group, prune_through)
        if journal.unchecked_bytes >= journal.CHECKPOINT_BYTES:
            self.store.start_checkpoint()

    async def head(self) -> int:
        row = await self.store.fetchone("SELECT MAX(last_id) FROM journal")
        return int(row[0] or 0)

    async def next_id(self) -> int:
        """Past the journal's head: pruning always keeps the newest events, so ids never repeat."""
        return await self.head() + 1

    async def horizon(self) -> int:
        """Every event with a greater id is in the journal; those up to it may have been pruned."""
        row = await self.store.fetchone("SELECT through FROM journal_horizon")
        return int(row[0]) if row else 0

    async def after(self, owner: str, since: int, until: int, session_id: str | None = None,
                    window: int = 5000) -> tuple[list[bytes], int | None]:
        """The owner's notifications with since < id <= until, in id order, a window of ids at a time (so
        a page holds at most `window` frames): (frames, the cursor to ask from next, or None when done)."""
        end = min(until, since + window)
        rows = await self.store.fetchall(REPLAY_PAGE, {"owner": owner, "since": since, "end": end})
        frames: list[bytes] = []
        for _last, spans, blob in rows:
            frames.extend(journal_frames(spans, blob, since, end, session_id))
        return frames, (end if end < until else None)

    async def prune(self, keep: int) -> None:
        """Keep (at least) the newest `keep` events: the retention horizon, a whole row at a time."""
        through = await self.head() - keep
        async with self.store._lock:
            self._journal().prune(through)


class PermissionRepo(_Repo):
    async def add(self, request_id: str, session_id: str, owner: str, params: dict[str, Any],
                  event_id: int | None = None) -> None:
        await self.store.write(
            "INSERT INTO permissions (id, session_id, owner, params, state, created_at, event_id) "
            "VALUES (?, ?, ?, ?, 'pending', ?, ?)",
            (request_id, session_id, owner, orjson.dumps(params).decode(), time.time(), event_id))

    async def set_event(self, request_id: str, event_id: int) -> None:
        await self.store.write("UPDATE permissions SET event_id = ? WHERE id = ?", (event_id, request_id))

    async def resolve(self, request_id: str, answer: dict[str, Any]) -> bool:
        """First answer wins: True only for the call that moved it from pending."""
        changed = await self.store.write(
            "UPDATE permissions SET state = 'resolved', answer = ? WHERE id = ? AND state = 'pending'",
            (orjson.dumps(answer).decode(), request_id))
        return changed == 1

    async def get(self, request_id: str) -> tuple[str, str, str, dict[str, Any]] | None:
        row = await self.store.fetchone("SELECT session_id, owner, state, params FROM permissions WHERE id = ?",
                                        (request_id,))
        return (row[0], row[1], row[2], orjson.loads(row[3])) if row else None

    async def pending(self, owner: str, session_id: str | None = None) -> list[tuple[str, str, int | None,
                                                                                        dict[str, Any]]]:
        sql = "SELECT id, session_id, event_id, params FROM permissions WHERE owner = ? AND state = 'pending'"
        params: list[Any] = [owner]
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        rows = await self.store.fetchall(sql + " ORDER BY created_at", params)
        return [(r[0], r[1], r[2], orjson.loads(r[3])) for r in rows]

    async def expire_all(self) -> int:
        """After a restart no agent waits for an answer any more."""
        return await self.store.write("UPDATE permissions SET state = 'expired' WHERE state = 'pending'")


class InstanceRepo(_Repo):
    async def register(self, instance_id: str) -> None:
        """This gateway holds the state-dir lock: every earlier instance is dead (one row each)."""
        async with self.store.transaction() as db:
            await db.execute("UPDATE instances SET alive = 0 WHERE alive = 1")
            await db.execute("INSERT INTO instances VALUES (?, ?, ?, 1)", (instance_id, os.getpid(), time.time()))

    async def is_alive(self, instance_id: str) -> bool:
        row = await self.store.fetchone("SELECT alive FROM instances WHERE id = ?", (instance_id,))
        return bool(row and row[0])

    async def mark_dead(self, instance_id: str) -> None:
        await self.store.write("UPDATE instances SET alive = 0 WHERE id = ?", (instance_id,))
