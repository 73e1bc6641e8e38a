"""A full disk under the store, on a real tmpfs of a few MB: typed errors, /healthz says so, nothing acknowledged is
lost, and the gateway carries on once there is room again."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.clients.client import RpcCallError
from tests.gateway_harness import GatewayProcess, reference_profile
from tests.support.probes import healthz
from tests.support.world import start

CAP = 8 << 20


class Disk:
    """Where a gateway's state lives, and a way to fill it up and free it again."""

    def __init__(self, state: Path, config: str) -> None:
        self.state = state
        self.config = config  # configuration the gateway needs for it

    def fill(self) -> None:
        raise NotImplementedError

    def free(self) -> None:
        raise NotImplementedError


class Tmpfs(Disk):
    """An 8 MiB tmpfs: a disk that fills up for real (mounting needs root: CI runs `make test` as root)."""

    def fill(self) -> None:
        with open(self.state.parent / "filler", "wb") as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"x" * 65536)
                fh.flush()

    def free(self) -> None:
        (self.state.parent / "filler").unlink()


class CappedStore(Disk):
    """The store capped at 8 MiB (`store_max_bytes`), filled by another writer of the same file: SQLite refuses a
    write past the cap exactly as it refuses one on a full disk."""

    def fill(self) -> None:
        with contextlib.closing(sqlite3.connect(self.state / "gateway.db", isolation_level=None, timeout=10)) as db:
            db.execute(f"PRAGMA max_page_count = {CAP // db.execute('PRAGMA page_size').fetchone()[0]}")
            db.execute("CREATE TABLE filler (b BLOB)")
            with contextlib.suppress(sqlite3.OperationalError):
                while True:
                    db.execute("INSERT INTO filler VALUES (zeroblob(65536))")

    def free(self) -> None:
        with contextlib.closing(sqlite3.connect(self.state / "gateway.db", isolation_level=None, timeout=10)) as db:
            db.execute("DROP TABLE filler")


# A tmpfs where this user may mount one (root); the SQLite size limit everywhere.
DISKS = ["tmpfs", "capped_store"] if os.geteuid() == 0 else ["capped_store"]


@pytest.fixture(params=DISKS)
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Disk]:
    if request.param == "capped_store":
        yield CappedStore(tmp_path / "state", f"store_max_bytes = {CAP}\n")
        return
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={CAP}", "tmpfs", str(mount)], check=True)
    try:
        yield Tmpfs(mount / "state", "")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_disk_is_a_typed_error_and_nothing_acknowledged_is_lost(tmp_path: Path, disk: Disk) -> None:
    agents, work = tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    config = tmp_path / "gw.toml"
    config.write_text(disk.config)
    gw = GatewayProcess(disk.state, agents, "--workspace-root", str(work), config=config)
    await gw.start()
    try:
        client = await gw.client()
        view = await start(client, work)
        sid = view["session_id"]
        assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "before"}) == \
            {"stop_reason": "end_turn"}

        disk.fill()
        # A turn whose output cannot be stored fails; so does a start where even the WAL cannot grow (on a capped
        # store a start's few rows may still fit in pages the file has).
        calls: list[tuple[str, dict[str, Any]]] = [
            ("task.session.prompt", {"session_id": sid, "prompt": "/huge 300000"})]
        if isinstance(disk, Tmpfs):
            calls.append(("task.session.start", {"agent": "ref", "cwd": str(work)}))
        for method, params in calls:
            with pytest.raises(RpcCallError) as info:
                await client.call(method, params)
            assert info.value.code == -32016 and "free space" in info.value.message, info.value
        assert (await healthz(gw.port)).startswith("HTTP/1.1 503")
        assert (await client.call("task.session.status", {"session_id": sid}))["state"] == "WAITING_FOR_INPUT"

        disk.free()  # room again: the next write succeeds, and the gateway says it is healthy
        assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "after"}) == \
            {"stop_reason": "end_turn"}
        assert (await healthz(gw.port)).startswith("HTTP/1.1 200")
        history = await client.call("task.session.history", {"session_id": sid})
        said = [e["content"] for e in history["entries"] if e["kind"] == "user_message"]
        assert said[0] == "before" and said[-1] == "after"
        await client.close()
    finally:
        await gw.stop()
    with sqlite3.connect(disk.state / "gateway.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
