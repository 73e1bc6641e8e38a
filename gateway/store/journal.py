"""The event journal's storage: one row per owner per group commit, written on its own connection."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from .rows import EventGroup, EventRow


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
            conn.execute("COMMIT")  # a full disk may refuse the commit itself: rolled back below, then raised
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _delete_through(conn: sqlite3.Connection, through: int) -> None:
        if through > 0:
            conn.execute("DELETE FROM journal WHERE last_id <= ?", (through,))
            conn.execute("UPDATE journal_horizon SET through = max(through, ?)", (through,))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
