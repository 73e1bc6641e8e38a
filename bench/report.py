"""The bench's table: each figure's median, min and max beside its baseline's, their ratio, and the verdict."""

from __future__ import annotations

import os
import platform
import resource
import statistics


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p99 in µs of latencies given in ms."""
    return statistics.median(samples) * 1000, statistics.quantiles(samples, n=100)[98] * 1000


def stats(values: list[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


def row(name: str, ours: list[float], base: list[float], unit: str, target: str, ok: bool, base_name: str,
        why: str = "") -> str:
    """A table row; `why`, said when the target is not met, is the measured reason."""
    o, b = stats(ours), stats(base)
    ratio = o[1] / b[1] if b[1] else float("nan")
    verdict = "met" if ok else f"NOT met{': ' + why if why else ''}"
    return (f"| {name} | {o[1]:,.1f} {unit} (min {o[0]:,.1f}, max {o[2]:,.1f}) | {base_name}: {b[1]:,.1f} {unit} "
            f"(min {b[0]:,.1f}, max {b[2]:,.1f}) | {ratio:.2f}× | {target} | {verdict} |")


def failed_row(section: str, err: Exception) -> str:
    """The row of a section that raised: its figures are void, and the error's last line says why."""
    said = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
    return f"| {section} section | FAILED: {said} | – | – | – | FAILED |"


def print_machine(runs: int, updates: int) -> None:
    """The first line: what the figures were measured on, and how many runs and updates each took."""
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}; runs per figure: {runs}; flood: {updates:,} updates")


def print_table(rows: list[str], took: float) -> None:
    """The table (markdown), then how long the bench took and the driver's own peak memory."""
    print()
    print("| figure | this gateway (median of runs) | baseline, same run | ratio | target | |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    print(f"\nbench took {took:.0f} s; max RSS of the bench driver "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB")
