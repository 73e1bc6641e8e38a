"""Long floods to plain `websockets` subscribers of a real gateway: 200,000 updates, twice the journal's default
retention, read at full speed, slowly then fast, slowly until the flood ends, paused in the middle, and by ten
subscribers at once. Each gets every update once, in order, within a time proportional to the flood. (A subscriber
more than the retention behind used to have the rows it was about to read pruned, and its feeder moved over them in
silence: it then waited forever for updates that never came.)"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from websockets.asyncio.client import ClientConnection, connect

from tests.gateway_harness import ALICE, GatewayProcess, two_owner_gateway
from tests.support.paths import REPO

FLOOD = 200_000
FLOOD_AGENT = REPO / "bench" / "flood_agent.py"
# At least 2,000 updates a second to each subscriber, on a 2-core machine running the suite on two workers.
BOUND_SECONDS = 30 + FLOOD / 2000

# How long a reader waits before taking its next message: (messages taken so far, the flood's turn has ended).
Pace = Callable[[int, bool], float]


def flood_gateway(tmp_path: Path) -> GatewayProcess:
    gw = two_owner_gateway(tmp_path)
    command = [sys.executable, str(FLOOD_AGENT)]
    (gw.agents_dir / "flood.toml").write_text(f'id = "flood"\ncommand = {orjson.dumps(command).decode()}\n')
    return gw


async def subscriber(gw: GatewayProcess, session_id: str) -> ClientConnection:
    ws = await connect(f"{gw.url}?token={ALICE}", max_size=None)
    await ws.send(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "task.session.subscribe",
                                "params": {"session_id": session_id}}))
    assert "result" in orjson.loads(await ws.recv())
    while orjson.loads(await ws.recv())["params"]["type"] != "caught_up":
        pass
    return ws


async def read_flood(ws: ClientConnection, flood_ended: asyncio.Event, pace: Pace,
                     paused: asyncio.Event | None = None) -> tuple[list[int], int]:
    """Every event of the session until its turn ends, at the reader's pace: (their ids, the updates among them).
    With `paused`, the reader stops reading once that is set, until the flood's turn has ended."""
    ids: list[int] = []
    updates = 0
    taken = 0
    while True:
        if paused is not None and paused.is_set() and not flood_ended.is_set():
            await flood_ended.wait()
        params = orjson.loads(await ws.recv())["params"]
        taken += 1
        if params["id"] is None:
            continue  # a heartbeat
        ids.append(params["id"])
        if params["type"] == "session_update":
            updates += 1
        elif params["type"] == "turn_ended":
            return ids, updates
        delay = pace(taken, flood_ended.is_set())
        if delay:
            await asyncio.sleep(delay)


async def flood_to(tmp_path: Path, paces: list[Pace], pause_after: int | None = None) -> None:
    """Start a flood session, subscribe one plain reader per pace, flood, and check what each got."""
    gw = flood_gateway(tmp_path)
    await gw.start()
    try:
        starter = await gw.client(ALICE)
        sid = (await starter.call("task.session.start", {"agent": "flood", "cwd": str(tmp_path / "work"),
                                                         "wait_ready": True}))["session_id"]
        readers = [await subscriber(gw, sid) for _ in paces]
        flood_ended = asyncio.Event()
        paused = asyncio.Event() if pause_after is not None else None

        def pause_at(pace: Pace) -> Pace:
            def paced(taken: int, ended: bool) -> float:
                if paused is not None and pause_after is not None and taken >= pause_after:
                    paused.set()
                return pace(taken, ended)
            return paced

        reads = [asyncio.ensure_future(read_flood(ws, flood_ended, pause_at(pace), paused))
                 for ws, pace in zip(readers, paces, strict=True)]
        started = time.monotonic()
        answer = await starter.call("task.session.prompt", {"session_id": sid, "prompt": str(FLOOD)},
                                    timeout=BOUND_SECONDS)
        flood_ended.set()
        assert answer == {"stop_reason": "end_turn"}
        done, pending = await asyncio.wait(reads, timeout=BOUND_SECONDS - (time.monotonic() - started))
        assert not pending, f"{len(pending)} of {len(reads)} subscribers did not get the whole flood in time"
        for read in done:
            ids, updates = read.result()
            assert updates == FLOOD
            assert ids == list(range(ids[0], ids[0] + len(ids)))  # every event once, in order, no gap
        for ws in readers:
            await ws.close()
        await starter.close()
        assert not [line for line in gw.stderr_lines if "ending subscription" in line or "closing a connection" in line]
    finally:
        await gw.stop()


def full_speed(taken: int, ended: bool) -> float:
    return 0.0


def slow_then_fast(taken: int, ended: bool) -> float:
    return 0.001 if taken < 3000 else 0.0  # 3,000 messages a millisecond apart, the rest as they come


def slow_until_the_flood_ends(taken: int, ended: bool) -> float:
    return 0.0 if ended else 0.0005


async def test_a_flood_twice_the_retention_reaches_a_reader_at_full_speed(tmp_path: Path) -> None:
    await flood_to(tmp_path, [full_speed])


async def test_a_flood_reaches_a_reader_that_reads_slowly_then_fast(tmp_path: Path) -> None:
    await flood_to(tmp_path, [slow_then_fast])


async def test_a_flood_reaches_a_reader_slow_until_the_flood_ends(tmp_path: Path) -> None:
    await flood_to(tmp_path, [slow_until_the_flood_ends])


async def test_a_flood_reaches_a_reader_paused_in_the_middle_until_it_ended(tmp_path: Path) -> None:
    await flood_to(tmp_path, [full_speed], pause_after=FLOOD // 4)


async def test_a_flood_reaches_ten_readers_at_once(tmp_path: Path) -> None:
    await flood_to(tmp_path, [full_speed] * 10)
