"""Section `postgres`: the gateway on a PostgreSQL store beside SQLite, and a cluster's delivery latency."""

from __future__ import annotations

import functools
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floods import latency_gateway, relay
from harness import LATENCY_SAMPLES, N_UPDATES, RUNS, TOKEN, Gateway, start_session
from report import percentiles, row

from gateway.clients.client import GatewayClient
from sections.calls import status_calls

# p50 and p99 in µs of one latency run (report.percentiles).
Percentiles = tuple[float, float]


async def store_run(agents: Path, extra: list[str], state: Path, relays: list[float], statuses: list[float]) -> None:
    """One run on one gateway (PostgreSQL when `extra` names a store, else SQLite): a relay's rate, then status
    calls of a live session, appended to `relays` and `statuses`."""
    gw = Gateway(state, agents, extra).start()
    try:
        store = "PostgreSQL" if extra else "SQLite"
        await relay(gw, 1, N_UPDATES // 10, figure=f"relay warm-up, {store} store")
        relays.append((await relay(gw, 1, N_UPDATES // 2, figure=f"relay, 1 subscriber, {store} store")).rates[0])
        admin = await GatewayClient.connect(gw.url, TOKEN)
        view = await start_session(admin, "ref")
        await admin.close()
        statuses.append(await status_calls(f"{gw.url}?token={TOKEN}", view["session_id"], 1, 3000))
    finally:
        gw.stop()


async def store_figures(tmp: Path, agents: Path, cluster: Path, rows: list[str]) -> None:
    """Relay throughput and status calls on PostgreSQL beside SQLite, interleaved run by run."""
    # Imported here: only this section needs the tests' server (and asyncpg), the others run without them.
    from tests.pg_server import fresh_database, test_server

    relay_pg: list[float] = []
    relay_lite: list[float] = []
    status_pg: list[float] = []
    status_lite: list[float] = []
    with test_server() as server:
        for i in range(RUNS):
            async with fresh_database(server) as url:
                await store_run(agents, ["--store", url, "--config", str(cluster)], tmp / f"pg-{i}", relay_pg,
                                status_pg)
            await store_run(agents, [], tmp / f"lite-{i}", relay_lite, status_lite)
    rows.append(row("relay throughput, 1 subscriber, PostgreSQL store", relay_pg, relay_lite, "upd/s",
                    "≥ 0.5× SQLite", statistics.median(relay_pg) >= 0.5 * statistics.median(relay_lite),
                    "the same on SQLite"))
    rows.append(row("task.session.status of a live session, PostgreSQL store", status_pg, status_lite, "calls/s",
                    "reported", True, "the same on SQLite"))


@dataclass
class ClusterRuns:
    """Delivery latencies per run: the subscriber on the agent's node (`same`, and `same_async` with
    journal_synchronous_commit = false), on the other node (`cross`), on one SQLite node (`single`); and what a
    commit costs on this server (`costs`, commit_costs)."""

    cross: list[Percentiles] = field(default_factory=list)
    same: list[Percentiles] = field(default_factory=list)
    same_async: list[Percentiles] = field(default_factory=list)
    single: list[Percentiles] = field(default_factory=list)
    costs: list[dict[str, float]] = field(default_factory=list)


async def two_nodes(tmp: Path, agents: Path, url: str, config: Path, i: int, into: list[Percentiles],
                    cross: list[Percentiles] | None) -> None:
    """Two nodes on one database: latency with the subscriber on the agent's node into `into`, and, given
    `cross`, with the subscriber on the other node into it."""
    node = ["--store", url, "--config", str(config), "--node-id"]
    a = Gateway(tmp / f"node-a-{config.stem}-{i}", agents, [*node, "a"]).start()
    b = Gateway(tmp / f"node-b-{config.stem}-{i}", agents, [*node, "b"]).start()
    try:
        into.append(percentiles(await latency_gateway(a, LATENCY_SAMPLES)))
        if cross is not None:
            cross.append(percentiles(await latency_gateway(a, LATENCY_SAMPLES, watched_from=b)))
    finally:
        b.stop()
        a.stop()


async def measure_cluster(tmp: Path, agents: Path, cluster: Path) -> ClusterRuns:
    """Each run: the cluster flushed, the cluster unflushed, the commit costs, one SQLite node, in that order."""
    from tests.pg_server import fresh_database, test_server

    r = ClusterRuns()
    unflushed = tmp / "cluster-async.toml"
    unflushed.write_text(cluster.read_text() + "journal_synchronous_commit = false\n")
    with test_server() as server:
        for i in range(RUNS):
            for config, into in ((cluster, r.same), (unflushed, r.same_async)):
                async with fresh_database(server) as url:
                    await two_nodes(tmp, agents, url, config, i, into, r.cross if config is cluster else None)
            async with fresh_database(server) as url:
                r.costs.append(await commit_costs(url, tmp / f"commit-{i}.db"))
            lite = Gateway(tmp / f"single-{i}", agents).start()
            try:
                r.single.append(percentiles(await latency_gateway(lite, LATENCY_SAMPLES)))
            finally:
                lite.stop()
    return r


def cluster_rows(r: ClusterRuns) -> list[str]:
    """The cluster's latencies beside one node's; a target not met quotes the commit costs of the same run."""
    cost = {key: statistics.median(c[key] for c in r.costs) for key in r.costs[0]}
    single50, same50, cross50 = [s[0] for s in r.single], [s[0] for s in r.same], [c[0] for c in r.cross]
    async50 = [s[0] for s in r.same_async]
    leaves = f"the target leaves {0.5 * statistics.median(single50):.0f} µs over one node"
    return [
        row("delivery latency p50, cluster, subscriber on the agent's node", same50, single50,
            "µs", "≤ 1.5× single node", statistics.median(same50) <= 1.5 * statistics.median(single50),
            "one SQLite node", f"{leaves}; "
            f"a journal commit on this PostgreSQL alone takes {cost['flushed']:.0f} µs p50 with its WAL flush, "
            f"against {cost['sqlite']:.0f} µs on SQLite; a bare round trip (SELECT 1) "
            f"{cost['round_trip']:.0f} µs"),
        row("the same, journal_synchronous_commit = false", async50, single50, "µs", "≤ 1.5× single node",
            statistics.median(async50) <= 1.5 * statistics.median(single50), "one SQLite node",
            f"{leaves}; a journal commit "
            f"without the flush still is a round trip to the server: {cost['unflushed']:.0f} µs p50 (SELECT 1 "
            f"alone {cost['round_trip']:.0f} µs), against {cost['sqlite']:.0f} µs on SQLite"),
        row("delivery latency p50, subscriber on another node", cross50, same50, "µs",
            "≤ agent's node + 1 ms", statistics.median(cross50) <= statistics.median(same50) + 1000,
            "subscriber on the agent's node"),
        row("delivery latency p99, subscriber on another node", [c[1] for c in r.cross], [s[1] for s in r.same],
            "µs", "reported", True, "subscriber on the agent's node"),
    ]


async def postgres_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """The same gateway on a PostgreSQL store beside SQLite, interleaved: relay throughput (every update committed
    before it is published) and status calls of a live session. The server is the tests' (tests/pg_server.py:
    ACP_GATEWAY_TEST_PG, else 127.0.0.1:5432, else a throwaway cluster), a fresh database for each gateway."""
    cluster = tmp / "cluster.toml"  # a PostgreSQL store needs the nodes' shared secret
    cluster.write_text(f'cluster_secret = "{uuid.uuid4().hex}{uuid.uuid4().hex}"\n')
    await store_figures(tmp, agents, cluster, rows)
    rows += cluster_rows(await measure_cluster(tmp, agents, cluster))


async def commit_costs(url: str, sqlite_file: Path, samples: int = 1000) -> dict[str, float]:
    """µs p50 of what a cluster node's delivery waits for, on this server, in this run: a bare round trip (SELECT 1),
    a journal commit through the gateway's own event bus (with and without its WAL flush), and the same on SQLite."""
    from gateway.journal import EventBus
    from gateway.store import open_store

    async def p50(call: Callable[[], Awaitable[Any]]) -> float:
        for _ in range(samples // 10):
            await call()
        spent = []
        for _ in range(samples):
            t0 = time.perf_counter()
            await call()
            spent.append(time.perf_counter() - t0)
        return statistics.median(spent) * 1e6

    out: dict[str, float] = {}
    for key, store_url, synchronous in (("flushed", url, True), ("unflushed", url, False),
                                        ("sqlite", str(sqlite_file), True)):
        store = await open_store(store_url, node="bench/1" if store_url == url else None,
                                 journal_synchronous_commit=synchronous)
        bus = EventBus(store)
        await bus.open()
        try:
            out[key] = await p50(functools.partial(bus.publish, "session_update", "bench", "s-1", "t", {"n": 1}))
            if key == "flushed":
                out["round_trip"] = await p50(functools.partial(store.fetchone, "SELECT 1"))
        finally:
            await bus.close()
            await store.close()
    return out
