"""The embedded store: one SQLite file in WAL mode (the default; docs/architecture.md: The store and the journal).

- A write returns only after it is committed (WAL + synchronous=NORMAL is durable against process death; power
  loss may drop the last commits, which is the documented limit).
- Multi-statement changes go through `transaction()`, serialised by one lock.
- Schema changes are numbered migrations recorded in `PRAGMA user_version`.
"""


from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import aiosqlite

from ..errors import is_storage_error
from .base import StoreBase, StoreInUse
from .journal import JournalEntry, JournalWriter, PruneGoal
from .migrations import MIGRATIONS
from .rows import EventGroup
from .sql import Tx

log = logging.getLogger(__name__)


async def _reclaimable(db: aiosqlite.Connection, path: Path) -> None:
    """Make the file give back the pages that deletes free (`Store.reclaim_soon`). A new file only needs the
    setting before its first table; a file made before it needs one VACUUM, which rewrites it (once)."""
    async with db.execute("PRAGMA auto_vacuum") as cur:
        row = await cur.fetchone()
    if row is not None and row[0] == 2:
        return
    await db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    async with db.execute("SELECT count(*) FROM sqlite_master") as cur:
        row = await cur.fetchone()
    if row is not None and row[0]:
        log.info("rewriting %s once so that deleted sessions give their space back (VACUUM)", path)
        await db.execute("VACUUM")


class _SqliteTx:
    def __init__(self, db: aiosqlite.Connection) -> None:
        self.db = db

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = await self.db.execute(sql, params)
        changed = cur.rowcount
        await cur.close()
        return changed

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self.db.executemany(sql, rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async with self.db.execute(sql, params) as cur:
            return await cur.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self.db.execute(sql, params) as cur:
            return list(await cur.fetchall())


class SqliteStore(StoreBase):
    kind = "sqlite"

    def __init__(self, db: aiosqlite.Connection, path: Path) -> None:
        super().__init__()
        self.db = db
        self.path = path
        # The event journal is written on its own connection (see JournalWriter).
        self.journal: JournalWriter | None = None
        self._lock = asyncio.Lock()
        self._checkpoint: asyncio.Task[None] | None = None
        self.failure: str | None = None  # the last write's storage fault, until a write succeeds again
        self._reclaim: asyncio.Task[None] | None = None
        self.max_pages = 0  # the file's cap in pages (0: none)
        self._claim: IO[bytes] | None = None
        self._reader: aiosqlite.Connection | None = None  # journal reads (see read_journal)

    @classmethod
    async def open(cls, path: Path, max_bytes: int = 0) -> SqliteStore:
        """Open (creating and migrating) the store at `path`. `max_bytes` > 0 caps the database file: a write
        that would grow it further fails as a full disk does (STORAGE_FAILED), whatever room the disk has."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not path.exists()
        db = await aiosqlite.connect(str(path), isolation_level=None)
        if fresh:
            os.chmod(path, 0o600)
        await db.execute("PRAGMA busy_timeout=5000")
        await _reclaimable(db, path)
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        store = cls(db, path)
        await store._migrate()
        await db.execute("PRAGMA foreign_keys=ON")
        store.journal = JournalWriter(path)
        store._reader = await aiosqlite.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
        await store._reader.execute("PRAGMA busy_timeout=5000")
        if max_bytes > 0:
            pages = max(1, max_bytes // store.journal.page_counts()[2])
            await db.execute(f"PRAGMA max_page_count = {pages}")
            store.journal.cap_pages(pages)
            store.max_pages = pages
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
        # Foreign keys are off while migrating (they are turned on after): a migration that rebuilds a table drops
        # the old one, which with them on would cascade into every row that refers to it. Each migration checks
        # them itself before it commits.
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            async with self._connection_transaction() as db:
                for statement in filter(str.strip, script.split(";")):
                    await db.execute(statement)
                async with db.execute("PRAGMA foreign_key_check") as cur:
                    broken = list(await cur.fetchall())
                if broken:
                    raise RuntimeError(f"migration {number} of {self.path} left rows without their parent: "
                                       f"{broken[:5]}")
                await db.execute(f"PRAGMA user_version = {number}")

    async def claim(self) -> None:
        """One gateway per file: an exclusive lock on `<file>.lock` (a store outside the state directory could
        otherwise be shared by two gateways with different state directories). It goes with the process."""
        lock = open(f"{self.path}.lock", "a+b")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StoreInUse(f"another acp-gateway serves the store {self.path}") from None
        self._claim = lock

    async def close(self) -> None:
        if self._claim is not None:
            self._claim.close()
            self._claim = None
        if self._reclaim is not None:
            self._reclaim.cancel()
            with contextlib.suppress(BaseException):
                await self._reclaim
        await self.checkpoint_done()
        if self._reader is not None:
            await self._reader.close()
            self._reader = None
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

    RECLAIM_PAGES = 256  # pages given back per step (1 MiB at 4 KiB): a short write, then others get the store

    def reclaim_soon(self) -> None:
        """Give the pages that deletes freed back to the file system, a step at a time, unless that already runs
        (called after a session is deleted; a pruned journal's pages are reused by the events that follow)."""
        if self._reclaim is None or self._reclaim.done():
            self._reclaim = asyncio.ensure_future(self._run_reclaim())

    async def _run_reclaim(self) -> None:
        try:
            while True:
                async with self._lock:
                    async with self.db.execute("PRAGMA freelist_count") as cur:
                        row = await cur.fetchone()
                    if not row or not row[0]:
                        return
                    async with self.db.execute(f"PRAGMA incremental_vacuum({self.RECLAIM_PAGES})") as cur:
                        await cur.fetchall()
                await asyncio.sleep(0)
        except Exception as exc:
            log.warning("giving freed space back failed (the next delete retries): %s", exc)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Tx]:
        async with self._connection_transaction() as db:
            yield _SqliteTx(db)

    @contextlib.asynccontextmanager
    async def _connection_transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            with self.watching():
                await self.db.execute("BEGIN IMMEDIATE")
                try:
                    yield self.db
                    await self.db.execute("COMMIT")  # a full disk may refuse the commit itself: rolled back below
                except BaseException:
                    if self.db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            await self.db.execute("ROLLBACK")
                    raise

    async def write(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self._lock:
            with self.watching():
                cur = await self.db.execute(sql, params)
                rowcount = cur.rowcount
                await cur.close()
                return rowcount

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Record whether the writes inside reached the disk (both connections' writes go through here):
        `health()` reports the last storage fault until a write succeeds again."""
        try:
            yield
        except Exception as exc:
            if is_storage_error(exc):
                self.failure = str(exc)
            raise
        if self.failure is not None and self._has_room():
            self.failure = None

    ROOM_BYTES = 1 << 20

    def _has_room(self) -> bool:
        """After a refused write, a small write may still succeed in pages the file has: the store counts as
        healthy again only once it has room to grow (1 MiB on the disk and under `max_bytes`)."""
        try:
            disk = os.statvfs(self.path.parent)
        except OSError:
            return False
        if disk.f_bavail * disk.f_frsize < self.ROOM_BYTES:
            return False
        if self.max_pages and self.journal is not None:
            pages, free, size = self.journal.page_counts()
            return (self.max_pages - pages + free) * size >= self.ROOM_BYTES
        return True

    def health(self) -> str | None:
        """None while writes succeed; else the fault, until a write succeeds again. (A probe write proves little:
        SQLite reuses the WAL's space, so a no-op write succeeds on a full disk that refuses real ones.)"""
        return self.failure

    # Reads take the lock too: a cursor left open across an await holds an old snapshot, and a write
    # begun on this connection meanwhile would have to upgrade that snapshot after the journal
    # connection committed, which SQLite refuses at once (SQLITE_BUSY_SNAPSHOT, no busy wait).
    # Each runs to its end in one job on aiosqlite's thread, so no statement stays open between jobs: the WAL
    # checkpoint, which runs on this connection without the lock, failed ("database table is locked") when it came
    # between a read's execute and its fetch (seen with eight sessions flooding terminal output).
    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async with self._lock:
            rows = await self.db.execute_fetchall(sql, params)
        return next(iter(rows), None)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self._lock:
            return list(await self.db.execute_fetchall(sql, params))

    async def read_journal(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """On a read-only connection of its own: in WAL mode a reader never blocks the journal's writer, so these
        reads need not hold the store (which sends every group commit meanwhile down its slow path), and they no
        longer share aiosqlite's connection with the WAL checkpoint (which then failed: "table is locked"). A
        slow subscriber fed from the journal during a flood reads here all the time.

        The statement runs to its end in one job on the connection's thread (`execute_fetchall`): as a cursor opened
        by one job and read by the next, it kept the connection's read transaction open in between, and another
        subscriber's read on the same connection then saw that older snapshot — without the events committed
        since, which its feeder took for a gap (found by tests/gateway/journal/test_subscription_model.py)."""
        if self._reader is None:
            return await self.fetchall(sql, params)
        return list(await self._reader.execute_fetchall(sql, params))

    # -- the event journal: written on its own connection (see JournalWriter) ---------------------------------
    def can_append_now(self) -> bool:
        """True when no other statement holds the store, so `append_now` may write at once."""
        return not self._lock.locked()

    def append_now(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]:
        """One transaction for a whole group (group commit), written synchronously: only when `can_append_now()`,
        which nothing can change before this returns."""
        if self._lock.locked():
            raise RuntimeError("append_now while the store is busy: use append")
        return self._append(group, prune)

    async def append(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]:
        async with self._lock:
            return self._append(group, prune)

    def _journal(self) -> JournalWriter:
        if self.journal is None:
            raise RuntimeError("the store is closed")
        return self.journal

    def _append(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]:
        journal = self._journal()
        with self.watching():
            pruned = journal.append(group, prune)
        if journal.unchecked_bytes >= journal.CHECKPOINT_BYTES:
            self.start_checkpoint()
        # No reclaim here: the pages a prune frees are what the next events are written into (giving them back
        # to the file system mid-stream held the store's lock and sent every group commit down its slow path:
        # a third of a flood's time, measured).
        return pruned

    async def listen(self, on_commit: Callable[[str, int, list[JournalEntry] | None], None]) -> None:
        """Only this gateway writes its SQLite file: there is nobody else to hear of."""

    async def prune(self, prune: Mapping[str, PruneGoal]) -> dict[str, int]:
        async with self._lock:
            with self.watching():
                return self._journal().prune(prune)
