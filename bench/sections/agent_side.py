"""Sections `resume`, `sandbox` and `framing`: the agent's side (its restart, its sandbox, its output)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import orjson
from harness import CLEAN_ENV, PY, RUNS, TOKEN, WORK, Gateway, reference_command, start_session
from report import row

from gateway.clients.client import GatewayClient


async def resume_overhead(tmp: Path, agents: Path, runs: int = 25) -> tuple[list[float], list[float]]:
    """`task.session.resume` to ready through the gateway, and the bare agent's spawn + initialize + resume."""
    from acp.client import AcpClient

    work = WORK / "resume"
    work.mkdir(exist_ok=True)
    state = tmp / "resume-state"
    g = Gateway(state, agents).start()
    c = await GatewayClient.connect(g.url, TOKEN)
    ids = [await start_session(c, "ref", work) for _ in range(runs)]
    await c.close()
    g.stop()  # every session now needs a resume
    g = Gateway(state, agents).start()
    c = await GatewayClient.connect(g.url, TOKEN)
    gateway_ms, bare_ms = [], []
    ref = reference_command(agents)
    # Interleaved per session, so drift on a shared machine hits both alike.
    for view in ids:
        t0 = time.perf_counter()
        resumed = await c.call("task.session.resume", {"session_id": view["session_id"]})
        gateway_ms.append((time.perf_counter() - t0) * 1000)
        assert resumed["is_agent_running"], resumed
        await c.call("task.session.cancel", {"session_id": view["session_id"]})
        t0 = time.perf_counter()
        client = await AcpClient.launch(ref, cwd=str(work), env=CLEAN_ENV)
        await client.initialize()
        await client.request("session/resume", {"sessionId": view["acp_session_id"], "cwd": str(work),
                                                "mcpServers": []})
        bare_ms.append((time.perf_counter() - t0) * 1000)
        await client.stop()
    await c.close()
    g.stop()
    return gateway_ms, bare_ms


async def resume_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """What a resume through the gateway adds to the bare agent's own spawn, initialize and resume, at p50."""
    gateway_ms, bare_ms = await resume_overhead(tmp, agents)
    added = statistics.median(gateway_ms) - statistics.median(bare_ms)
    rows.append(f"| resume overhead (resume → ready, minus the bare agent) | {added:.1f} ms added at p50 (gateway "
                f"{statistics.median(gateway_ms):.1f} ms, min {min(gateway_ms):.1f}, max {max(gateway_ms):.1f}) | "
                f"bare spawn + initialize + session/resume: {statistics.median(bare_ms):.1f} ms "
                f"(min {min(bare_ms):.1f}, max {max(bare_ms):.1f}) | – | ≤ 30 ms added at p50 | "
                f"{'met' if added <= 30 else 'NOT met'} |")


def split_cost(line_bytes: int, total: int = 64 << 20) -> float:
    """ns per byte for `acp.framing.LineSplitter` taking `total` bytes of lines `line_bytes` long, fed in the reader's
    chunks (READ_CHUNK), as an agent's stdout arrives."""
    from acp.framing import READ_CHUNK, LineSplitter

    line = b"x" * (line_bytes - 1) + b"\n"
    stream = line * (total // line_bytes)
    splitter = LineSplitter(max_line=64 << 20)
    t0 = time.perf_counter()
    for at in range(0, len(stream), READ_CHUNK):
        splitter.feed(stream[at:at + READ_CHUNK])
    return (time.perf_counter() - t0) * 1e9 / len(stream)


async def framing_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """The line splitter's cost per byte of one 64 MiB line, beside the same bytes as 64 KiB lines (linear, not
    quadratic, in a line's length)."""
    one_line = [split_cost(64 << 20) for _ in range(RUNS)]
    short_lines = [split_cost(64 << 10) for _ in range(RUNS)]
    ratio = statistics.median(one_line) / statistics.median(short_lines)
    rows.append(row("splitting a 64 MiB line (per byte)", one_line, short_lines, "ns/byte", "≤ 2× 64 KiB lines",
                    ratio <= 2.0, "the same bytes as 64 KiB lines"))


async def sandbox_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """An agent's start (task.session.start to ready) under bubblewrap beside the same agent unconfined, interleaved
    in one gateway so drift on a shared machine hits both alike."""
    ref = [PY, "-m", "agents.reference"]  # its sessions in its owner's agent home, inside the sandbox too
    for name, extra in (("ref-none", ""), ("ref-bwrap", 'sandbox = "bwrap"\n')):
        (agents / f"{name}.toml").write_text(f'id = "{name}"\ncommand = {orjson.dumps(ref).decode()}\n'
                                             f"native_session_resume = true\n{extra}")
    work = WORK / "sandbox"
    work.mkdir(exist_ok=True)
    g = Gateway(tmp / "sandbox-state", agents).start()
    c = await GatewayClient.connect(g.url, TOKEN)
    timings: dict[str, list[float]] = {"ref-none": [], "ref-bwrap": []}
    for _ in range(15):
        for name in timings:
            t0 = time.perf_counter()
            view = await c.call("task.session.start", {"agent": name, "cwd": str(work), "wait_ready": True})
            timings[name].append((time.perf_counter() - t0) * 1000)
            assert view["is_agent_running"], view
            await c.call("task.session.cancel", {"session_id": view["session_id"]})
    await c.close()
    g.stop()
    ratio = statistics.median(timings["ref-bwrap"]) / statistics.median(timings["ref-none"])
    rows.append(row("agent start to ready under bwrap", timings["ref-bwrap"], timings["ref-none"], "ms",
                    "≤ 1.3× unconfined", ratio <= 1.3, "the same agent unconfined"))
