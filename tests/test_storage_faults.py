"""A full disk under the store, on a real tmpfs of a few MB: typed errors, /healthz says so, nothing acknowledged is
lost, and the gateway carries on once there is room again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.client import RpcCallError
from tests.gateway_harness import GatewayProcess, reference_profile


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs: a disk that fills up for real (mounting needs root: `make test` runs as root in CI)."""
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs to fill a disk for real: run it as root (CI does)")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb") as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"x" * 65536)
            fh.flush()
    return filler


async def healthz(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    status = (await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)).decode().strip()
    writer.close()
    return status


async def test_a_full_disk_is_a_typed_error_and_nothing_acknowledged_is_lost(tmp_path: Path, tiny: Path) -> None:
    agents, work = tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    gw = GatewayProcess(tiny / "state", agents, "--workspace-root", str(work))
    await gw.start()
    try:
        client = await gw.client()
        view = await client.call("task.session.start", {"agent": "ref", "cwd": str(work), "wait_ready": True})
        sid = view["session_id"]
        assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "before"}) == \
            {"stop_reason": "end_turn"}

        filler = fill(tiny)
        for method, params in [("task.session.prompt", {"session_id": sid, "prompt": "during"}),
                               ("task.session.start", {"agent": "ref", "cwd": str(work)})]:
            with pytest.raises(RpcCallError) as info:
                await client.call(method, params)
            assert info.value.code == -32016 and "free space" in info.value.message, info.value
        assert (await healthz(gw.port)).startswith("HTTP/1.1 503")
        assert (await client.call("task.session.status", {"session_id": sid}))["state"] == "WAITING_FOR_INPUT"

        filler.unlink()  # room again: the next write succeeds, and the gateway says it is healthy
        assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "after"}) == \
            {"stop_reason": "end_turn"}
        assert (await healthz(gw.port)).startswith("HTTP/1.1 200")
        history = await client.call("task.session.history", {"session_id": sid})
        said = [e["content"] for e in history["entries"] if e["kind"] == "user_message"]
        assert said[0] == "before" and said[-1] == "after"
        await client.close()
    finally:
        await gw.stop()
    with sqlite3.connect(tiny / "state" / "gateway.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
