"""Section `scale`: how cost grows with 8, 32 and 96 live sessions, and with 1,000 live subscribers."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import orjson
import websockets
from harness import N_UPDATES, RUNS, TOKEN, Gateway, lean_subscriber, start_session
from report import row
from tally import Tally, got_all

from gateway.clients.client import GatewayClient

SCALE_SESSIONS = (8, 32, 96)
SCALE_SUBSCRIBERS = 1000


async def aggregate_relay(gw: Gateway, session_ids: list[str], total: int) -> tuple[float, Tally]:
    """Updates/s of all of these sessions flooding at once (`total` between them), a lean subscriber each; and
    what each subscriber got."""
    admin = await GatewayClient.connect(gw.url, TOKEN)
    subs = [await lean_subscriber(gw, sid) for sid in session_ids]
    per = total // len(session_ids)
    tally = Tally(f"aggregate relay, {len(session_ids)} sessions flooding at once", per, len(subs), per * len(subs))

    async def count_updates(k: int, c: Any) -> None:
        while not tally.add(k, (await c.recv()).count('"type":"session_update"')):
            pass

    tally.start()
    await tally.wait(*(admin.call("task.session.prompt", {"session_id": sid, "prompt": str(per)})
                       for sid in session_ids), *(count_updates(k, c) for k, c in enumerate(subs)))
    rate = per * len(session_ids) / (time.perf_counter() - tally.t0)
    for c in subs:
        await c.close()
    await admin.close()
    return rate, tally


async def status_p50(gw: Gateway, session_id: str, calls: int = 2000) -> float:
    """Median µs of a `task.session.status` round trip, one call at a time on one lean client."""
    ws = await websockets.connect(f"{gw.url}?token={TOKEN}", max_size=None, compression=None)
    frame = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "task.session.status",
                          "params": {"session_id": session_id}}).decode()
    times: list[float] = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        await ws.send(frame)
        await ws.recv()
        times.append((time.perf_counter_ns() - t0) / 1000)
    await ws.close()
    return statistics.median(times[calls // 10:])


def scale_config(tmp: Path) -> Path:
    """Limits high enough for 96 live sessions and 1,000 subscribers of one owner."""
    config = tmp / "scale.toml"
    config.write_text("max_live_sessions_per_owner = 128\nmax_connections_per_owner = 128\n"
                      "max_sessions_per_owner = 1000\nmax_starts_per_minute_per_owner = 1000\n")
    return config


async def sessions_figures(tmp: Path, agents: Path, config: Path, rows: list[str]) -> None:
    """Aggregate relay and status p50 with 8, 32 and 96 live sessions, beside the same gateway with 1."""
    gw = Gateway(tmp / "scale", agents, ["--config", str(config)]).start()
    try:
        admin = await GatewayClient.connect(gw.url, TOKEN)
        live: list[str] = []

        async def grow_to(n: int) -> None:
            while len(live) < n:
                live.append((await start_session(admin, "flood"))["session_id"])

        await grow_to(1)
        total = N_UPDATES // 2
        await aggregate_relay(gw, live, N_UPDATES // 10)  # warm-up
        relay_base = [(await aggregate_relay(gw, live, total))[0] for _ in range(RUNS)]
        status_base = [await status_p50(gw, live[0]) for _ in range(RUNS)]
        for n in SCALE_SESSIONS:
            await grow_to(n)
            floods = [await aggregate_relay(gw, live, total) for _ in range(RUNS)]
            p50s = [await status_p50(gw, live[0]) for _ in range(RUNS)]
            rows.append(row(f"aggregate relay, {n} sessions flooding at once ({got_all([t for _, t in floods])})",
                            [rate for rate, _ in floods], relay_base, "upd/s", "reported", True, "1 session"))
            rows.append(row(f"task.session.status p50, {n} live sessions", p50s, status_base, "µs", "reported",
                            True, "1 live session"))
        for sid in live:
            await admin.call("task.session.cancel", {"session_id": sid})
        await admin.close()
    finally:
        gw.stop()


async def subscribe_many(gw: Gateway, sid: str, conns: list[Any]) -> None:
    """Subscribers of `sid` up to SCALE_SUBSCRIBERS (one is in `conns` already), 16 per connection, each caught
    up and live (its heartbeat task runs) before the next; their connections appended to `conns`."""
    subscribed = 1
    while subscribed < SCALE_SUBSCRIBERS:
        ws = await websockets.connect(f"{gw.url}?token={TOKEN}", max_size=None)
        conns.append(ws)
        for i in range(min(16, SCALE_SUBSCRIBERS - subscribed)):
            await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": i, "method": "task.session.subscribe",
                                        "params": {"session_id": sid}}).decode())
            await ws.recv()
            while orjson.loads(await ws.recv())["params"]["type"] != "caught_up":
                pass  # registered, replayed and live: its heartbeat task runs
            subscribed += 1


async def subscribers_memory(tmp: Path, agents: Path, config: Path, rows: list[str]) -> None:
    """One gateway, one session; RSS with 1 subscriber, then with 1,000 (16 per connection)."""
    gw = Gateway(tmp / "scale-memory", agents, ["--config", str(config)]).start()
    try:
        admin = await GatewayClient.connect(gw.url, TOKEN)
        sid = (await start_session(admin, "flood"))["session_id"]
        first = await lean_subscriber(gw, sid)
        await aggregate_relay(gw, [sid], N_UPDATES // 10)  # the journal and the caches warm
        one_rss = gw.rss_kib()
        conns = [first]
        await subscribe_many(gw, sid, conns)
        many_rss = gw.rss_kib()
        for ws in conns:
            await ws.close()
        await admin.close()
    finally:
        gw.stop()
    per = (many_rss - one_rss) / (SCALE_SUBSCRIBERS - 1)
    rows.append(f"| memory of {SCALE_SUBSCRIBERS:,} live subscribers | {many_rss:,} KiB RSS ({per:,.1f} KiB per "
                f"subscriber) | 1 subscriber: {one_rss:,} KiB RSS | {many_rss / one_rss:.2f}× | reported | met |")


async def scale_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """How cost grows: aggregate relay and status p50 with 8, 32 and 96 live sessions, and the memory of 1,000 live
    subscribers, each beside the same gateway with 1 session (1 subscriber), in the same run."""
    config = scale_config(tmp)
    await sessions_figures(tmp, agents, config, rows)
    await subscribers_memory(tmp, agents, config, rows)
