"""One agent's output never costs the other owners: an agent writing a 64 MiB line and then 150 MB without a
newline while another owner calls the API — that owner's latency stays near its idle latency (a ratio measured in
the test, not a fixed time), and the gateway's memory grows by at most the line limit plus a constant."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

import orjson
import pytest

from acp.framing import DEFAULT_MAX_LINE
from gateway.clients.client import GatewayClient
from tests.gateway_harness import ALICE, BOB, running, two_owner_gateway
from tests.support.paths import TESTS

pytestmark = pytest.mark.serial  # a latency ratio: another test running beside it would be measured too

CONSTANT = 48 * 1024 * 1024  # what the gateway may hold besides the one line at most (buffers, allocator slack)


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def latencies(client: GatewayClient, count: int) -> list[float]:
    taken = []
    for _ in range(count):
        started = time.perf_counter()
        await client.call("gateway.info")
        taken.append(time.perf_counter() - started)
    return taken


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


async def test_a_flooding_agent_costs_another_owner_nothing(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path)
    command = [sys.executable, str(TESTS / "line_flood_agent.py")]
    (gw.agents_dir / "flood.toml").write_text(f'id = "flood"\ncommand = {orjson.dumps(command).decode()}\n')
    async with running(gw):
        assert gw.proc is not None
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        view = await alice.call("task.session.start", {"agent": "flood", "cwd": str(tmp_path / "work"),
                                                       "wait_ready": True})
        await latencies(bob, 50)  # warm
        idle = await latencies(bob, 600)
        before = peak_rss(gw.proc.pid)
        turn = asyncio.ensure_future(alice.call("task.session.prompt", {"session_id": view["session_id"],
                                                                        "prompt": "flood"}))
        loaded: list[float] = []
        while not turn.done():  # Bob calls for as long as the agent writes
            loaded += await latencies(bob, 20)
        assert (await turn)["stop_reason"] == "end_turn"  # the session survived it
        assert len(loaded) >= 100, "the flood was read faster than Bob could be measured: nothing was tested"
        ratio = p99(loaded) / p99(idle)
        # Why 5x: on the 2-core CI machine the flooding agent, the gateway reading it and this client share two cores,
        # and that alone moves Bob's p99 1.1-3.5x from run to run (the code before this guard's last change shows the
        # same spread). What the guard is for is one order of magnitude more: parsing or copying the flood on the
        # event loop took Bob's p99 from 3 ms to 60 ms (20x).
        assert ratio <= 5.0, f"bob's p99 went from {p99(idle) * 1e3:.2f} ms to {p99(loaded) * 1e3:.2f} ms"
        grown = peak_rss(gw.proc.pid) - before
        print(f"bob's p99 idle {p99(idle) * 1e3:.2f} ms, loaded {p99(loaded) * 1e3:.2f} ms ({ratio:.2f}x, "
              f"{len(loaded)} calls); gateway peak RSS +{grown >> 20} MiB")
        assert grown <= DEFAULT_MAX_LINE + CONSTANT, f"the gateway grew by {grown >> 20} MiB"
        status = await alice.call("task.session.status", {"session_id": view["session_id"]})
        assert status["is_agent_running"]
        await alice.close()
        await bob.close()
