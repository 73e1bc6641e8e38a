"""The repositories: one per concern, every SQL statement of the gateway but the journal's and the schema's."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from .journal import SET_MARK, JournalEntry, PruneGoal, journal_entries, journal_frames, mark_rows
from .rows import (
    CONFIG_COLUMNS,
    CONFIG_JSON_COLUMNS,
    EXECUTOR_COLUMNS,
    HOST_COLUMNS,
    SESSION_COLUMNS,
    SESSION_WIDTH,
    ConfigRow,
    EventGroup,
    ExecutorRow,
    HistoryEntry,
    HostRow,
    JournalHead,
    SessionRow,
    StoredHistory,
    TaskRow,
    config_row,
    executor_row,
    host_row,
    session_row,
)
from .sql import Database

# A session row with its task: task ids are per owner.
SESSIONS_WITH_TASKS = "FROM sessions s JOIN tasks t ON t.owner = s.owner AND t.id = s.task_id"


class _Repo:
    def __init__(self, store: Database) -> None:
        self.store = store


class TaskRepo(_Repo):
    async def get(self, owner: str, task_id: str) -> TaskRow | None:
        """The owner's task of that id: task ids are per owner (another owner's task is not there)."""
        row = await self.store.fetchone("SELECT id, owner, title, description, state, created_at, updated_at "
                                        "FROM tasks WHERE owner = ? AND id = ?", (owner, task_id))
        return TaskRow(*row) if row else None


class SessionRepo(_Repo):
    async def create(self, *, owner: str, agent: str, cwd: str, title: str | None, description: str | None,
                     task_id: str | None, task_state: str, session_state: str,
                     config: Mapping[str, Any] | None = None, name: str | None = None,
                     fork: tuple[str, str, int] | None = None, agent_version: str | None = None,
                     session_id: str | None = None, worktree: Mapping[str, Any] | None = None,
                     host: str | None = None) -> SessionRow:
        """A new session and its task (unless the owner's `task_id` exists), with its configuration's columns
        (`config`: what it is started with), in one transaction. A fork (`fork`: the session it comes from, the ACP
        session its agent forked, and the last history entry of the conversation forked) starts with a copy of that
        history and the forked ACP session to restore: never half made."""
        now = time.time()
        session_id = session_id or f"s-{uuid.uuid4().hex}"
        async with self.store.transaction() as db:
            if task_id is None:
                task_id = f"t-{uuid.uuid4().hex}"
                await db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 (task_id, owner, title, description, task_state, now, now))
            else:
                await db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                                 (task_id, owner, title, description, task_state, now, now))
            await db.execute(
                "INSERT INTO sessions (id, task_id, owner, agent, cwd, title, state, created_at, updated_at, name, "
                "forked_from, agent_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, task_id, owner, agent, cwd, title, session_state, now, now, name,
                 fork[0] if fork else None, agent_version),
            )
            await db.execute("INSERT INTO executors (session_id, cwd, status, last_seen, resume_token) "
                             "VALUES (?, ?, 'created', ?, ?)", (session_id, cwd, now, fork[1] if fork else None))
            if fork is not None:
                await db.execute("INSERT INTO history (session_id, kind, name, content, ts) SELECT ?, kind, name, "
                                 "content, ts FROM history WHERE session_id = ? AND id <= ? ORDER BY id",
                                 (session_id, fork[0], fork[2]))
            if config:
                sql, params = _config_upsert(session_id, config, now)
                await db.execute(sql, params)
            if worktree is not None or host is not None:  # its own git worktree, made for it before this, or the
                # remote host its agent runs on (docs/worktrees.md, docs/remote-hosts.md)
                await db.execute("INSERT INTO session_workspaces (session_id, worktree, note, updated_at, host) "
                                 "VALUES (?, ?, NULL, ?, ?)",
                                 (session_id, orjson.dumps(worktree).decode() if worktree is not None else None, now,
                                  host))
        row = await self.get(session_id)
        assert row is not None
        return row

    async def set_agent_version(self, session_id: str, version: str | None) -> None:
        """A fresh restart's agent version (its saved agent session is not kept, so nothing depends on the old)."""
        await self.store.write("UPDATE sessions SET agent_version = ? WHERE id = ?", (version, session_id))

    async def get(self, session_id: str, owner: str | None = None) -> SessionRow | None:
        sql = f"SELECT {SESSION_COLUMNS} {SESSIONS_WITH_TASKS} WHERE s.id = ?"
        params: list[Any] = [session_id]
        if owner is not None:
            sql += " AND s.owner = ?"
            params.append(owner)
        row = await self.store.fetchone(sql, params)
        return session_row(row) if row else None

    async def with_status_facts(self, session_id: str, owner: str) -> tuple[SessionRow, ExecutorRow | None, int,
                                                                          ConfigRow | None] | None:
        """A session with its executor row, its count of pending permission requests and its configuration: what a
        status call needs, in one read (a status call is the frontends' most frequent one)."""
        row = await self.store.fetchone(
            f"SELECT {SESSION_COLUMNS}, {EXECUTOR_COLUMNS}, (SELECT COUNT(*) FROM permissions p "
            f"WHERE p.session_id = s.id AND p.state = 'pending' AND p.id NOT LIKE 'elic-%'), {CONFIG_COLUMNS} "
            f"{SESSIONS_WITH_TASKS} "
            "LEFT JOIN executors e ON e.session_id = s.id LEFT JOIN session_config c ON c.session_id = s.id "
            "WHERE s.id = ? AND s.owner = ?", (session_id, owner))
        if row is None:
            return None
        count_at = SESSION_WIDTH + len(ExecutorRow.__dataclass_fields__)
        return (session_row(row), executor_row(row, SESSION_WIDTH), int(row[count_at]),
                config_row(row, count_at + 1))

    async def running(self) -> list[SessionRow]:
        """Sessions stored as RUNNING: at start-up, the turns a crashed instance left open."""
        rows = await self.store.fetchall(f"SELECT {SESSION_COLUMNS} {SESSIONS_WITH_TASKS} "
                                         "WHERE s.state = 'RUNNING'")
        return [session_row(r) for r in rows]

    async def named(self, owner: str, name: str) -> str | None:
        """The id of the owner's session of that name."""
        row = await self.store.fetchone("SELECT id FROM sessions WHERE owner = ? AND name = ?", (owner, name))
        return str(row[0]) if row else None

    async def list(self, owner: str, *, states: Iterable[str] | None, before_seq: int | None,
                   limit: int, cwd: str | None = None) -> list[tuple[SessionRow, ExecutorRow | None]]:
        sql = (f"SELECT {SESSION_COLUMNS}, {EXECUTOR_COLUMNS} {SESSIONS_WITH_TASKS} "
               "LEFT JOIN executors e ON e.session_id = s.id WHERE s.owner = ?")
        params: list[Any] = [owner]
        if cwd is not None:
            sql += " AND s.cwd = ?"
            params.append(cwd)
        if before_seq is not None:
            sql += " AND s.seq < ?"
            params.append(before_seq)
        state_list = list(states or [])
        if state_list:
            sql += f" AND s.state IN ({', '.join('?' * len(state_list))})"
            params += state_list
        sql += " ORDER BY s.seq DESC LIMIT ?"
        params.append(limit)
        return [(session_row(r), executor_row(r, SESSION_WIDTH)) for r in await self.store.fetchall(sql, params)]

    async def update(self, session_id: str, *, state: str | None = None, task_state: str | None = None,
                     **fields: Any) -> None:
        """Change the session (and its task) in one transaction. `fields` are session columns."""
        allowed = {"title", "error_message", "recovery_pending", "needs_resume_context", "launched", "turn_event_id",
                   "name"}
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
                await db.execute("UPDATE tasks SET state = ?, updated_at = ? WHERE (owner, id) = "
                                 "(SELECT owner, task_id FROM sessions WHERE id = ?)", (task_state, now, session_id))

    async def count(self, owner: str) -> int:
        """How many sessions `owner` has stored (every state: an ended session's history is kept too)."""
        row = await self.store.fetchone("SELECT COUNT(*) FROM sessions WHERE owner = ?", (owner,))
        return int(row[0]) if row else 0

    async def history_bytes(self, owner: str) -> int:
        """The bytes of `owner`'s stored history (entries' content and names, as UTF-8)."""
        size = ("OCTET_LENGTH({})" if self.store.kind == "postgresql" else "LENGTH(CAST({} AS BLOB))").format
        row = await self.store.fetchone(
            f"SELECT COALESCE(SUM({size('h.content')} + {size('h.name')}), 0) FROM history h "
            "JOIN sessions s ON s.id = h.session_id WHERE s.owner = ?", (owner,))
        return int(row[0]) if row else 0

    async def delete(self, session_id: str) -> None:
        async with self.store.transaction() as db:
            row = await db.fetchone("SELECT owner, task_id FROM sessions WHERE id = ?", (session_id,))
            await db.execute("DELETE FROM history WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM executors WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM permissions WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM cancel_requests WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM session_config WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM agent_hosts WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM session_workspaces WHERE session_id = ?", (session_id,))
            await db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            if row:
                await db.execute("DELETE FROM tasks WHERE owner = ? AND id = ? AND NOT EXISTS "
                                 "(SELECT 1 FROM sessions WHERE owner = ? AND task_id = ?)", (*row, *row))
        self.store.reclaim_soon()


class ExecutorRepo(_Repo):
    async def get(self, session_id: str) -> ExecutorRow | None:
        row = await self.store.fetchone(f"SELECT {EXECUTOR_COLUMNS} FROM executors e WHERE e.session_id = ?",
                                        (session_id,))
        return executor_row(row, 0) if row else None

    async def leftovers(self, instance_id: str) -> list[ExecutorRow]:
        """Executors another (dead) instance started and never saw stop: their agents may still run."""
        rows = await self.store.fetchall(f"SELECT {EXECUTOR_COLUMNS} FROM executors e WHERE e.status = 'running' "
                                         "AND (e.instance_id IS NULL OR e.instance_id != ?)", (instance_id,))
        return [row for r in rows if (row := executor_row(r, 0)) is not None]

    async def set_running(self, session_id: str, *, execution_id: str, instance_id: str, cwd: str,
                          pid: int | None = None, proc_start: int | None = None, boot_id: str | None = None) -> None:
        await self.store.write(
            "INSERT INTO executors (session_id, execution_id, instance_id, cwd, status, last_seen, pid, proc_start, "
            "boot_id) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
            "execution_id = excluded.execution_id, instance_id = excluded.instance_id, cwd = excluded.cwd, "
            "status = 'running', last_seen = excluded.last_seen, pid = excluded.pid, "
            "proc_start = excluded.proc_start, boot_id = excluded.boot_id",
            (session_id, execution_id, instance_id, cwd, time.time(), pid, proc_start, boot_id))

    async def set_token(self, session_id: str, token: str | None) -> None:
        await self.store.write("UPDATE executors SET resume_token = ?, last_seen = ? WHERE session_id = ?",
                               (token, time.time(), session_id))

    async def set_stopped(self, session_id: str, status: str = "stopped") -> None:
        await self.store.write("UPDATE executors SET status = ?, execution_id = NULL, last_seen = ? "
                               "WHERE session_id = ?", (status, time.time(), session_id))

    async def touch(self, instance_id: str) -> None:
        await self.store.write("UPDATE executors SET last_seen = ? WHERE instance_id = ? AND status = 'running'",
                               (time.time(), instance_id))


def _config_upsert(session_id: str, columns: Mapping[str, Any], now: float) -> tuple[str, list[Any]]:
    """Write these configuration columns (JSON-encoded; the others are left as they are, or their defaults)."""
    unknown = set(columns) - set(CONFIG_JSON_COLUMNS)
    if unknown:
        raise ValueError(f"not configuration columns: {sorted(unknown)}")
    names = list(columns)
    values = [orjson.dumps(v).decode() if v is not None else None for v in columns.values()]
    updates = ", ".join(f"{name} = excluded.{name}" for name in [*names, "updated_at"])
    return (f"INSERT INTO session_config (session_id, {', '.join(names)}, updated_at) "
            f"VALUES (?, {', '.join('?' * len(names))}, ?) ON CONFLICT(session_id) DO UPDATE SET {updates}",
            [session_id, *values, now])


class ConfigRepo(_Repo):
    """A session's configuration (what its agent offers, what its user chose, what it was started with)."""

    async def get(self, session_id: str) -> ConfigRow | None:
        row = await self.store.fetchone(f"SELECT {CONFIG_COLUMNS} FROM session_config c WHERE c.session_id = ?",
                                        (session_id,))
        return config_row(row, 0) if row else None

    async def save(self, session_id: str, **columns: Any) -> None:
        if columns:
            sql, params = _config_upsert(session_id, columns, time.time())
            await self.store.write(sql, params)


class HostRepo(_Repo):
    """The agent hosts sessions' agents run in (docs/agent-hosts.md), one row per session: how to reach each again,
    the agent-line offsets committed (the mark: written with the journal's group commit, `EventGroup.marks`; here only
    outside one) and the newest incarnation that attached. The host JSON holds the execution's secret: never logged."""

    async def put(self, session_id: str, execution_id: str, host: dict[str, Any]) -> None:
        """The session's host is this one (a new execution): no mark committed yet, no incarnation attached."""
        await self.store.write(
            "INSERT INTO agent_hosts (session_id, execution_id, host, mark, incarnation, updated_at) "
            "VALUES (?, ?, ?, NULL, 0, ?) ON CONFLICT(session_id) DO UPDATE SET execution_id = excluded.execution_id, "
            "host = excluded.host, mark = NULL, incarnation = 0, updated_at = excluded.updated_at",
            (session_id, execution_id, orjson.dumps(host).decode(), time.time()))

    async def set_host(self, session_id: str, host: dict[str, Any]) -> None:
        """Replace what is known of the host (its pids once it said ready, say); the mark and incarnation stay."""
        await self.store.write("UPDATE agent_hosts SET host = ?, updated_at = ? WHERE session_id = ?",
                               (orjson.dumps(host).decode(), time.time(), session_id))

    async def get(self, session_id: str) -> HostRow | None:
        """The session's host, if its agent runs in one."""
        row = await self.store.fetchone(f"SELECT {HOST_COLUMNS} FROM agent_hosts WHERE session_id = ?", (session_id,))
        return host_row(row) if row else None

    async def all(self) -> list[HostRow]:
        """Every session's host: at start-up, the hosts to attach to again."""
        rows = await self.store.fetchall(f"SELECT {HOST_COLUMNS} FROM agent_hosts ORDER BY session_id")
        return [host_row(r) for r in rows]

    async def drop(self, session_id: str) -> None:
        """The session's agent no longer runs in a host (it ended, or was released)."""
        await self.store.write("DELETE FROM agent_hosts WHERE session_id = ?", (session_id,))

    async def next_incarnation(self, session_id: str) -> int:
        """The incarnation to attach to the session's host with, counted up and committed before it is used (one
        statement, so two attaches never get the same one): a host refuses every older one (AH-2). LookupError when
        the session has no host."""
        async with self.store.transaction() as db:
            row = await db.fetchone("UPDATE agent_hosts SET incarnation = incarnation + 1, updated_at = ? "
                                    "WHERE session_id = ? RETURNING incarnation", (time.time(), session_id))
        if row is None:
            raise LookupError(f"session {session_id} has no agent host stored")
        return int(row[0])

    async def set_mark(self, session_id: str, mark: dict[str, Any]) -> None:
        """Commit a mark outside a group commit (with events, it goes in `EventGroup.marks`)."""
        await self.store.write(SET_MARK, mark_rows({session_id: orjson.dumps(mark)}, time.time())[0])


class WorkspaceRepo(_Repo):
    """Where a session's agent works in git (docs/worktrees.md), one row per session that has anything of it: its
    worktree (a JSON object: repo, path, branch, base, base_commit; written with the session by `sessions.create`,
    read with it as `SessionRow.worktree`) and the note its agent gets at its next prompt (a rewind it did not
    see)."""

    async def set_note(self, session_id: str, note: str | None) -> None:
        await self.store.write(
            "INSERT INTO session_workspaces (session_id, worktree, note, updated_at) VALUES (?, NULL, ?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET note = excluded.note, updated_at = excluded.updated_at",
            (session_id, note, time.time()))

    async def take_note(self, session_id: str) -> str | None:
        """The note for the agent's next prompt, cleared as it is read."""
        row = await self.store.fetchone("SELECT note FROM session_workspaces WHERE session_id = ?", (session_id,))
        if not row or not row[0]:
            return None
        await self.store.write("UPDATE session_workspaces SET note = NULL, updated_at = ? WHERE session_id = ?",
                               (time.time(), session_id))
        return str(row[0])


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

    async def last_id(self, session_id: str) -> int:
        """The id of the session's newest history entry (0: none)."""
        row = await self.store.fetchone("SELECT MAX(id) FROM history WHERE session_id = ?", (session_id,))
        return int(row[0]) if row and row[0] is not None else 0

    async def exists(self, session_id: str) -> bool:
        return await self.store.fetchone("SELECT 1 FROM history WHERE session_id = ? LIMIT 1", (session_id,)) \
            is not None


class CancelRepo(_Repo):
    async def request(self, session_id: str) -> None:
        await self.store.write("INSERT INTO cancel_requests VALUES (?, ?) ON CONFLICT DO NOTHING",
                               (session_id, time.time()))

    async def pending(self) -> list[str]:
        return [r[0] for r in await self.store.fetchall("SELECT session_id FROM cancel_requests")]

    async def clear(self, session_id: str) -> None:
        await self.store.write("DELETE FROM cancel_requests WHERE session_id = ?", (session_id,))


# The owner's rows that end inside (since, end], and the one row that may start inside it and end
# after it (an owner's rows never overlap, so it is their first one past `end`): two index seeks on
# (owner, last_id), whatever the size of the journal. Parameters: owner, since, end, owner, end, end.
REPLAY_PAGE = """
    SELECT last_id, spans, frames FROM journal WHERE owner = ? AND last_id > ? AND last_id <= ?
    UNION ALL
    SELECT last_id, spans, frames FROM (
        SELECT first_id, last_id, spans, frames FROM journal WHERE owner = ? AND last_id > ?
        ORDER BY last_id LIMIT 1) AS next_row
    WHERE first_id <= ?
    ORDER BY 1
"""


class EventRepo(_Repo):
    def can_append_now(self) -> bool:
        """True when `append_batch_now` may write at once (the SQLite store, free of other statements)."""
        return self.store.can_append_now()

    def append_batch_now(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None = None) -> dict[str, int]:
        """One transaction for a whole batch (group commit), written synchronously: only when
        `can_append_now()`, which nothing can change before this returns. Returns the bytes pruned per owner."""
        return self.store.append_now(group, prune)

    async def append_batch(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None = None) -> dict[str, int]:
        """The same, waiting for the store when another statement holds it."""
        return await self.store.append(group, prune)

    async def heads(self) -> tuple[dict[str, JournalHead], int]:
        """Each owner's head (its newest id ever handed out: pruning never goes past it) and bytes stored, and the
        floor every owner's ids start above (the ids of a journal from before ids were per owner)."""
        floor_row = await self.store.fetchone("SELECT through FROM journal_horizon WHERE owner = '*'")
        floor = int(floor_row[0]) if floor_row else 0
        heads: dict[str, JournalHead] = {}
        for owner, last, size in await self.store.fetchall(
                "SELECT owner, MAX(last_id), SUM(size) FROM journal GROUP BY owner"):
            heads[owner] = JournalHead(max(int(last), floor), int(size))
        horizons = await self.store.fetchall("SELECT owner, through FROM journal_horizon WHERE owner != '*'")
        for owner, through in horizons:
            known = heads.get(owner, JournalHead(floor, 0))
            heads[owner] = JournalHead(max(known.head, int(through)), known.bytes)
        return heads, floor

    async def head(self, owner: str) -> int:
        heads, floor = await self.heads()
        return heads[owner].head if owner in heads else floor

    async def horizon(self, owner: str) -> int:
        """Every event of the owner with a greater id is in the journal; those up to it may have been pruned."""
        row = await self.store.fetchone("SELECT MAX(through) FROM journal_horizon WHERE owner IN (?, '*')", (owner,))
        return int(row[0]) if row and row[0] is not None else 0

    async def after(self, owner: str, since: int, until: int, session_id: str | None = None,
                    window: int = 5000) -> tuple[list[bytes], int | None]:
        """The owner's notifications with since < id <= until, in id order, a window of ids at a time (so
        a page holds at most `window` frames): (frames, the cursor to ask from next, or None when done)."""
        end = min(until, since + window)
        rows = await self.store.read_journal(REPLAY_PAGE, (owner, since, end, owner, end, end))
        frames: list[bytes] = []
        for _last, spans, blob in rows:
            frames.extend(journal_frames(spans, blob, since, end, session_id))
        return frames, (end if end < until else None)

    async def entries_after(self, owner: str, since: int, until: int,
                            window: int = 5000) -> tuple[list[JournalEntry], int | None]:
        """(id, session id, frame) of the owner's events with since < id <= until, a window of ids at a time (as
        `after`): what another node committed, for this node's subscribers."""
        end = min(until, since + window)
        rows = await self.store.read_journal(REPLAY_PAGE, (owner, since, end, owner, end, end))
        entries: list[JournalEntry] = []
        for _last, spans, blob in rows:
            entries.extend(journal_entries(spans, blob, since, end))
        return entries, (end if end < until else None)

    async def heads_of(self, owners: Iterable[str]) -> dict[str, int]:
        """The newest committed id of each of these owners (one index seek each)."""
        wanted = sorted(set(owners))
        if not wanted:
            return {}
        rows = await self.store.fetchall(f"SELECT owner, MAX(last_id) FROM journal WHERE owner IN "
                                         f"({', '.join('?' * len(wanted))}) GROUP BY owner", wanted)
        return {owner: int(last) for owner, last in rows}

    async def types_after(self, owner: str, session_id: str, types: frozenset[str], since: int,
                          until: int) -> list[str]:
        """The session's events of `types` with since < id <= until, as their types in id order (read a window
        at a time; only frames that may be one of them are decoded)."""
        needles = [b'"type":"' + t.encode() + b'"' for t in types]
        found: list[str] = []
        cursor: int | None = since
        while cursor is not None and cursor < until:
            frames, cursor = await self.after(owner, cursor, until, session_id)
            for frame in frames:
                if any(n in frame for n in needles) and (type_ := orjson.loads(frame)["params"]["type"]) in types:
                    found.append(type_)
        return found

    async def prune(self, owner: str, goal: PruneGoal) -> int:
        """Prune one owner's journal now (see `PruneGoal`); returns the bytes deleted."""
        return (await self.store.prune({owner: goal}))[owner]


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

    async def expire(self, session_id: str) -> int:
        """The same for one session (in a cluster: one that no live node holds)."""
        return await self.store.write("UPDATE permissions SET state = 'expired' WHERE session_id = ? AND "
                                      "state = 'pending'", (session_id,))

    async def sessions_pending(self) -> list[str]:
        return [r[0] for r in await self.store.fetchall("SELECT DISTINCT session_id FROM permissions "
                                                        "WHERE state = 'pending'")]


class InstanceRepo(_Repo):
    async def register(self, instance_id: str, only_this: bool = False) -> None:
        """This gateway holds the state-dir lock: every earlier instance is dead (one row each). `only_this`: in a
        cluster other instances are other nodes, alive or not as their leases say."""
        async with self.store.transaction() as db:
            if not only_this:
                await db.execute("UPDATE instances SET alive = 0 WHERE alive = 1")
            await db.execute("INSERT INTO instances VALUES (?, ?, ?, 1)", (instance_id, os.getpid(), time.time()))

    async def is_alive(self, instance_id: str) -> bool:
        row = await self.store.fetchone("SELECT alive FROM instances WHERE id = ?", (instance_id,))
        return bool(row and row[0])

    async def mark_dead(self, instance_id: str) -> None:
        await self.store.write("UPDATE instances SET alive = 0 WHERE id = ?", (instance_id,))
