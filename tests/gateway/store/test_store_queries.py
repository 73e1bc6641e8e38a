"""gateway.store: the look-ups every start-up makes use their partial indexes, so 100k idle sessions cost nothing."""

from __future__ import annotations

import sqlite3

from gateway.store import MIGRATIONS
from gateway.store.repos import SESSIONS_WITH_TASKS

STARTUP_LOOKUPS = [
    (f"SELECT s.id {SESSIONS_WITH_TASKS} WHERE s.state = 'RUNNING'", "sessions_running"),
    ("SELECT e.session_id FROM executors e WHERE e.status = 'running' AND (e.instance_id IS NULL "
     "OR e.instance_id != 'x')", "executors_running"),
]


def test_startup_lookups_search_partial_indexes() -> None:
    db = sqlite3.connect(":memory:")
    for script in MIGRATIONS:
        for statement in filter(str.strip, script.split(";")):
            db.execute(statement)
    for sql, index in STARTUP_LOOKUPS:
        plan = " ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert f"USING INDEX {index}" in plan, plan
