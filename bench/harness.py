"""What every bench section shares: the knobs, a gateway process, its agents, lean subscribers, the bare relay."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import orjson
import websockets

from gateway.clients.client import GatewayClient

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FLOOD = [PY, str(ROOT / "bench" / "flood_agent.py")]
TOKEN = "bench-token-0123456789abcdef"
# The knobs (bench/README.md): runs per figure, and the size of a flood.
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
N_UPDATES = int(os.environ.get("BENCH_UPDATES", "200000"))
LATENCY_SAMPLES = 3000
# Child processes get no PYTHONUNBUFFERED (it slows a flooding writer) and none of the gateway's own settings.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED",) and not k.startswith("ACP_")}
SDK_VENV = ROOT / ".sdk-venv"  # made by `make sdk`
WORK = Path(tempfile.gettempdir()) / "acp-bench-work"  # the sessions' workspace (outside every state directory)

# Every gateway started, so a figure that raises midway leaves no process behind (see run.main).
STARTED: list[Gateway] = []


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU a process has used (this one when `pid` is None): what a figure cost, beside how fast it
    went. On a 2-core machine shared by the agent, the relay and the subscribers, a relay's rate is bound by it."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU µs per item of a process (and of this driver) over the runs it measured."""

    def __init__(self) -> None:
        self.seconds = self.driver = 0.0
        self.items = 0

    async def measure(self, pid: int, items: int, run: Awaitable[Any]) -> Any:
        before, mine = cpu_seconds(pid), cpu_seconds()
        result = await run
        self.seconds += cpu_seconds(pid) - before
        self.driver += cpu_seconds() - mine
        self.items += items
        return result

    @property
    def per_item(self) -> float:
        return self.seconds / self.items * 1e6 if self.items else float("nan")

    @property
    def driver_per_item(self) -> float:
        return self.driver / self.items * 1e6 if self.items else float("nan")


class Gateway:
    """A gateway process of its own, synchronous to start so `started_in` is process start to its listening line
    (the store section's cold start). Not tests/gateway_harness.py's: that one starts asynchronously, with the
    tests' token and environment, and collects the log the tests check; this one drops it."""

    def __init__(self, state: Path, agents: Path, extra: list[str] | None = None) -> None:
        self.state, self.agents, self.extra = state, agents, list(extra or [])
        # Agents are the gateway's children here unless a section's configuration says `host_linger` (the hosts
        # section compares both): a stopped gateway's hosts would otherwise keep their agents for 900 s.
        if "--config" in self.extra:
            config = Path(self.extra[self.extra.index("--config") + 1])
            if "host_linger" not in config.read_text():
                config.write_text("host_linger = 0\n" + config.read_text())
        else:
            config = state.parent / f"{state.name}-bench.toml"
            config.write_text("host_linger = 0\n")
            self.extra += ["--config", str(config)]
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.started_in = 0.0

    def start(self) -> Gateway:
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([PY, "-m", "gateway.cli", "serve", "--port", "0", "--state-dir", str(self.state),
                                      "--workspace-root", str(WORK), "--agents-dir", str(self.agents), "--token",
                                      TOKEN, *self.extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=CLEAN_ENV, cwd=ROOT)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline().decode()
        self.started_in = time.perf_counter() - t0
        match = re.search(r":(\d+)/rpc", line)
        if not match:
            raise RuntimeError(f"the gateway did not start: {self.proc.stderr.read().decode()[-3000:]}")
        # Its log is read (and dropped) on a thread: a full pipe would stall it.
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        self.port = int(match.group(1))
        STARTED.append(self)
        return self

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/rpc"

    def rss_kib(self) -> int:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def reference_command(agents: Path) -> list[str]:
    """The reference agent's argv, its sessions kept beside the agents directory (so a gateway restart, or a
    direct launch as a baseline, finds them)."""
    return [PY, "-m", "agents.reference", "--state-dir", str(agents.parent / "ref-state")]


def flood_profile(agents: Path) -> None:
    """The two agents most sections use: `flood` (bench/flood_agent.py) and `ref` (the reference agent)."""
    cmd = ["/usr/bin/env", "-u", "PYTHONUNBUFFERED", *FLOOD]
    (agents / "flood.toml").write_text(f'id = "flood"\ncommand = {orjson.dumps(cmd).decode()}\n'
                                       "native_session_resume = true\n")
    (agents / "ref.toml").write_text(f'id = "ref"\ncommand = {orjson.dumps(reference_command(agents)).decode()}\n'
                                     "native_session_resume = true\n")


async def start_session(client: GatewayClient, agent: str, cwd: Path = WORK) -> dict[str, Any]:
    """A live session of `agent`, its agent ready: the view `task.session.start` answers."""
    view: dict[str, Any] = await client.call("task.session.start", {"agent": agent, "cwd": str(cwd),
                                                                    "wait_ready": True})
    return view


async def lean_subscriber(gw: Gateway, session_id: str, batch: bool = False) -> Any:
    """A raw WebSocket subscribed to one session, as lean as the bare relay's client: the relay is what differs.
    `batch`: it accepts a backlog as one JSON array (subscribe {batch: true}); by default, a message per event.
    Typed Any, as the bare relay's client: the gateway sends text frames, and the counters call `str.count` on them."""
    c = await websockets.connect(f"{gw.url}?token={TOKEN}", max_size=None)
    await c.send(orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "task.session.subscribe",
                               "params": {"session_id": session_id, "batch": batch}}).decode())
    await c.recv()
    return c


class BareRelay:
    """A baseline relay in its own process, like the gateway, with one subscriber: bench/bare_relay.py, or with a
    `database`, bench/durable_relay.py committing to it (the file and its WAL are removed after)."""

    def __init__(self, database: Path | None = None) -> None:
        self.database = database
        script = ["bare_relay.py"] if database is None else ["durable_relay.py", str(database)]
        self.proc = subprocess.Popen([PY, str(ROOT / "bench" / script[0]), *script[1:], *FLOOD],
                                     stdout=subprocess.PIPE, env=CLEAN_ENV, cwd="/tmp")
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    async def __aenter__(self) -> Any:
        self.client = await websockets.connect(f"ws://127.0.0.1:{self.port}", max_size=None, compression=None)
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        self.proc.kill()
        self.proc.wait()
        if self.database is not None:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.database}{suffix}").unlink(missing_ok=True)
