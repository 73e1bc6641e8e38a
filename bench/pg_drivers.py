"""Which async PostgreSQL driver for the store: asyncpg or psycopg 3, measured on the gateway's own workload.

The two statements that dominate a gateway's store traffic, each on one connection as the store issues them:
- a journal group commit: one transaction that bumps the owner's id counter (`UPDATE … RETURNING`, the row
  lock that keeps ids in commit order) and inserts one journal row of 20 frames (about 8 KB of `bytea`);
- a status read: the session joined with its task and executor, by primary key.
Prints one JSON line per driver: group commits per second and status reads per second. Usage:
`python bench/pg_drivers.py postgresql://postgres@127.0.0.1:5432/test [rounds]`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg

SCHEMA = """
DROP TABLE IF EXISTS bench_journal, bench_heads, bench_sessions, bench_tasks, bench_executors;
CREATE TABLE bench_heads (owner TEXT PRIMARY KEY, last_id BIGINT NOT NULL);
CREATE TABLE bench_journal (owner TEXT, first_id BIGINT, last_id BIGINT, spans TEXT, frames BYTEA, size BIGINT,
                            PRIMARY KEY (owner, last_id));
CREATE TABLE bench_tasks (owner TEXT, id TEXT, title TEXT, state TEXT, PRIMARY KEY (owner, id));
CREATE TABLE bench_sessions (id TEXT PRIMARY KEY, owner TEXT, task_id TEXT, agent TEXT, cwd TEXT, state TEXT,
                             updated_at DOUBLE PRECISION);
CREATE TABLE bench_executors (session_id TEXT PRIMARY KEY, status TEXT, pid BIGINT, last_seen DOUBLE PRECISION);
INSERT INTO bench_heads VALUES ('alice', 0);
INSERT INTO bench_tasks VALUES ('alice', 't-1', 'a task', 'RUNNING');
INSERT INTO bench_sessions VALUES ('s-1', 'alice', 't-1', 'reference', '/tmp', 'RUNNING', 0);
INSERT INTO bench_executors VALUES ('s-1', 'running', 4242, 0);
"""
FRAMES = b"\n".join([b'{"jsonrpc":"2.0","method":"task.session.event","params":{"type":"session_update","data":'
                     b'{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"'
                     + b"x" * 300 + b'"}}}}}'] * 20)
STATUS = ("SELECT s.id, s.state, s.agent, s.cwd, t.title, t.state, e.status, e.pid FROM bench_sessions s "
          "JOIN bench_tasks t ON t.owner = s.owner AND t.id = s.task_id "
          "LEFT JOIN bench_executors e ON e.session_id = s.id WHERE s.id = {0} AND s.owner = {1}")
BUMP = "UPDATE bench_heads SET last_id = last_id + 20 WHERE owner = {0} RETURNING last_id"
INSERT = "INSERT INTO bench_journal VALUES ({0}, {1}, {2}, {3}, {4}, {5})"


async def rate(n: int, op: Callable[[], Awaitable[Any]]) -> float:
    for _ in range(50):
        await op()
    t0 = time.perf_counter()
    for _ in range(n):
        await op()
    return n / (time.perf_counter() - t0)


async def with_asyncpg(dsn: str, n: int) -> dict[str, float]:
    conn = await asyncpg.connect(dsn)
    await conn.execute(SCHEMA)
    bump, insert = BUMP.format("$1"), INSERT.format("$1", "$2", "$3", "$4", "$5", "$6")
    status = STATUS.format("$1", "$2")

    async def commit() -> None:
        async with conn.transaction():
            last = await conn.fetchval(bump, "alice")
            await conn.execute(insert, "alice", last - 19, last, "[[1,20,\"s-1\"]]", FRAMES, len(FRAMES))

    async def read() -> None:
        await conn.fetchrow(status, "s-1", "alice")

    out = {"commit": await rate(n, commit), "status": await rate(n, read)}
    await conn.close()
    return out


async def with_psycopg(dsn: str, n: int) -> dict[str, float]:
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, prepare_threshold=0)  # prepared, as asyncpg
    await conn.execute(SCHEMA, prepare=False)
    bump, insert = BUMP.format("%s"), INSERT.format("%s", "%s", "%s", "%s", "%s", "%s")
    status = STATUS.format("%s", "%s")

    async def commit() -> None:
        async with conn.transaction():
            cur = await conn.execute(bump, ("alice",))
            row = await cur.fetchone()
            assert row is not None
            last = row[0]
            await conn.execute(insert, ("alice", last - 19, last, "[[1,20,\"s-1\"]]", FRAMES, len(FRAMES)))

    async def read() -> None:
        cur = await conn.execute(status, ("s-1", "alice"))
        await cur.fetchone()

    out = {"commit": await rate(n, commit), "status": await rate(n, read)}
    await conn.close()
    return out


async def main(dsn: str, rounds: int) -> None:
    results: dict[str, list[dict[str, float]]] = {"asyncpg": [], "psycopg": []}
    for _ in range(rounds):  # interleaved, so machine noise falls on both
        results["asyncpg"].append(await with_asyncpg(dsn, 2000))
        results["psycopg"].append(await with_psycopg(dsn, 2000))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("DROP TABLE IF EXISTS bench_journal, bench_heads, bench_sessions, bench_tasks, "
                           "bench_executors", prepare=False)
    for driver, runs in results.items():
        print(json.dumps({"driver": driver,
                          "group_commits_per_s": round(statistics.median(r["commit"] for r in runs)),
                          "status_reads_per_s": round(statistics.median(r["status"] for r in runs))}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3))
