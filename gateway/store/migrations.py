"""The schema as numbered migrations, recorded in `PRAGMA user_version`: append, never edit a shipped one."""

from __future__ import annotations

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
    # 7: the session runtime. A running turn records a floor of its `turn_started` id, so a restart can close it
    # (`interrupted`) exactly once; an executor records its agent's process identity (pid = process
    # group, start time in clock ticks since boot, boot id), so a restart can end what a crashed
    # instance left running without ever signalling a recycled pid.
    """
    ALTER TABLE sessions ADD COLUMN turn_event_id INTEGER;
    ALTER TABLE executors ADD COLUMN pid INTEGER;
    ALTER TABLE executors ADD COLUMN proc_start INTEGER;
    ALTER TABLE executors ADD COLUMN boot_id TEXT
    """,
    # 8: a start-up looks for the turns and agents a crash left behind: partial indexes hold only those rows
    # (RUNNING sessions, running executors), so the look-up costs nothing with 100k idle sessions stored and
    # the indexes cost nothing to keep for every other row.
    """
    CREATE INDEX sessions_running ON sessions(state) WHERE state = 'RUNNING';
    CREATE INDEX executors_running ON executors(status) WHERE status = 'running'
    """,
    # 9: task ids belong to their owner, as session ids do: two owners may both name a task "build", and a
    # foreign owner's task id is nobody's business (as a global key, naming one answered "not found" or
    # started a session, which told whether it existed). The tables are rebuilt (SQLite cannot change a
    # key in place) with foreign keys off, checked before the commit (`Store._migrate`).
    """
    CREATE TABLE tasks_new (
        id TEXT NOT NULL,
        owner TEXT NOT NULL,
        title TEXT,
        description TEXT,
        state TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (owner, id)
    );
    INSERT INTO tasks_new SELECT id, owner, title, description, state, created_at, updated_at FROM tasks;
    DROP TABLE tasks;
    ALTER TABLE tasks_new RENAME TO tasks;
    CREATE TABLE sessions_new (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        task_id TEXT NOT NULL,
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
        updated_at REAL NOT NULL,
        turn_event_id INTEGER,
        FOREIGN KEY (owner, task_id) REFERENCES tasks(owner, id)
    );
    INSERT INTO sessions_new SELECT seq, id, task_id, owner, agent, cwd, title, state, error_message, recovery_pending,
        needs_resume_context, launched, created_at, updated_at, turn_event_id FROM sessions;
    DROP TABLE sessions;
    ALTER TABLE sessions_new RENAME TO sessions;
    CREATE INDEX sessions_by_owner ON sessions(owner, seq);
    CREATE INDEX sessions_running ON sessions(state) WHERE state = 'RUNNING';
    CREATE INDEX sessions_by_task ON sessions(owner, task_id)
    """,
    # 10: event ids count per owner (each owner's journal is gap-free, and one owner's ids say nothing of
    # another's activity), and the journal is bounded in bytes as well as events: a row records its size,
    # and the horizon (what may have been pruned) is kept per owner. The old global horizon stays as
    # owner '*', a floor for every owner: ids already handed out are never handed out again.
    """
    CREATE TABLE journal_new (
        owner TEXT NOT NULL,
        first_id INTEGER NOT NULL,
        last_id INTEGER NOT NULL,
        size INTEGER NOT NULL,
        spans TEXT NOT NULL,
        frames BLOB NOT NULL
    );
    INSERT INTO journal_new (owner, first_id, last_id, size, spans, frames)
        SELECT owner, first_id, last_id, length(frames), spans, frames FROM journal ORDER BY first_id;
    DROP TABLE journal;
    ALTER TABLE journal_new RENAME TO journal;
    CREATE UNIQUE INDEX journal_by_owner ON journal(owner, last_id);
    CREATE TABLE horizon_new (owner TEXT PRIMARY KEY, through INTEGER NOT NULL);
    INSERT INTO horizon_new SELECT '*', through FROM journal_horizon;
    DROP TABLE journal_horizon;
    ALTER TABLE horizon_new RENAME TO journal_horizon
    """,
    # 11: what a session's agent offers and what the user chose (acp.session_config), kept beside the session: the
    # agent's last offer (raw configOptions, modes, legacy models), the choices re-applied after every restore and
    # what could not be, the agent's slash commands and usage, its capabilities, and what the session was started
    # with (MCP servers, secrets included, and additional directories). JSON columns: read whole, written whole.
    """
    CREATE TABLE session_config (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        offer TEXT NOT NULL DEFAULT '{}',
        chosen TEXT NOT NULL DEFAULT '{}',
        unapplied TEXT NOT NULL DEFAULT '[]',
        commands TEXT,
        usage TEXT,
        capabilities TEXT,
        mcp_servers TEXT NOT NULL DEFAULT '[]',
        additional_directories TEXT NOT NULL DEFAULT '[]',
        updated_at REAL NOT NULL
    )
    """,
    # 12: a session's name, the owner's handle for it (`--name`, acpx's named sessions): unique per owner
    """
    ALTER TABLE sessions ADD COLUMN name TEXT;
    CREATE UNIQUE INDEX sessions_by_name ON sessions(owner, name) WHERE name IS NOT NULL
    """,
    # 13: the session a fork was made from (`task.session.fork`); kept when that session is deleted (a plain id)
    """
    ALTER TABLE sessions ADD COLUMN forked_from TEXT
    """,
    # 14: the version of the agent a session runs (an agent installed from the ACP registry): kept across restores,
    # changed only by a fresh restart, so an `agents update` never changes the agent under a saved session
    """
    ALTER TABLE sessions ADD COLUMN agent_version TEXT
    """,
    # 15: the agent host a session's agent runs in (docs/agent-hosts.md): how to reach it again after a restart (the
    # host JSON: socket, spool, pids and the execution's secret, so never logged), the agent-line offsets committed
    # (the mark, written in the journal's group commit, so the two never disagree) and the newest incarnation that
    # attached (a host refuses an older one: AH-2)
    """
    CREATE TABLE agent_hosts (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        execution_id TEXT NOT NULL,
        host TEXT NOT NULL,
        mark TEXT,
        incarnation INTEGER NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL
    )
    """,
    # 16: where a session's agent works in git (docs/worktrees.md): its own worktree (repo, path, branch, base; null for
    # a session in a directory it was given) and what its agent is told of a rewind at its next prompt
    """
    CREATE TABLE session_workspaces (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        worktree TEXT,
        note TEXT,
        updated_at REAL NOT NULL
    )
    """,
    # 17: the remote host a session's agent runs on (docs/remote-hosts.md; null: the gateway's machine)
    "ALTER TABLE session_workspaces ADD COLUMN host TEXT",
]
