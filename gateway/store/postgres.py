"""The PostgreSQL store (docs/architecture.md: Cluster): the same repositories over a pool of asyncpg connections.

asyncpg, not psycopg 3: on the gateway's two hottest statements (a journal group commit and a status read),
`bench/pg_drivers.py` measured asyncpg faster on both in the same run (commits ~10%, reads ~30%), and both
drivers do what else the store needs (transactions, LISTEN/NOTIFY). The repositories' SQL uses `?`
placeholders; they are numbered (`$1`, `$2`, …) here, once per statement text.

Every write commits before it returns. Journal group commits run on a connection of their own, and the usual one
(one owner, no pruning due, no agent-host mark) is a single statement: it was six round trips through the pool
(BEGIN, the owner's head, the rows, NOTIFY, COMMIT, and the pool's reset of the connection), ~2 ms of a cluster
node's 2.3 ms delivery p50, measured with py-spy. With `journal_synchronous_commit = false` that connection commits
without waiting for the WAL flush (PostgreSQL's `synchronous_commit = off`, for journal rows only): see
docs/deployment.md for what that trades.
Migrations run under an advisory lock, so nodes starting together migrate once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..errors import is_storage_error
from .base import StoreBase
from .commands import CommandRepo
from .journal import (
    MOVE_HORIZON,
    OLDEST_ROWS,
    PRUNE_ROWS,
    PRUNED_BYTES,
    SET_MARK,
    JournalEntry,
    PruneGoal,
    journal_rows,
    mark_rows,
    prune_through,
    renumber,
)
from .leases import LeaseRepo
from .notices import JOURNAL_CHANNEL, commit_notice, notice_key, read_notice
from .pg_migrations import PG_MIGRATIONS
from .rows import EventGroup
from .sql import Tx

log = logging.getLogger(__name__)

MIGRATION_LOCK = 0x61637067  # pg_advisory_xact_lock key: "acpg"
# One owner's group commit as one statement: the head moves from the id before the group's only if nobody took
# those ids; then (and only then) its row is written and listeners are told. A statement is all or nothing, and the
# head row's lock makes a concurrent writer re-read it (and find it moved).
JOURNAL_AS_PROVISIONAL = """
WITH head AS (UPDATE journal_heads SET last_id = $3 WHERE owner = $1 AND last_id = $2 RETURNING last_id),
written AS (INSERT INTO journal (owner, first_id, last_id, size, spans, frames)
            SELECT $1, $2 + 1, head.last_id, $4, $5, $6 FROM head RETURNING last_id)
SELECT pg_notify($7, $8) FROM written"""


@functools.lru_cache(maxsize=512)
def numbered(sql: str) -> str:
    """`?` placeholders as PostgreSQL's `$1`, `$2`, … (the repositories' SQL holds no `?` inside a literal)."""
    counter = iter(range(1, 10_000))
    return re.sub(r"\?", lambda _: f"${next(counter)}", sql)


async def _session_kept(conn: asyncpg.Connection) -> None:
    """A pooled connection goes back as it is: asyncpg rolls back a transaction left open, and then by default sends
    `RESET ALL; UNLISTEN *; CLOSE ALL; pg_advisory_unlock_all()`, a round trip more after every statement
    (`SELECT 1` through the pool: 289 µs p50 with it, 160 µs without; 90 µs on a connection of its own, measured).
    Nothing here changes a session's state: no SET, LISTEN (the listener has a connection of its own), cursor or
    session-level advisory lock."""


def _changed(status: str) -> int:
    """The row count of a command status such as `UPDATE 3` or `INSERT 0 1`."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


class _PgTx:
    def __init__(self, conn: PoolConnectionProxy[Any] | asyncpg.Connection) -> None:
        self.conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return _changed(await self.conn.execute(numbered(sql), *params))

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self.conn.executemany(numbered(sql), list(rows))

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = await self.conn.fetchrow(numbered(sql), *params)
        return tuple(row) if row is not None else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return [tuple(r) for r in await self.conn.fetch(numbered(sql), *params)]


class PostgresStore(StoreBase):
    kind = "postgresql"
    shared_journal = True

    def __init__(self, pool: asyncpg.Pool, url: str, settings: dict[str, str] | None = None,
                 journal_synchronous_commit: bool = True, cluster_secret: bytes = b"") -> None:
        super().__init__()
        self.pool = pool
        self.url = url
        self.settings = settings or {}  # each connection's server settings (the node it writes as)
        self.journal_synchronous_commit = journal_synchronous_commit
        # Seals the events a commit's notification carries; without a cluster secret, notifications only wake.
        self.notice_key = notice_key(cluster_secret) if cluster_secret else None
        self._journal: asyncpg.Connection | None = None  # journal group commits' own connection, made when needed
        self._journal_lock = asyncio.Lock()
        self.failure: str | None = None  # the last write's fault, until a write succeeds again
        self._channels: dict[str, Callable[[str], None]] = {}  # LISTENed to, on `_listener`
        self._listener: asyncpg.Connection | None = None
        self.writer_id = uuid.uuid4().hex[:12]  # in its notifications, so it does not wake itself
        self.leases = LeaseRepo(self)
        self.commands = CommandRepo(self)
        self._listening: asyncio.Task[None] | None = None
        self._first_listen = asyncio.Event()  # the first listening connection is up (or failed: polling covers it)

    @classmethod
    async def open(cls, url: str, max_bytes: int = 0, pool_size: int = 10, node: str | None = None,
                   journal_synchronous_commit: bool = True, cluster_secret: bytes = b"") -> PostgresStore:
        """Connect and migrate. `max_bytes` is SQLite's file cap: on PostgreSQL, the server's own quotas apply.
        `node` (a gateway process: its node id and incarnation) is who its writes are fenced as (migration 4)."""
        settings = {"application_name": "acp-gateway", **({"acp.node": node} if node else {})}
        pool = await asyncpg.create_pool(url, min_size=1, max_size=pool_size, command_timeout=60,
                                         server_settings=settings, reset=_session_kept)
        store = cls(pool, url, settings, journal_synchronous_commit, cluster_secret)
        try:
            await store._migrate()
        except BaseException:
            await pool.close()
            raise
        return store

    async def _migrate(self) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
            await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
            version = await conn.fetchval("SELECT MAX(version) FROM schema_version") or 0
            if version > len(PG_MIGRATIONS):
                raise RuntimeError(f"the PostgreSQL store has schema version {version}, newer than this gateway "
                                   f"({len(PG_MIGRATIONS)}): upgrade the gateway")
            for number, script in enumerate(PG_MIGRATIONS[version:], start=version + 1):
                await conn.execute(script)
                await conn.execute("INSERT INTO schema_version VALUES ($1)", number)
                log.info("PostgreSQL store migrated to schema version %d", number)

    async def claim(self) -> None:
        """Nothing to claim: every gateway on this store is a node of one cluster (leases say who runs what)."""

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(BaseException):
                await self._listening
        await self._drop_journal_connection()
        await self.pool.close()

    # -- statements ----------------------------------------------------------------------------------------
    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async with self.watching(reading=True):
            row = await self.pool.fetchrow(numbered(sql), *params)
        return tuple(row) if row is not None else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self.watching(reading=True):
            rows = await self.pool.fetch(numbered(sql), *params)
        return [tuple(r) for r in rows]

    async def write(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self.watching():
            return _changed(await self.pool.execute(numbered(sql), *params))

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        async with self.watching(), self.pool.acquire() as conn, conn.transaction():
            yield _PgTx(conn)

    @contextlib.asynccontextmanager
    async def watching(self, reading: bool = False) -> AsyncIterator[None]:
        """Record whether the statements inside reached the server: `health()` reports the last fault until a
        write succeeds again (a read that succeeds says nothing of writes). After a connection fault every pooled
        connection is replaced: when the server ended one (a restart, a failover, an operator), it ended them all,
        and asyncpg may hand out such a connection again in a confused state (asyncpg#1069)."""
        try:
            yield
        except Exception as exc:
            if is_storage_error(exc):
                self.failure = f"PostgreSQL: {exc}"
                await self.pool.expire_connections()
            raise
        if not reading:
            self.failure = None

    def health(self) -> str | None:
        return self.failure

    def reclaim_soon(self) -> None:
        """Nothing to do: PostgreSQL's autovacuum reuses the space deletes free."""

    # -- the event journal ---------------------------------------------------------------------------------
    async def append(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]:
        """Each owner's ids are taken from its `journal_heads` row in the same transaction as its rows (its lock
        orders the owner's writers on every node, so ids are gap-free and visible in commit order). Where another
        writer took the group's provisional ids, its events are renumbered in place, frames and all, before they are
        written; the caller's EventRows carry the final ids. The group's agent-host marks are written in the same
        transaction. Listeners hear of the commit (NOTIFY, sent at commit)."""
        async with self._journal_lock, self.watching():
            conn = await self._journal_connection()
            try:
                one_owner = group.stream is not None or len({event.owner for event in group.events}) == 1
                # Marks go in the transaction below, with the rows: the one-statement path has no room for them.
                if not prune and not group.marks and one_owner and await self._append_as_provisional(conn, group):
                    return {}
                async with conn.transaction():
                    return await self._append_renumbered(_PgTx(conn), group, prune)
            except Exception as exc:
                if is_storage_error(exc):
                    await self._drop_journal_connection()  # the next group commits on a new one
                raise

    async def _append_as_provisional(self, conn: asyncpg.Connection, group: EventGroup) -> bool:
        """One owner's group, in one statement (so one transaction, one round trip), if its provisional ids are still
        the next ones: its head moves only from the id before them, and only then are its rows written and its
        listeners told. False, and nothing written, when another writer took those ids first (or it is the owner's
        first event): the caller renumbers."""
        first, last, owner, spans, frames = journal_rows(group)[0]
        done = await conn.fetch(JOURNAL_AS_PROVISIONAL, owner, first - 1, last, len(frames), spans.decode(), frames,
                                JOURNAL_CHANNEL, commit_notice(last, self.writer_id, owner, spans, frames,
                                                               self.notice_key))
        return bool(done)

    async def _append_renumbered(self, tx: Tx, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[
            str, int]:
        counts: dict[str, int] = {}
        for event in group.events:
            counts[event.owner] = counts.get(event.owner, 0) + 1
        lasts: dict[str, int] = {}
        for owner in sorted(counts):  # one order on every node: no deadlock between two owners' rows
            row = await tx.fetchone("INSERT INTO journal_heads VALUES (?, ?) ON CONFLICT (owner) DO UPDATE SET "
                                    "last_id = journal_heads.last_id + excluded.last_id RETURNING last_id",
                                    (owner, counts[owner]))
            lasts[owner] = int(row[0])
        renumber(group, {owner: last - counts[owner] + 1 for owner, last in lasts.items()})
        if group.marks:  # if the rows then fail, the rollback takes it too (test_agent_hosts_store)
            await tx.executemany(SET_MARK, mark_rows(group.marks, time.time()))
        written = journal_rows(group)
        rows = [(owner, first, last, len(frames), spans.decode(), frames)
                for first, last, owner, spans, frames in written]
        await tx.executemany("INSERT INTO journal (owner, first_id, last_id, size, spans, frames) "
                             "VALUES (?, ?, ?, ?, ?, ?)", rows)
        for _, last, owner, spans, frames in written:
            await tx.execute("SELECT pg_notify(?, ?)", (JOURNAL_CHANNEL, commit_notice(
                last, self.writer_id, owner, spans, frames, self.notice_key)))
        return {owner: await _prune(tx, owner, goal) for owner, goal in (prune or {}).items()}

    async def _journal_connection(self) -> asyncpg.Connection:
        if self._journal is None or self._journal.is_closed():
            settings = dict(self.settings, application_name="acp-gateway-journal")
            if not self.journal_synchronous_commit:
                settings["synchronous_commit"] = "off"
            self._journal = await asyncpg.connect(self.url, command_timeout=60, server_settings=settings)
        return self._journal

    async def _drop_journal_connection(self) -> None:
        conn, self._journal = self._journal, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), 5)

    async def listen(self, on_commit: Callable[[str, int, list[JournalEntry] | None], None]) -> None:
        def heard(payload: str) -> None:
            notice = read_notice(payload, self.notice_key)
            if notice is not None and notice[2] != self.writer_id:  # not its own commits
                on_commit(notice[0], notice[1], notice[3])

        await self.hear(JOURNAL_CHANNEL, heard)

    async def hear(self, channel: str, callback: Callable[[str], None]) -> None:
        """Call `callback(payload)` for each NOTIFY on `channel`, on one listening connection of this store's own
        (replaced when lost: a notification is only a wake-up, and whoever listens also polls)."""
        self._channels[channel] = callback
        if self._listening is None:
            self._listening = asyncio.ensure_future(self._keep_listening())
            # Listening before this returns: a commit made once `hear` returned wakes this process at once (else it
            # would wait for a poll).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._first_listen.wait(), 10)
        elif self._listener is not None:
            await self._add_listener(self._listener, channel)

    async def _add_listener(self, conn: asyncpg.Connection, channel: str) -> None:
        def heard(_conn: asyncpg.Connection | PoolConnectionProxy[Any], _pid: int, _channel: str,
                  payload: object) -> None:
            callback = self._channels.get(channel)
            if callback is not None:
                callback(str(payload))

        with contextlib.suppress(Exception):
            await conn.add_listener(channel, heard)

    async def _keep_listening(self) -> None:
        while True:
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(self.url, server_settings={"application_name": "acp-gateway-listen"})
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                for channel in list(self._channels):
                    await self._add_listener(conn, channel)
                self._listener = conn
                self._first_listen.set()
                try:
                    await lost.wait()
                finally:
                    self._listener = None
                    with contextlib.suppress(Exception):
                        await conn.close()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("listening for notifications failed (polling meanwhile): %s", exc)
                self._first_listen.set()  # nobody waits for it any longer: the poll covers what it misses
            await asyncio.sleep(1.0)

    async def prune(self, prune: Mapping[str, PruneGoal]) -> dict[str, int]:
        async with self.transaction() as tx:
            return {owner: await _prune(tx, owner, goal) for owner, goal in prune.items()}


async def _prune(tx: Tx, owner: str, goal: PruneGoal) -> int:
    """Delete the owner's oldest rows (see `prune_through`), move its horizon; the bytes deleted."""
    rows = await tx.fetchall(OLDEST_ROWS, (owner, owner)) if goal.drop_bytes > 0 else []
    through = prune_through(goal, rows)
    if through <= 0:
        return 0
    freed = (await tx.fetchone(PRUNED_BYTES, (owner, through)))[0]
    await tx.execute(PRUNE_ROWS, (owner, through))
    await tx.execute(MOVE_HORIZON, (owner, through))
    return int(freed)
