"""`make bench`: every figure beside a baseline measured in the same run, as a ratio. See bench/README.md.

Knobs (environment): BENCH_ONLY=relay,journal runs only those sections (names in SECTIONS; empty runs them all);
BENCH_RUNS (runs per figure, default 3) and BENCH_UPDATES (updates per flood, default 200,000), read in harness.py.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

# The repository root, for the gateway's own packages and tests/pg_server.py; this directory (bench/, the script's)
# is on the path already and holds the bench's modules, imported as top-level ones (harness, report, sections…).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import N_UPDATES, RUNS, STARTED, WORK, flood_profile
from report import failed_row, print_machine, print_table
from sections.agent_side import framing_section, resume_section, sandbox_section
from sections.calls import config_section, dispatch_section, isolation_section, rpc_section
from sections.checkpoints import checkpoints_section
from sections.clients import clients_section
from sections.hosts import hosts_section
from sections.latency import latency_section
from sections.postgres import postgres_section
from sections.relay import relay_section
from sections.scale import scale_section
from sections.store import journal_section, memory_section, store_section

Section = Callable[[Path, Path, list[str]], Awaitable[None]]

# In the table's order.
SECTIONS: dict[str, Section] = {
    "relay": relay_section, "latency": latency_section, "store": store_section, "hosts": hosts_section,
    "memory": memory_section, "journal": journal_section, "resume": resume_section, "sandbox": sandbox_section,
    "framing": framing_section, "dispatch": dispatch_section, "rpc": rpc_section, "isolation": isolation_section,
    "clients": clients_section, "config": config_section, "postgres": postgres_section, "scale": scale_section,
    "checkpoints": checkpoints_section,
}
ONLY = {name for name in os.environ.get("BENCH_ONLY", "").split(",") if name}


async def run_sections(tmp: Path, agents: Path, rows: list[str]) -> list[str]:
    """Each chosen section in turn, its rows into `rows`; the names of those that failed."""
    failed: list[str] = []
    for name, section in SECTIONS.items():
        if not ONLY or name in ONLY:
            try:
                await section(tmp, agents, rows)
            except Exception as err:  # the section's figures are void; the other sections still run
                print(f"bench: section {name} FAILED: {err}", file=sys.stderr, flush=True)
                rows.append(failed_row(name, err))
                failed.append(name)
                for gw in STARTED:  # what it left running would weigh on the next sections' figures
                    gw.stop()
    return failed


async def main() -> None:
    unknown = ONLY - SECTIONS.keys()
    if unknown:
        raise SystemExit(f"BENCH_ONLY: unknown section(s) {sorted(unknown)}; choose from {list(SECTIONS)}")
    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="acp-bench-"))
    WORK.mkdir(exist_ok=True)
    agents = tmp / "agents"
    agents.mkdir()
    flood_profile(agents)
    rows: list[str] = []
    print_machine(RUNS, N_UPDATES)
    try:
        failed = await run_sections(tmp, agents, rows)
    finally:
        for gw in STARTED:
            gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # the gateways' state: a full run leaves hundreds of MB
    print_table(rows, time.perf_counter() - started)
    if failed:
        raise SystemExit(f"bench: section(s) {', '.join(failed)} failed (above)")


if __name__ == "__main__":
    asyncio.run(main())
