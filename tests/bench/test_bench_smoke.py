"""`make bench` at CI size: bench/run.py, small floods, one run of each figure, must finish and print its table.

A bench that hangs or errors (a subscriber that stops short of a flood, a baseline that breaks) fails here, not
in the next `make bench`. The figures' values and targets are not checked: on a shared machine under the parallel
suite they are noise; that the bench runs, and that every subscriber got every update, is what is checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import REPO

ROOT = REPO
# The sections cheap enough at this size (~20 s together on the 2-core machine); `scale` (~25 s of session starts),
# `store`, `resume`, and `sandbox` and `postgres` (bubblewrap, a PostgreSQL server) are left to `make bench`.
SECTIONS = "relay,latency,journal,dispatch,framing,config,memory,rpc,clients"
UPDATES = 20_000


def test_bench_runs_at_ci_size(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" and not k.startswith("ACP_")}
    # TMPDIR: the bench's state directories, workspace and durable relay's database go under tmp_path.
    env.update(BENCH_ONLY=SECTIONS, BENCH_RUNS="1", BENCH_UPDATES=str(UPDATES), TMPDIR=str(tmp_path))
    t0 = time.monotonic()
    try:
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "run.py")], capture_output=True, text=True,
                             env=env, cwd=ROOT, timeout=240)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"the bench hung (killed after {err.timeout:.0f} s); it printed:\n"
                             f"{err.stdout!r}\n{err.stderr!r}") from err
    took = time.monotonic() - t0
    said = (f"bench/run.py exited {out.returncode} after {took:.0f} s\nstdout:\n{out.stdout}\n"
            f"stderr:\n{out.stderr[-4000:]}")
    assert out.returncode == 0, said
    assert "FAILED" not in out.stdout, said
    assert "| figure | this gateway (median of runs) | baseline, same run | ratio | target | |" in out.stdout, said
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]

    def row(figure: str, baseline: str) -> str:
        found = [r for r in rows if r.startswith(f"| {figure}") and f"| {baseline}" in r]
        assert found, f"no row for {figure!r} beside {baseline!r}\n{said}"
        return found[0]

    got = f"(the subscriber got {UPDATES:,} of {UPDATES:,} updates in each run)"
    row(f"relay throughput, 1 subscriber {got}", "official Python SDK client: ")
    row(f"relay throughput, 1 subscriber {got}", "bare asyncio→websockets relay: ")
    row(f"relay throughput, 1 subscriber {got}", "durable bare relay (SQLite WAL commit per batch read): ")
    row(f"relay, 1 subscriber with subscribe {{batch: true}} {got}", "bare asyncio→websockets relay: ")
    row(f"relay, 1 subscriber with subscribe {{batch: true}} {got}", "durable bare relay, a JSON array per batch: ")
    row(f"relay, each of 10 subscribers {{batch: true}} (each subscriber got {UPDATES // 4:,} of {UPDATES // 4:,} "
        "updates in each run)", "1 subscriber {batch: true}: ")
    row(f"relay throughput, 1 ACP client on /acp {got}", "1 /rpc subscriber")
    row("CPU per relayed update, gateway process", "durable bare relay process: ")
    for figure in ("relay latency p50", "journal throughput", "JSON-RPC dispatch", "splitting a 64 MiB line",
                   "set_config_option round trip", "gateway memory per live session",
                   "task.session.status of a live session, 8 clients"):
        row(figure, "")
    # Every figure has a number: nan, or a figure of 0, is a broken measurement, not a slow one.
    for r in rows:
        assert not re.search(r"\bnan\b|^\| [^|]+ \| 0\.0 ", r), f"a figure without a measurement: {r}\n{said}"
