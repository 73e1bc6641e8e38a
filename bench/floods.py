"""A flood through a relay, as several sections measure it: the gateway's, the bare relays', the Python SDK's."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import websockets
from harness import (
    CLEAN_ENV,
    FLOOD,
    ROOT,
    SDK_VENV,
    TOKEN,
    WORK,
    BareRelay,
    CpuMeter,
    Gateway,
    lean_subscriber,
    start_session,
)
from tally import Tally, flood_deadline

from gateway.clients.client import GatewayClient


async def relay(gw: Gateway, subscribers: int, count: int, batch: bool = False, figure: str = "relay") -> Tally:
    """A flood committed before published, to `subscribers` lean subscribers: what each got, and at what rate
    (`.rates`, updates/s). Raises MissedUpdates when one stops short of the flood."""
    admin = await GatewayClient.connect(gw.url, TOKEN)
    view = await start_session(admin, "flood")
    subs = [await lean_subscriber(gw, view["session_id"], batch) for _ in range(subscribers)]  # they count, not decode
    tally = Tally(figure, count, subscribers)

    async def count_updates(k: int, c: Any) -> None:
        while not tally.add(k, (await c.recv()).count('"type":"session_update"')):
            pass

    counters = [count_updates(k, c) for k, c in enumerate(subs)]
    tally.start()
    await tally.wait(admin.call("task.session.prompt", {"session_id": view["session_id"], "prompt": str(count)}),
                     *counters)
    for c in subs:
        await c.close()
    await admin.call("task.session.cancel", {"session_id": view["session_id"]})
    await admin.close()
    return tally


async def acp_relay(gw: Gateway, count: int) -> Tally:
    """Rate (updates/s) one remote ACP client on `/acp` received a flood at: the same session, the same flood, as
    `session/update` notifications instead of `task.session.event`s (each event translated once per group)."""
    admin = await GatewayClient.connect(gw.url, TOKEN)
    view = await start_session(admin, "flood")
    c = await websockets.connect(f"ws://127.0.0.1:{gw.port}/acp?token={TOKEN}", max_size=None, compression=None)
    await c.send(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"protocolVersion": 1}}).decode())
    await c.recv()
    resume = {"sessionId": view["session_id"], "cwd": str(WORK), "mcpServers": []}
    await c.send(orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/resume", "params": resume}).decode())
    await c.recv()

    tally = Tally("relay to an ACP client on /acp", count)

    async def count_updates() -> None:
        while not tally.add(0, str(await c.recv()).count('"method":"session/update"')):
            pass

    tally.start()
    await tally.wait(admin.call("task.session.prompt", {"session_id": view["session_id"], "prompt": str(count)}),
                     count_updates())
    await c.close()
    await admin.call("task.session.cancel", {"session_id": view["session_id"]})
    await admin.close()
    return tally


async def bare_relay(count: int, meter: CpuMeter | None = None, durable: Path | None = None,
                     batch: bool = False) -> float:
    """Baseline: an asyncio NDJSON reader feeding a websockets broadcast, no gateway logic; with a `durable`
    database, each batch read committed to it before it is sent, and with `batch`, sent as one JSON array."""
    relay_process = BareRelay(durable)
    name = "bare relay" if durable is None else f"durable bare relay{' (batch)' if batch else ''}"
    async with relay_process as client:
        async def flood() -> float:
            tally = Tally(name, count)

            async def receive() -> None:
                if batch:
                    while not tally.add(0, (await client.recv()).count('"method":"session/update"')):
                        pass
                else:  # a message per line
                    while True:
                        await client.recv()
                        if tally.add(0):
                            break

            tally.start()
            await client.send(f"batch:{count}" if batch else str(count))
            await tally.wait(receive())
            return tally.rates[0]

        if meter is None:
            return await flood()
        return float(await meter.measure(relay_process.proc.pid, count, flood()))


def sdk_rate(count: int) -> float | None:
    """Rate (updates/s) the official Python SDK client (bench/sdk_client.py, on its own venv) read a flood at;
    None when that venv cannot be made or the client fails (its stderr is printed)."""
    python = SDK_VENV / "bin" / "python"
    if not python.exists():  # `make bench` makes it; a direct `python bench/run.py` may not have
        subprocess.run(["make", "-s", "sdk"], cwd=ROOT, check=False)
    if not python.exists():
        return None
    try:  # it gives up itself at the flood's deadline (flood_deadline), saying what it got
        out = subprocess.run([str(python), str(ROOT / "bench" / "sdk_client.py"), str(count), *FLOOD],
                             capture_output=True, text=True, env=CLEAN_ENV, cwd="/tmp",
                             timeout=flood_deadline(count) + 30)
    except subprocess.TimeoutExpired:
        print("the official Python SDK client did not finish", file=sys.stderr)
        return None
    if out.returncode != 0:
        print(f"the official Python SDK client failed: {out.stderr[-2000:]}", file=sys.stderr)
        return None
    data = orjson.loads(out.stdout.strip().splitlines()[-1])
    return float(data["updates"] / data["seconds"])


async def latency_gateway(gw: Gateway, count: int, watched_from: Gateway | None = None) -> list[float]:
    """ms from the agent stamping each of `count` updates to a lean subscriber having it. `watched_from`: the
    subscriber on another node of a cluster than the one running the agent."""
    admin = await GatewayClient.connect(gw.url, TOKEN)
    view = await start_session(admin, "flood")
    sub = await lean_subscriber(watched_from or gw, view["session_id"])
    lat: list[float] = []
    tally = Tally("relay latency" + (", subscriber on another node" if watched_from else ""), count)

    async def collect() -> None:
        while len(lat) < count:
            msg = orjson.loads(await sub.recv())
            now = time.perf_counter_ns()
            for note in msg if isinstance(msg, list) else [msg]:
                if note.get("params", {}).get("type") == "session_update":
                    stamp = int(note["params"]["data"]["update"]["content"]["text"][:20].rstrip("x"))
                    lat.append((now - stamp) / 1e6)
                    tally.add(0)

    await tally.wait(admin.call("task.session.prompt", {"session_id": view["session_id"], "prompt": f"lat:{count}"}),
                     collect())
    await sub.close()
    await admin.call("task.session.cancel", {"session_id": view["session_id"]})
    await admin.close()
    return lat


async def latency_bare(count: int) -> list[float]:
    """The same stamped updates through the bare relay: its ms from stamp to subscriber."""
    lat: list[float] = []
    tally = Tally("bare relay latency", count)

    async def collect() -> None:
        while len(lat) < count:
            msg = orjson.loads(await client.recv())
            now = time.perf_counter_ns()
            lat.append((now - int(msg["params"]["update"]["content"]["text"][:20].rstrip("x"))) / 1e6)
            tally.add(0)

    async with BareRelay() as client:
        await client.send(f"lat:{count}")
        await tally.wait(collect())
    return lat
