"""The event journal's storage: one row per owner per group commit, written on its own connection."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .rows import EventGroup, EventRow

# One event as the journal keeps it: (id, session id, its `task.session.event` frame).
JournalEntry = tuple[int, str | None, bytes]


@dataclass(frozen=True)
class PruneGoal:
    """What to prune of one owner's journal: the rows ending at or before `through` (the count retention),
    then, oldest first, rows until `drop_bytes` are gone (the byte retention)."""

    through: int
    drop_bytes: int = 0


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


# The statements of a prune, the same on both backends (one runs them on sqlite3, the other on asyncpg). The
# horizon only moves forward; CASE, because the two engines name "the greater of" differently (max, GREATEST).
OLDEST_ROWS = ("SELECT last_id, size FROM journal WHERE owner = ? AND last_id < "
               "(SELECT COALESCE(MAX(last_id), 0) FROM journal WHERE owner = ?) ORDER BY last_id")
PRUNED_BYTES = "SELECT COALESCE(SUM(size), 0) FROM journal WHERE owner = ? AND last_id <= ?"
PRUNE_ROWS = "DELETE FROM journal WHERE owner = ? AND last_id <= ?"
MOVE_HORIZON = ("INSERT INTO journal_horizon VALUES (?, ?) ON CONFLICT (owner) DO UPDATE SET through = CASE WHEN "
                "excluded.through > journal_horizon.through THEN excluded.through ELSE journal_horizon.through END")


# An agent host's mark, written in the group commit of the events its lines produced (both backends; `mark_rows`
# gives the parameters). A session whose host row is gone changes nothing.
SET_MARK = "UPDATE agent_hosts SET mark = ?, updated_at = ? WHERE session_id = ?"


def mark_rows(marks: Mapping[str, bytes], now: float) -> list[tuple[str, float, str]]:
    """The parameters of `SET_MARK` for each of a group's marks: the mark as text (the column's type on both)."""
    return [(mark.decode(), now, session_id) for session_id, mark in marks.items()]


def prune_through(goal: PruneGoal, oldest_rows: Sequence[tuple[int, int]]) -> int:
    """The id an owner's journal is pruned through: whole rows, those ending at or before `goal.through`, then
    more, oldest first, until `goal.drop_bytes` are gone (`oldest_rows`: (last_id, size) of every row but the
    newest, which is never pruned)."""
    through, dropped = goal.through, 0
    if goal.drop_bytes > 0:
        for last_id, size in oldest_rows:
            through, dropped = max(through, int(last_id)), dropped + int(size)
            if dropped >= goal.drop_bytes:
                break
    return through


def renumber(group: EventGroup, firsts: Mapping[str, int]) -> None:
    """Give each owner's events in the group the ids from `firsts[owner]` on, in order, where they differ from the
    provisional ones (another node took those): the events, their frames and the group's encodings are made
    again in place."""
    changed = False
    next_ids = dict(firsts)
    for event in group.events:
        wanted = next_ids[event.owner]
        next_ids[event.owner] = wanted + 1
        if event.id != wanted:
            event.id, event._frame = wanted, None
            changed = True
    if changed:
        group.frames = [event.frame() for event in group.events]
        group._message = None
        group.shared.clear()


def journal_frames(spans: str | bytes, frames: bytes, since: int, until: int,
                   session_id: str | None) -> list[bytes]:
    """The frames of one journal row with since < id <= until (and of `session_id`, when given): slices, not a
    loop per event (a replay reads many)."""
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


def journal_entries(spans: str | bytes, frames: bytes, since: int, until: int) -> list[JournalEntry]:
    """(id, session id, frame) of each event of one journal row with since < id <= until, in id order."""
    parts = bytes(frames).split(b"\n")
    out: list[JournalEntry] = []
    index = 0
    for first, count, sid in orjson.loads(spans):
        lo, hi = max(first, since + 1), min(first + count - 1, until)
        for event_id in range(lo, hi + 1):
            out.append((event_id, sid, parts[index + event_id - first]))
        index += count
    return out


class JournalWriter:
    """Writes the event journal: group commits on its own connection, on the event loop's thread.

    A group commit is a few microseconds of SQLite per event, far less than hops through a worker
    thread (a writer thread was tried: SQLite releases the GIL on every row, and the two threads
    fought over it, costing more than it saved). It may only write while no other statement holds
    the store (`Store._lock`), so it never busy-waits on SQLite's write lock with the loop blocked.
    Retention deletes ride in the same transaction as the inserts; each owner's journal is pruned on its own.
    """

    CHECKPOINT_BYTES = 4 << 20  # SQLite's own default: about 1000 pages

    def __init__(self, path: Path) -> None:
        self._conn: sqlite3.Connection | None = sqlite3.connect(str(path), isolation_level=None)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.execute("PRAGMA wal_autocheckpoint=0")  # Store.start_checkpoint does it off the loop
        self.unchecked_bytes = 0  # written to the WAL since the last checkpoint was started

    def cap_pages(self, pages: int) -> None:
        """The database file's size limit (`Store.open`'s `max_bytes`) holds on this connection too."""
        if self._conn is not None:
            self._conn.execute(f"PRAGMA max_page_count = {int(pages)}")

    def page_counts(self) -> tuple[int, int, int]:
        """(pages in the file, of them free, page size)."""
        if self._conn is None:
            return 0, 0, 4096
        row = self._conn.execute("SELECT * FROM pragma_page_count, pragma_freelist_count, pragma_page_size").fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def append(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None = None) -> dict[str, int]:
        """Commit a group (ids assigned by the caller, ascending per owner) as one row per owner, and prune
        the owners named in `prune`, and write the group's agent-host marks, in one transaction. Returns the bytes
        pruned per owner."""
        with self._transaction() as conn:
            if group.marks:  # if the rows then fail, the rollback takes it too (test_agent_hosts_store)
                conn.executemany(SET_MARK, mark_rows(group.marks, time.time()))
            values = journal_rows(group)
            conn.executemany("INSERT INTO journal (first_id, last_id, owner, spans, frames, size) "
                             "VALUES (?, ?, ?, ?, ?, length(?5))", values)
            self.unchecked_bytes += sum(len(v[4]) for v in values)
            return {owner: self._prune(conn, owner, goal) for owner, goal in (prune or {}).items()}

    def prune(self, prune: Mapping[str, PruneGoal]) -> dict[str, int]:
        """Prune in a transaction of its own. Returns the bytes pruned per owner."""
        with self._transaction() as conn:
            return {owner: self._prune(conn, owner, goal) for owner, goal in prune.items()}

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
    def _prune(conn: sqlite3.Connection, owner: str, goal: PruneGoal) -> int:
        """Delete the owner's oldest rows (see `prune_through`). Moves the owner's horizon; returns the bytes
        deleted."""
        rows: list[tuple[int, int]] = []
        if goal.drop_bytes > 0:
            rows = conn.execute(OLDEST_ROWS, (owner, owner)).fetchall()
        through = prune_through(goal, rows)
        if through <= 0:
            return 0
        freed = conn.execute(PRUNED_BYTES, (owner, through)).fetchone()[0]
        conn.execute(PRUNE_ROWS, (owner, through))
        conn.execute(MOVE_HORIZON, (owner, through))
        return int(freed)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
