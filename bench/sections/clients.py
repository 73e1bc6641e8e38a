"""Section `clients`: the client libraries' own relay throughput, TypeScript and Python, beside the TypeScript SDK's."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from harness import CLEAN_ENV, N_UPDATES, ROOT, RUNS, TOKEN, WORK, Gateway, start_session
from report import row
from tally import MissedUpdates, Tally, flood_deadline

from gateway.clients.client import GatewayClient, OwnerSessionClient


async def python_client_relay(gw: Gateway, count: int) -> float:
    """Rate (updates/s) the Python OwnerSessionClient delivered a flood's events at (decoded, de-duplicated, with
    heartbeats on): what a Python frontend gets, beside bench/ts_clients.mjs's TypeScript ones."""
    admin = await GatewayClient.connect(gw.url, TOKEN)
    view = await start_session(admin, "flood")
    client = OwnerSessionClient(gw.url, TOKEN)
    tally = Tally("relay, Python OwnerSessionClient", count)
    done = asyncio.Event()

    def counted(event: dict[str, Any]) -> None:
        if event["type"] == "session_update" and tally.add(0):
            done.set()

    client.on_event.append(counted)
    client.start()
    try:  # closed whatever happens: it would reconnect for ever
        await asyncio.wait_for(client.connected.wait(), 30)
        tally.start()
        await tally.wait(admin.call("task.session.prompt", {"session_id": view["session_id"], "prompt": str(count)}),
                         done.wait())
    finally:
        await client.close()
    await admin.close()
    return tally.rates[0]


def ts_client_rate(gw: Gateway, mode: str, count: int) -> float | None:
    """bench/ts_clients.mjs: `package` (clients/typescript on /rpc) or `sdk` (the official TypeScript SDK on /acp),
    with the Node.js of `make interop`; None when Node.js or the package's build is missing (`make ts`)."""
    node = ROOT / ".interop" / "node_modules" / ".bin" / "node"
    package = ROOT / "clients" / "typescript"
    if not node.exists() or not (package / "node_modules").exists():
        return None
    if not (package / "dist" / "index.js").exists():
        subprocess.run(["npm", "run", "--silent", "build"], cwd=package, check=False)
    figure = f"relay, TypeScript {'client package' if mode == 'package' else 'SDK client'}"
    try:  # ts_clients.mjs gives up, exit status 3, past the flood's deadline (flood_deadline, the same)
        out = subprocess.run([str(node), str(ROOT / "bench" / "ts_clients.mjs"), mode, gw.url, TOKEN, str(count),
                              str(WORK)], capture_output=True, text=True, env=CLEAN_ENV, cwd=ROOT,
                             timeout=flood_deadline(count) + 60)
    except subprocess.TimeoutExpired as err:
        raise MissedUpdates(f"{figure}: no answer within {err.timeout:.0f} s") from err
    if out.returncode == 3:
        raise MissedUpdates(f"{figure}: {out.stderr.strip()}")
    if out.returncode != 0:
        print(f"ts_clients.mjs {mode} failed: {out.stderr[-2000:]}", file=sys.stderr)
        return None
    data = orjson.loads(out.stdout.strip().splitlines()[-1])
    return float(data["updates"] / data["seconds"])


async def clients_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """The clients' own relay throughput: the TypeScript package and the Python client (each decoding every event,
    keeping its cursor), and the official TypeScript SDK's WebSocket client on /acp, in the same run."""
    gw = Gateway(tmp / "clients", agents).start()
    count = N_UPDATES // 4
    await python_client_relay(gw, count // 10)  # warm-up
    ours_ts: list[float] = []
    ours_py: list[float] = []
    sdk_ts: list[float] = []
    for _ in range(RUNS):
        rate = ts_client_rate(gw, "package", count)
        if rate is not None:
            ours_ts.append(rate)
        ours_py.append(await python_client_relay(gw, count))
        rate = ts_client_rate(gw, "sdk", count)
        if rate is not None:
            sdk_ts.append(rate)
    gw.stop()
    if not ours_ts or not sdk_ts:
        rows.append("| TypeScript client relay | – | Node.js, the package or the SDK missing (make ts interop) | – | "
                    "reported | not measured |")
        return
    rows.append(row("relay, TypeScript client package (/rpc)", ours_ts, sdk_ts, "upd/s", "≥ 1× TS SDK",
                    statistics.median(ours_ts) >= statistics.median(sdk_ts),
                    "official TypeScript SDK client (/acp)"))
    rows.append(row("relay, TypeScript client package (/rpc)", ours_ts, ours_py, "upd/s", "reported", True,
                    "Python OwnerSessionClient (/rpc)"))
