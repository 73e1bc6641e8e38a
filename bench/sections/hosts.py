"""Section `hosts`: agents in agent hosts (`host_linger`, docs/agent-hosts.md) — a flood through a host, a restart
that reattaches 32 live hosts, what a host costs in memory, and the imports every cold start pays."""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import os
import select
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from floods import relay
from harness import (
    CLEAN_ENV,
    N_UPDATES,
    PY,
    ROOT,
    RUNS,
    STARTED,
    TOKEN,
    WORK,
    CpuMeter,
    Gateway,
    cpu_seconds,
    lean_subscriber,
    start_session,
)
from report import row
from tally import Tally, got_all

from gateway.clients.client import GatewayClient

HOSTED_SESSIONS = 32
LINGER = 60  # seconds a host waits for a gateway: far longer than a restart here
IMPORTED = ("gateway.cli.main", "gateway.app")  # what `acp-gateway serve` imports before it can listen
COLD_START_GOAL_MS = 150.0  # the goal, process start to the listening line
NEXT_UPDATE_GOAL_MS = 10.0  # the goal, a reattached session's next update after listening


def gateway_config(path: Path, linger: float) -> Path:
    """A gateway's TOML: `linger` > 0 runs each agent in a host; limits high enough for the section's sessions."""
    path.write_text(f"host_linger = {linger}\nmax_live_sessions_per_owner = {2 * HOSTED_SESSIONS}\n"
                    "max_starts_per_minute_per_owner = 1000\n")
    return path


def host_pids(state: Path) -> list[int]:
    """The agent hosts of the gateway with this state directory: their command line names their spec file, under
    `<state>/hosts/`."""
    found = []
    marker = str(state / "hosts").encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if b"gateway.agenthost" in cmdline and marker in cmdline:
                    found.append(int(entry.name))
    return sorted(found)


def children(pids: list[int]) -> dict[int, list[int]]:
    """The child processes of each of `pids` (a host's child is its agent)."""
    kids: dict[int, list[int]] = {pid: [] for pid in pids}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if parent in kids:
                    kids[parent].append(int(entry.name))
    return kids


def memory_kib(pid: int, key: str) -> int:
    """`VmRSS` from /proc/PID/status, or `Pss` from /proc/PID/smaps_rollup (shared pages split among their users)."""
    source = "status" if key.startswith("Vm") else "smaps_rollup"
    for line in Path(f"/proc/{pid}/{source}").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def end_hosts(states: list[Path], grace: float = 10.0) -> None:
    """Every host of these gateways ended, by its pid: SIGTERM first (the host stops its agent and removes its spool,
    LG-2), SIGKILL for one still there after `grace` (its agent dies with it: PR_SET_PDEATHSIG). Waited on through
    pidfds (readable once the process has exited)."""
    ending: dict[int, int] = {}
    for pid in (pid for state in states for pid in host_pids(state)):
        with contextlib.suppress(ProcessLookupError):
            ending[pid] = os.pidfd_open(pid)
            os.kill(pid, signal.SIGTERM)
    try:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            deadline = time.monotonic() + grace
            while ending:
                done, _, _ = select.select(list(ending.values()), [], [], max(0.0, deadline - time.monotonic()))
                if not done:
                    break
                for pid in [pid for pid, fd in ending.items() if fd in done]:
                    os.close(ending.pop(pid))
            if sig is signal.SIGTERM:
                for pid in ending:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
    finally:
        for fd in ending.values():
            os.close(fd)
    if ending:
        raise RuntimeError(f"agent hosts {sorted(ending)} outlived SIGKILL")


def kill9(gw: Gateway) -> None:
    """The gateway killed as a crash would end it: its hosts stay, unattached."""
    assert gw.proc is not None
    gw.proc.kill()
    gw.proc.wait(30)


# -- 1. a flood through a host ---------------------------------------------------------------------------------------

async def measured_flood(gw: Gateway, state: Path, figure: str, gateway_cpu: CpuMeter,
                         host_cpu: CpuMeter | None = None) -> Tally:
    """floods.relay with 1 subscriber (bench/flood_agent.py's flood, a lean subscriber counting it), and the CPU the
    gateway spent on the flood; with `host_cpu`, the agent runs in a host, whose CPU is counted too. Measured before
    the session is cancelled: that ends the agent, and its host with it (its CPU would go unseen)."""
    assert gw.proc is not None
    admin = await GatewayClient.connect(gw.url, TOKEN)
    before = set(host_pids(state))
    view = await start_session(admin, "flood")
    hosts = sorted(set(host_pids(state)) - before)
    if len(hosts) != (1 if host_cpu is not None else 0):
        raise RuntimeError(f"{figure}: {len(hosts)} agent hosts started for one session (host_linger decides)")
    sub = await lean_subscriber(gw, view["session_id"])
    tally = Tally(figure, N_UPDATES)

    async def count_updates() -> None:
        while not tally.add(0, (await sub.recv()).count('"type":"session_update"')):
            pass

    host_before = cpu_seconds(hosts[0]) if hosts else 0.0
    tally.start()
    await gateway_cpu.measure(gw.proc.pid, N_UPDATES, tally.wait(
        admin.call("task.session.prompt", {"session_id": view["session_id"], "prompt": str(N_UPDATES)}),
        count_updates()))
    if host_cpu is not None:
        host_cpu.seconds += cpu_seconds(hosts[0]) - host_before
        host_cpu.items += N_UPDATES
    await sub.close()
    await admin.call("task.session.cancel", {"session_id": view["session_id"]})
    await admin.close()
    return tally


async def relay_figures(tmp: Path, agents: Path, rows: list[str]) -> None:
    """The same flood with the agent in a host and as the gateway's child, two gateways, interleaved run by run."""
    hosted_state, child_state = tmp / "hosts-relay", tmp / "hosts-relay-children"
    hosted = Gateway(hosted_state, agents, ["--config", str(gateway_config(tmp / "hosts-relay.toml", LINGER))])
    child = Gateway(child_state, agents, ["--config", str(gateway_config(tmp / "hosts-relay-children.toml", 0))])
    try:
        hosted.start()
        child.start()
        for gw in (hosted, child):  # imports, first journal pages, the SQLite cache
            await relay(gw, 1, N_UPDATES // 10, figure="relay warm-up")
        through_host: list[Tally] = []
        as_child: list[Tally] = []
        cpu_hosted, cpu_host, cpu_child = CpuMeter(), CpuMeter(), CpuMeter()
        for _ in range(RUNS):
            through_host.append(await measured_flood(hosted, hosted_state, "relay through an agent host",
                                                     cpu_hosted, cpu_host))
            as_child.append(await measured_flood(child, child_state, "relay, the agent the gateway's child",
                                                 cpu_child))
    finally:
        hosted.stop()
        child.stop()
    rates_host, rates_child = [t.rates[0] for t in through_host], [t.rates[0] for t in as_child]
    rows.append(row(f"relay throughput through an agent host, 1 subscriber ({got_all(through_host)})", rates_host,
                    rates_child, "upd/s", "≥ 0.9× (issue goal)",
                    statistics.median(rates_host) >= 0.9 * statistics.median(rates_child),
                    "the same flood, the agent the gateway's child (host_linger = 0)",
                    f"through the host the gateway uses {cpu_hosted.per_item:.1f} µs of CPU per update and the host "
                    f"{cpu_host.per_item:.1f}, against the gateway's {cpu_child.per_item:.1f} with its child agent "
                    f"(the subscriber's process {cpu_hosted.driver_per_item:.1f} and {cpu_child.driver_per_item:.1f})"))
    rows.append(row("CPU per relayed update, gateway + agent host processes", [cpu_hosted.per_item + cpu_host.per_item],
                    [cpu_child.per_item], "µs", "reported", True, "the gateway process, the agent its child"))


# -- 2. and 3. a restart that reattaches 32 hosts; their memory --------------------------------------------------

async def first_update(sub: Any, timeout: float = 30.0) -> None:
    """Until the subscriber has a `session_update` (heartbeats, statuses and messages pass)."""
    async def wait() -> None:
        while '"type":"session_update"' not in await sub.recv():
            pass

    await asyncio.wait_for(wait(), timeout)


async def all_live(gw: Gateway, ids: list[str], hosts: list[int], state: Path) -> None:
    """Every session's agent running again, in the very same hosts: else the restart measured is not a reattach."""
    c = await GatewayClient.connect(gw.url, TOKEN)
    try:
        stopped = [sid for sid in ids
                   if not (await c.call("task.session.status", {"session_id": sid}))["is_agent_running"]]
    finally:
        await c.close()
    if stopped or host_pids(state) != hosts:
        raise RuntimeError(f"a restart did not reattach every host: {len(stopped)} of {len(ids)} sessions not "
                           f"running, hosts {len(host_pids(state))} of {len(hosts)} the same")


async def streaming_restart(gw: Gateway, state: Path, agents: Path, config: Path, sid: str, gate: Path) -> \
        tuple[Gateway, float, float, float]:
    """A session's agent streaming (`/trickle`: a chunk every 3 ms) when the gateway is killed -9: ms from the new
    process's start to a subscriber's first update of that session, and from its listening line to that update;
    beside it, a new subscriber's first update of the same stream before the kill (no restart at all). The stream
    then ends (its turn too)."""
    admin = await GatewayClient.connect(gw.url, TOKEN)
    sub = await lean_subscriber(gw, sid)
    prompt = asyncio.ensure_future(admin.call("task.session.prompt", {"session_id": sid,
                                                                       "prompt": f"/trickle {gate}"}))
    await first_update(sub)
    t_live = time.perf_counter()
    live_sub = await lean_subscriber(gw, sid)
    await first_update(live_sub)
    live_ms = (time.perf_counter() - t_live) * 1000
    await live_sub.close()
    kill9(gw)
    for conn in (sub, admin):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(conn.close(), 5)
    prompt.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):  # its connection died with the gateway
        await prompt
    t0 = time.perf_counter()
    gw = Gateway(state, agents, ["--config", str(config)]).start()
    t_listening = time.perf_counter()
    sub = await lean_subscriber(gw, sid)
    await first_update(sub)
    took = (time.perf_counter() - t0) * 1000
    next_ms = (time.perf_counter() - t_listening) * 1000
    gate.touch()

    async def turn_ended() -> None:
        while '"type":"turn_ended"' not in await sub.recv():
            pass

    await asyncio.wait_for(turn_ended(), 30)  # the next run's stream is a new turn
    await sub.close()
    return gw, took, next_ms, live_ms


async def restart_figures(tmp: Path, agents: Path, rows: list[str]) -> list[float]:
    """32 live hosted sessions (reference agents, idle): kill -9, then the new process's start to its listening line
    (every live host reattached before it listens), beside the same store's cold start with no host to attach; the
    hosts' memory beside their agents'; and the first update of a session streaming through the restart."""
    state = tmp / "hosts-restart"
    hosted_config = gateway_config(tmp / "hosts-restart.toml", LINGER)
    work = WORK / "hosts"
    work.mkdir(exist_ok=True)
    gw = Gateway(state, agents, ["--config", str(hosted_config)]).start()
    try:
        admin = await GatewayClient.connect(gw.url, TOKEN)
        ids = [str((await start_session(admin, "ref", work))["session_id"]) for _ in range(HOSTED_SESSIONS)]
        await admin.close()
        hosts = host_pids(state)
        if len(hosts) != HOSTED_SESSIONS:
            raise RuntimeError(f"{HOSTED_SESSIONS} hosted sessions started, but {len(hosts)} agent hosts run")
        reattach_ms: list[float] = []
        streaming_ms: list[float] = []
        next_ms: list[float] = []
        live_ms: list[float] = []
        host_rss: list[float] = []
        agent_rss: list[float] = []
        host_pss: list[float] = []
        agent_pss: list[float] = []
        for run in range(RUNS):
            kill9(gw)
            gw = Gateway(state, agents, ["--config", str(hosted_config)]).start()
            reattach_ms.append(gw.started_in * 1000)
            await all_live(gw, ids, hosts, state)
            kids = children(hosts)
            if any(len(k) != 1 for k in kids.values()):
                raise RuntimeError(f"an agent host without its one agent: {kids}")
            host_rss.append(statistics.median(memory_kib(pid, "VmRSS") for pid in hosts))
            agent_rss.append(statistics.median(memory_kib(k[0], "VmRSS") for k in kids.values()))
            host_pss.append(statistics.median(memory_kib(pid, "Pss") for pid in hosts))
            agent_pss.append(statistics.median(memory_kib(k[0], "Pss") for k in kids.values()))
            gw, took, after_listening, live = await streaming_restart(gw, state, agents, hosted_config,
                                                                      ids[run % len(ids)], tmp / f"hosts-gate-{run}")
            streaming_ms.append(took)
            next_ms.append(after_listening)
            live_ms.append(live)
        gw.stop()  # on_stop = "detach": the hosts stay, unattached, until they are ended here
        end_hosts([state])
        # The baseline: the same store, no hosts (host_linger = 0, the agents gone). Its first start finds the dead
        # hosts' rows and settles their sessions; the starts measured after it have nothing to attach.
        cold_config = gateway_config(tmp / "hosts-cold.toml", 0)
        Gateway(state, agents, ["--config", str(cold_config)]).start().stop()
        cold_ms: list[float] = []
        for _ in range(RUNS):
            gw = Gateway(state, agents, ["--config", str(cold_config)]).start()
            cold_ms.append(gw.started_in * 1000)
            gw.stop()
    finally:
        gw.stop()
    cold = f"the same store's cold start, its {HOSTED_SESSIONS} agents gone (host_linger = 0)"
    rows.append(row(f"restart after kill -9, {HOSTED_SESSIONS} live hosted sessions (start → listening, every host "
                    "reattached)", reattach_ms, cold_ms, "ms", "reported", True, cold))
    rows.append(row(f"restart after kill -9 → first update of a session streaming through it ({HOSTED_SESSIONS} "
                    "hosts reattached)", streaming_ms, cold_ms, "ms", "reported", True, cold))
    rows.append(row("a reattached session's next update (listening → a new subscriber's first update of the "
                    "session streaming through the kill -9)", next_ms, live_ms, "ms",
                    f"≤ {NEXT_UPDATE_GOAL_MS:.0f} ms (issue goal)", statistics.median(next_ms) <= NEXT_UPDATE_GOAL_MS,
                    "a new subscriber's first update of the same stream before the kill"))
    rows.append(row(f"memory per agent host (RSS, median of {HOSTED_SESSIONS}; PSS {statistics.median(host_pss):,.0f} "
                    f"KiB per host, {statistics.median(agent_pss):,.0f} per agent)", host_rss, agent_rss, "KiB",
                    "reported", True, "its agent, a reference agent (RSS)"))
    return cold_ms


# -- 4. the imports a cold start pays ----------------------------------------------------------------------------

OWN_PACKAGES = ("acp", "agents", "gateway")


def compile_bytecode() -> None:
    """The gateway's packages compiled to `__pycache__`, as an installed package is, before a start is measured:
    with PYTHONDONTWRITEBYTECODE set (as on the machine this was measured on) nothing writes a cache, and every start
    compiled every module it imported from source again (385 ms to listening against 277 with the cache)."""
    for package in OWN_PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)


def import_time(module: str) -> tuple[float, list[tuple[str, float]], float]:
    """ms `import module` takes in a fresh interpreter (`python -X importtime`: the top-level entries after the
    interpreter's own start, so `site` and `encodings` are not counted), every module under it by its cumulative
    ms, and the ms of the gateway's own modules (acp, agents, gateway: their self times) among them."""
    out = subprocess.run([PY, "-X", "importtime", "-c",
                          f"import sys; print('-- measured --', file=sys.stderr, flush=True); import {module}"],
                         capture_output=True, text=True, env=CLEAN_ENV, cwd=ROOT, check=True)
    lines = out.stderr.split("-- measured --\n", 1)[1].splitlines()
    total, own, nested = 0.0, 0.0, []
    for line in lines:
        if not line.startswith("import time:") or "|" not in line or "cumulative" in line:
            continue
        own_us, cumulative, name = line.split("|")
        ms = int(cumulative) / 1000
        if name.strip().split(".")[0] in OWN_PACKAGES:
            own += int(own_us.removeprefix("import time:")) / 1000
        if name.startswith("  "):  # imported by another: nested in a top-level entry's cumulative time
            nested.append((name.strip(), ms))
        else:
            total += ms
    return total, sorted(nested, key=lambda entry: -entry[1]), own


def stack_floor_ms() -> float:
    """ms from process start to bench/stack_floor.py's listening line: the chosen stack alone, nothing of ours."""
    t0 = time.perf_counter()
    # From /, isolated (-I: no working directory or PYTHON* variable on its import path), the bench's clean
    # environment: nothing but the installed stack is imported.
    proc = subprocess.Popen([PY, "-I", str(ROOT / "bench" / "stack_floor.py")], stdout=subprocess.PIPE,
                            env=CLEAN_ENV, cwd="/")
    assert proc.stdout is not None
    line = proc.stdout.readline()
    took = (time.perf_counter() - t0) * 1000
    proc.wait(30)
    if b"listening" not in line:
        raise RuntimeError("bench/stack_floor.py did not listen")
    return took


async def imports_figures(rows: list[str], cold_ms: list[float]) -> None:
    """The cold start beside the floor its stack sets; each of IMPORTED's import time, RUNS fresh interpreters each,
    beside the cold start to listening."""
    floor = [stack_floor_ms() for _ in range(max(RUNS, 3))]
    rows.append(row(f"cold start → listening, {HOSTED_SESSIONS} stored sessions, no hosts", cold_ms, floor, "ms",
                    f"≤ {COLD_START_GOAL_MS:.0f} ms (issue goal)", statistics.median(cold_ms) <= COLD_START_GOAL_MS,
                    "the stack alone listening: asyncio, websockets, pydantic (one model), aiosqlite, orjson, "
                    "prometheus_client (bench/stack_floor.py)",
                    f"the stack alone takes {statistics.median(floor):.0f} ms to listen: a goal at or below it is "
                    "out of reach of any gateway built on it; the ratio is what the gateway adds"))
    for module in IMPORTED:
        runs = sorted((import_time(module) for _ in range(RUNS)), key=lambda run: run[0])
        total, top, own = runs[len(runs) // 2]
        heaviest = ", ".join(f"{name} {ms:.0f}" for name, ms in top[:5])
        ok = statistics.median(cold_ms) <= COLD_START_GOAL_MS
        rows.append(row(f"cold start imports: `import {module}` (python -X importtime; top 5 by cumulative ms: "
                        f"{heaviest})", [r[0] for r in runs], cold_ms, "ms",
                        f"≤ {COLD_START_GOAL_MS:.0f} ms start → listening (issue goal)", ok,
                        f"cold start → listening, {HOSTED_SESSIONS} stored sessions, no hosts",
                        f"the imports alone take {total:.0f} ms of it, the gateway's own modules {own:.0f} of those "
                        "(the rest: the standard library and the dependencies); tests/test_import_cost.py holds what "
                        "must stay out of a start"))


async def hosts_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """A flood through an agent host beside the agent as the gateway's child; a restart reattaching 32 hosts beside
    the same store's cold start; a host's memory beside its agent's; the imports of a cold start. Every host
    started here is ended here (by pid), whatever fails."""
    relays = [tmp / "hosts-relay", tmp / "hosts-relay-children"]
    states = [*relays, tmp / "hosts-restart"]
    relayed: list[str] = []
    compile_bytecode()  # every start below reads its modules' bytecode, as an installed gateway's does
    try:
        await relay_figures(tmp, agents, relayed)
        end_hosts(relays)  # not left to weigh on the restarts
        restarts: list[str] = []
        cold_ms = await restart_figures(tmp, agents, restarts)
        await imports_figures(rows, cold_ms)  # first: beside the store section's cold start
        rows += restarts + relayed
    finally:
        for gw in STARTED:
            if gw.state in states:
                gw.stop()
        end_hosts(states)
