"""Section `latency`: time from an agent writing an update to a subscriber having it, beside the bare relay."""

from __future__ import annotations

import statistics
from pathlib import Path

from floods import latency_bare, latency_gateway
from harness import LATENCY_SAMPLES, RUNS, Gateway
from report import percentiles, row


async def latency_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """Time from an agent writing an update to a subscriber having it, through the gateway and the bare relay."""
    gw = Gateway(tmp / "latency", agents).start()
    ours = [percentiles(await latency_gateway(gw, LATENCY_SAMPLES)) for _ in range(RUNS)]
    gw.stop()
    bare = [percentiles(await latency_bare(LATENCY_SAMPLES)) for _ in range(RUNS)]
    p50, b50 = [o[0] for o in ours], [b[0] for b in bare]
    rows.append(row("relay latency p50", p50, b50, "µs", "p50 ≤ 2× bare",
                    statistics.median(p50) <= 2 * statistics.median(b50), "bare relay"))
    rows.append(row("relay latency p99", [o[1] for o in ours], [b[1] for b in bare], "µs", "reported", True,
                    "bare relay"))
