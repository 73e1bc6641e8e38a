"""Memory after a burst: clients that ask for more than they read are cut by bytes, and the memory comes back."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from pathlib import Path

from tests.gateway_harness import ALICE, BOB, frozen_websocket, two_owner_gateway

MB = 1 << 20


def rss(pid: int) -> int:
    """The process's resident set, in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def greedy_reader(port: int, token: str, session_id: str, requests: int) -> socket.socket:
    """A WebSocket client that asks for the session's whole history `requests` times and reads nothing."""
    return frozen_websocket(port, token, [(f'{{"jsonrpc":"2.0","id":{n},"method":"task.session.history",'
                                           f'"params":{{"session_id":"{session_id}","limit":1000}}}}').encode()
                                          for n in range(requests)])


async def sample_until(done: Callable[[], bool], sample: Callable[[], int], timeout: float) -> int:
    """Sample (RSS) every 50 ms until `done()`; the highest sample. Fails after `timeout` seconds."""
    deadline, peak = time.monotonic() + timeout, 0
    while not done():
        peak = max(peak, sample())
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return max(peak, sample())


async def test_greedy_readers_are_cut_by_bytes_and_their_memory_comes_back(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path)
    await gw.start()
    alice = bob = None
    try:
        assert gw.proc is not None
        pid = gw.proc.pid
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        view = await alice.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                       "wait_ready": True})
        for _ in range(20):  # a 10 MB history
            await alice.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "/huge 500000"})
        await alice.call("task.session.history", {"session_id": view["session_id"], "limit": 1000})  # warm
        before = rss(pid)

        readers = [greedy_reader(gw.port, ALICE, view["session_id"], 5) for _ in range(10)]  # 500 MB asked for
        cut = lambda: sum("reads none of its" in line for line in gw.stderr_lines) == len(readers)  # noqa: E731
        during = await sample_until(cut, lambda: rss(pid), 60)
        assert (await bob.call("gateway.info"))["owner"] == "bob"  # everyone else is still served
        for sock in readers:
            sock.close()

        # Each reader holds at most one answer in its socket buffer plus one queued, and that
        # only until it is cut: the burst is visible, and bounded far below the 500 MB asked for.
        assert 20 * MB < during - before < 250 * MB, (before, during)
        settled = before + (during - before) // 4
        after = await sample_until(lambda: rss(pid) <= settled, lambda: 0, 30) or rss(pid)
        assert after <= settled, (before, during, after)
    finally:
        for client in (alice, bob):
            if client is not None:
                await client.close()
        await gw.stop()
