"""How a node forwards a command to the node that holds a session's lease, measured on PostgreSQL
(docs/architecture.md: Cluster).

Three ways for one node (the requester) to have another (the holder) run a command and get its answer, each a
round trip of a small command (`task.session.cancel_turn`-sized) through a real server, one at a time:
- notify: the command and its answer each travel in a NOTIFY payload (no table). Payloads are capped at
  8,000 bytes, so a prompt with an image cannot go this way: measured as the floor.
- table+notify: the command is a row (`INSERT`, then `NOTIFY` the holder in the same transaction); the holder
  claims rows with `FOR UPDATE SKIP LOCKED`, writes the answer into the row and NOTIFYs the requester.
- table+poll: the same rows, no NOTIFY: both sides poll every 10 ms.
Prints one JSON line per way: p50 and p99 in milliseconds. Usage:
`python bench/pg_forwarding.py postgresql://postgres@127.0.0.1:5432/test [round trips]`.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

SCHEMA = """
DROP TABLE IF EXISTS bench_commands;
CREATE TABLE bench_commands (id TEXT PRIMARY KEY, target TEXT NOT NULL, payload TEXT NOT NULL,
                             state TEXT NOT NULL, answer TEXT);
CREATE INDEX bench_commands_pending ON bench_commands(target) WHERE state = 'pending';
"""
COMMAND = json.dumps({"method": "task.session.cancel_turn", "params": {"session_id": "s-" + "0" * 32}})
POLL = 0.01


async def notify_only(dsn: str, n: int) -> list[float]:
    holder, requester = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    answers: dict[str, asyncio.Future[str]] = {}
    replies: set[asyncio.Future[str]] = set()

    def on_command(conn: object, pid: int, channel: str, payload: object) -> None:
        command_id = str(payload).split(" ", 1)[0]
        reply = asyncio.ensure_future(holder.execute("SELECT pg_notify('bench_answers', $1)", f"{command_id} done"))
        replies.add(reply)
        reply.add_done_callback(replies.discard)

    def on_answer(conn: object, pid: int, channel: str, payload: object) -> None:
        command_id = str(payload).split(" ", 1)[0]
        answers[command_id].set_result("done")

    await holder.add_listener("bench_commands", on_command)
    await requester.add_listener("bench_answers", on_answer)

    async def one() -> None:
        command_id = uuid.uuid4().hex
        answers[command_id] = asyncio.get_running_loop().create_future()
        await requester.execute("SELECT pg_notify('bench_commands', $1)", f"{command_id} {COMMAND}")
        try:
            await asyncio.wait_for(answers[command_id], 10)
        finally:
            del answers[command_id]

    samples = await timed(n, one)
    await holder.close()
    await requester.close()
    return samples


async def table(dsn: str, n: int, notify: bool) -> list[float]:
    setup = await asyncpg.connect(dsn)
    await setup.execute(SCHEMA)
    await setup.close()
    holder, requester = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    holder_wake, answer_wake = asyncio.Event(), asyncio.Event()
    if notify:
        await holder.add_listener("bench_commands", lambda *_: holder_wake.set())
        await requester.add_listener("bench_answers", lambda *_: answer_wake.set())
    stop = asyncio.Event()

    async def serve() -> None:
        while not stop.is_set():
            rows = await holder.fetch(
                "UPDATE bench_commands SET state = 'running' WHERE id IN (SELECT id FROM bench_commands "
                "WHERE target = 'holder' AND state = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 10) "
                "RETURNING id")
            for row in rows:
                async with holder.transaction():
                    await holder.execute("UPDATE bench_commands SET state = 'done', answer = 'done' WHERE id = $1",
                                         row["id"])
                    if notify:
                        await holder.execute("SELECT pg_notify('bench_answers', $1)", row["id"])
            if not rows:
                holder_wake.clear()
                await wait(holder_wake, notify)

    server = asyncio.ensure_future(serve())

    async def one() -> None:
        command_id = uuid.uuid4().hex
        async with requester.transaction():
            await requester.execute("INSERT INTO bench_commands VALUES ($1, 'holder', $2, 'pending', NULL)",
                                    command_id, COMMAND)
            if notify:
                await requester.execute("SELECT pg_notify('bench_commands', 'holder')")
        while await requester.fetchval("SELECT state FROM bench_commands WHERE id = $1", command_id) != "done":
            answer_wake.clear()
            await wait(answer_wake, notify)

    samples = await timed(n, one)
    stop.set()
    holder_wake.set()
    await server
    await holder.execute("DROP TABLE bench_commands")
    await holder.close()
    await requester.close()
    return samples


async def wait(wake: asyncio.Event, notify: bool) -> None:
    """Until woken (a NOTIFY), or a poll interval (without NOTIFY; with it, a lost one costs one interval)."""
    try:
        await asyncio.wait_for(wake.wait(), POLL if not notify else 1.0)
    except TimeoutError:
        pass


async def timed(n: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    for _ in range(20):
        await one()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await one()
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


async def main(dsn: str, n: int) -> None:
    ways: list[tuple[str, Awaitable[list[float]]]] = [
        ("notify", notify_only(dsn, n)), ("table+notify", table(dsn, n, True)), ("table+poll", table(dsn, n, False))]
    for name, run in ways:
        samples = await run
        print(json.dumps({"way": name, "p50_ms": round(statistics.median(samples), 2),
                          "p99_ms": round(statistics.quantiles(samples, n=100)[98], 2)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300))
