"""Sections `store`, `memory` and `journal`: stored sessions at scale, a live session's memory, the journal's rate."""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import time
import uuid
from pathlib import Path

import orjson
from harness import RUNS, TOKEN, Gateway, start_session
from report import row

from gateway.clients.client import GatewayClient


def populate(db: Path, sessions: int) -> list[str]:
    """Stored idle sessions, written straight into the store's schema (the gateway migrates first)."""
    conn = sqlite3.connect(db)
    now = time.time()
    ids = [f"s-{uuid.uuid4().hex}" for _ in range(sessions)]
    conn.executemany("INSERT INTO tasks VALUES (?, 'default', NULL, NULL, 'REVIEW', ?, ?)",
                     [(f"t-{i}", now, now) for i in ids])
    conn.executemany("INSERT INTO sessions (id, task_id, owner, agent, cwd, state, launched, created_at, updated_at) "
                     "VALUES (?, ?, 'default', 'ref', '/tmp', 'WAITING_FOR_INPUT', 1, ?, ?)",
                     [(i, f"t-{i}", now, now) for i in ids])
    conn.executemany("INSERT INTO executors (session_id, resume_token, cwd, status, last_seen) "
                     "VALUES (?, ?, '/tmp', 'stopped', ?)", [(i, f"tok-{i}", now) for i in ids])
    conn.commit()
    conn.close()
    return ids


async def status_rate(gw: Gateway, ids: list[str], calls: int = 3000) -> float:
    """`task.session.status` calls/s of stored sessions spread over the store, 50 in flight on one client."""
    c = await GatewayClient.connect(gw.url, TOKEN)
    picks = [ids[(i * 7919) % len(ids)] for i in range(calls)]
    t0 = time.perf_counter()
    for chunk in range(0, calls, 50):
        await asyncio.gather(*(c.call("task.session.status", {"session_id": s}) for s in picks[chunk:chunk + 50]))
    rate = calls / (time.perf_counter() - t0)
    await c.close()
    return rate


async def journal_rate(tmp: Path, count: int = 50000) -> tuple[float, float]:
    """Events/s through the event bus (group commit, commit before publish), and raw sqlite3 inserts of the same
    events in one transaction."""
    from gateway.journal import EventBus
    from gateway.store import Store

    store = await Store.open(tmp / "journal.db")
    bus = EventBus(store)
    await bus.open()
    t0 = time.perf_counter()
    # The path session updates take: ids fixed at once, one commit per group, the last one awaited.
    for i in range(count - 1):
        bus.enqueue("session_update", "o", "s", "t", {"update": {"n": i}})
    await bus.publish("session_update", "o", "s", "t", {"update": {"n": count - 1}})
    ours = count / (time.perf_counter() - t0)
    await bus.close()
    await store.close()
    raw = sqlite3.connect(tmp / "raw.db")
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, type TEXT, owner TEXT, session_id TEXT, task_id TEXT, "
                "ts REAL, data TEXT)")
    t0 = time.perf_counter()
    with raw:
        raw.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [(i, "session_update", "o", "s", "t", time.time(), orjson.dumps({"update": {"n": i}}).decode())
                         for i in range(count)])
    baseline = count / (time.perf_counter() - t0)
    raw.close()
    return ours, baseline


async def store_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """Status calls with 100,000 vs 1,000 stored sessions; cold start and memory with 100,000 vs empty."""
    results: dict[int, tuple[list[float], list[float], int]] = {}
    for size in (0, 1000, 100_000):
        state = tmp / f"store-{size}"
        g = Gateway(state, agents).start()  # creates and migrates the database
        g.stop()
        ids = populate(state / "gateway.db", size) if size else []
        starts, rates, rss = [], [], 0
        for _ in range(RUNS):
            g = Gateway(state, agents).start()
            starts.append(g.started_in)
            if ids:
                rates.append(await status_rate(g, ids))
            rss = g.rss_kib()
            g.stop()
        results[size] = (starts, rates, rss)
    rows.append(row("task.session.status calls, 100k stored", results[100_000][1], results[1000][1], "calls/s",
                    "≥ 0.8× of 1k", statistics.median(results[100_000][1]) >= 0.8 * statistics.median(results[1000][1]),
                    "1k stored"))
    cold, empty = results[100_000][0], results[0][0]
    rows.append(row("cold start to serving, 100k stored", [c * 1000 for c in cold], [e * 1000 for e in empty], "ms",
                    "≤ 2× and < 1 s", statistics.median(cold) <= 2 * statistics.median(empty) and max(cold) < 1.0,
                    "empty store"))
    idle_kib = (results[100_000][2] - results[0][2]) / 100_000
    rows.append(f"| memory per stored idle session | {idle_kib:.3f} KiB (RSS with 100k stored − RSS empty, "
                f"/ 100k) | empty store: {results[0][2]:,} KiB RSS | – | ≈ 0 | "
                f"{'met' if idle_kib < 1.0 else 'NOT met'} |")


async def memory_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """Memory per live session."""
    g = Gateway(tmp / "live", agents).start()
    base_rss = g.rss_kib()
    c = await GatewayClient.connect(g.url, TOKEN)
    for _ in range(20):
        await start_session(c, "flood")
    live_kib = (g.rss_kib() - base_rss) / 20
    await c.close()
    g.stop()
    rows.append(f"| gateway memory per live session | {live_kib:,.1f} KiB (20 live, RSS difference / 20) | "
                f"no sessions: {base_rss:,} KiB RSS | – | ≤ 1 MiB | {'met' if live_kib <= 1024 else 'NOT met'} |")


async def journal_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """Journal throughput with commit-before-publish, against raw sqlite3 inserts in one transaction."""
    journal = [await journal_rate(tmp / f"j{i}") for i in range(RUNS)]
    ours_j, raw_j = [j[0] for j in journal], [j[1] for j in journal]
    rows.append(row("journal throughput (group commit)", ours_j, raw_j, "events/s", "≥ 0.3× raw sqlite3",
                    statistics.median(ours_j) >= 0.3 * statistics.median(raw_j), "raw sqlite3, one transaction"))
