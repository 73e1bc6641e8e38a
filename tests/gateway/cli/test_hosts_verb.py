"""`acp-gateway hosts` and doctor's hosts line, against a real gateway with agent hosts (`host_linger`): a session's
host is listed live and attached while the gateway runs, lingering once it is killed -9, gone once the host itself is
killed; the execution's secret kept in the store never appears in what the command prints, as text or JSON."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.cli.hosts import is_host, summary
from gateway.config import ServeConfig
from tests.gateway.agenthost.test_gateway_restart import World, agent_pids, host_pids
from tests.gateway_harness import running


@pytest.fixture
async def hosted(tmp_path: Path) -> AsyncIterator[World]:
    w = World(tmp_path, 60)
    async with running(w.gateway):
        yield w
    for pid in host_pids(w.gateway.state_dir):  # the hosts outlive the gateway by design: none is left behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def cli(*argv: str, ok: bool = True) -> str:
    """`acp-gateway ARGV` as a process of its own: its standard output (with `ok`, it must exit 0 saying nothing on
    stderr; doctor's exit status says whether serve would start)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_GATEWAY_")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.cli", *argv, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    if ok:
        assert (proc.returncode, err.decode()) == (0, "")
    return out.decode()


def stored_host(state_dir: Path, sid: str) -> dict[str, Any]:
    with contextlib.closing(sqlite3.connect(state_dir / "gateway.db")) as db:
        [(host,)] = db.execute("SELECT host FROM agent_hosts WHERE session_id = ?", (sid,)).fetchall()
    found: dict[str, Any] = orjson.loads(host)
    return found


def on_disk(spool: str) -> int:
    return sum(f.stat().st_size for f in Path(spool).rglob("*") if f.is_file())


class Listing:
    """What `hosts` prints for a world's state directory, as text and as JSON, and doctor's hosts line."""

    def __init__(self, text: str, raw: str, doctor: str) -> None:
        self.text, self.raw, self.doctor = text, raw, doctor
        self.entries: list[dict[str, Any]] = orjson.loads(raw)

    @classmethod
    async def of(cls, w: World) -> Listing:
        where = ("--state-dir", str(w.gateway.state_dir), "--config", str(w.tmp_path / "gateway.toml"))
        doctor = await cli("doctor", *where, "--agents-dir", str(w.agents), ok=False)
        [line] = [line for line in doctor.splitlines() if line.startswith("hosts:")]
        return cls(await cli("hosts", *where), await cli("hosts", *where, "--json"), line)

    def line(self, sid: str) -> str:
        [line] = [line for line in self.text.splitlines() if sid in line]
        return line

    def shows(self, secret: str) -> bool:
        return any(secret in said for said in (self.text, self.raw, self.doctor))


async def test_hosts_shows_a_live_host_attached_then_lingering_then_gone_and_never_its_secret(hosted: World) -> None:
    state_dir = hosted.gateway.state_dir
    client = await hosted.gateway.client()
    sid = await hosted.session(client)
    await client.close()
    [agent] = agent_pids(hosted.agent_state)
    [host] = host_pids(state_dir)
    stored = stored_host(state_dir, sid)
    secret = stored["secret"]
    assert len(secret) >= 16
    assert hosted.gateway.proc is not None
    gateway = hosted.gateway.proc.pid

    listing = await Listing.of(hosted)
    [entry] = listing.entries
    assert f"gateway: running (pid {gateway})" in listing.text and "attached to its hosts" in listing.text
    assert f"agent ref, agent pid {agent}, host pid {host} alive (attached)" in listing.line(sid)
    assert f"spool {on_disk(stored['spool'])} bytes" in listing.line(sid)
    assert (entry["session_id"], entry["agent"], entry["agent_pid"], entry["host_pid"]) == (sid, "ref", agent, host)
    assert (entry["alive"], entry["state"], entry["gateway_pid"]) == (True, "attached", gateway)
    assert entry["spool_bytes"] == on_disk(stored["spool"])
    assert "secret" not in entry and "init" not in entry
    assert listing.doctor == "hosts: 1 running (0 lingering)"
    assert not listing.shows(secret)

    await hosted.gateway.kill9()
    assert host_pids(state_dir) == {host}  # the host outlives the gateway
    listing = await Listing.of(hosted)
    [entry] = listing.entries
    assert "gateway: none running" in listing.text
    assert "lingering (up to host_linger = 60 s since the gateway left)" in listing.text
    assert f"host pid {host} alive (lingering)" in listing.line(sid)
    assert (entry["alive"], entry["state"], entry["gateway_pid"]) == (True, "lingering", None)
    assert listing.doctor == "hosts: 1 running (1 lingering)"
    assert not listing.shows(secret)

    os.kill(host, signal.SIGKILL)
    for _ in range(200):  # once killed, the pid is no agent host any more (a zombie has no command line)
        if not is_host(host):
            break
        await asyncio.sleep(0.05)
    listing = await Listing.of(hosted)
    [entry] = listing.entries
    assert f"host pid {host} gone" in listing.line(sid)
    assert (entry["alive"], entry["state"]) == (False, "gone")
    assert listing.doctor == "hosts: 0 running (0 lingering)"
    assert not listing.shows(secret)


@pytest.mark.unit
def test_doctor_says_hosts_are_off_without_a_linger(tmp_path: Path) -> None:
    assert summary(ServeConfig(state_dir=str(tmp_path), host_linger=0)) == "hosts: off (host_linger = 0)"
    assert summary(ServeConfig(state_dir=str(tmp_path), host_linger=60.0)) == "hosts: 0 running (0 lingering)"


@pytest.mark.unit
def test_agents_run_in_hosts_that_linger_fifteen_minutes_by_default(tmp_path: Path) -> None:
    """The default keeps the work in flight across a restart (detach on SIGTERM, 900 s to come back)."""
    config = ServeConfig(state_dir=str(tmp_path))
    assert (config.host_linger, config.on_stop) == (900.0, "detach")
    assert summary(config) == "hosts: 0 running (0 lingering)"


async def test_doctor_says_serve_would_refuse_while_a_gateway_serves_the_state_directory(hosted: World) -> None:
    where = ("--state-dir", str(hosted.gateway.state_dir), "--config", str(hosted.tmp_path / "gateway.toml"),
             "--agents-dir", str(hosted.agents))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_GATEWAY_")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.cli", "doctor", *where, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    said = out.decode()
    assert proc.returncode == 1, said
    assert hosted.gateway.proc is not None
    assert f"PROBLEM: a gateway (pid {hosted.gateway.proc.pid}) already serves this state directory" in said, said
    assert said.rstrip().endswith("serve would refuse to start")
    await hosted.gateway.kill9()  # none serves it now: doctor's verdict is the sandbox's and the profiles' again
    assert "already serves" not in await cli("doctor", *where, ok=False)
