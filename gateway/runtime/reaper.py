"""No orphan agents: each agent carries its execution's marker, and a starting gateway ends what a crashed one
left running — never a process it cannot prove is one of those agents.

An agent's environment holds `ACP_AGENT_EXECUTION=<execution id>` (random, one per launch), which its
children inherit; its executor row records its pid (= its process group: agents lead their own), its start
time in clock ticks since boot, and the boot id. A process is a leftover of an execution when it carries
that marker, or when it is that very pid with that very start time in that same boot (a recycled pid has
another start time). `is_leftover` is the pure rule; `reap` reads /proc and signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from acp import proctree
from acp.proctree import ProcessFacts, parse_stat, process_start

__all__ = ["MARKER", "Execution", "ProcessFacts", "boot_id", "is_group_of", "is_leftover", "leftovers",
           "parse_marker", "parse_stat", "process_start", "processes", "reap"]

MARKER = "ACP_AGENT_EXECUTION"


@dataclass(frozen=True)
class Execution:
    """What an executor row recorded of an agent it started."""

    execution_id: str
    pid: int | None
    start: int | None
    boot_id: str | None


def is_leftover(proc: ProcessFacts, execution: Execution, boot_id: str | None) -> bool:
    if proc.marker is not None:
        return proc.marker == execution.execution_id
    return (execution.pid is not None and proc.pid == execution.pid and proc.start == execution.start
            and execution.boot_id is not None and execution.boot_id == boot_id)


def is_group_of(proc: ProcessFacts, execution: Execution, boot_id: str | None) -> bool:
    """The agent itself, proven by pid and start time: its whole process group may be signalled."""
    return (execution.pid is not None and proc.pid == execution.pid == proc.pgid and proc.start == execution.start
            and execution.boot_id is not None and execution.boot_id == boot_id)


def parse_marker(environ: bytes) -> str | None:
    return proctree.parse_marker(environ, MARKER)


def boot_id() -> str | None:
    try:
        return (proctree.PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def processes() -> Iterator[ProcessFacts]:
    return proctree.processes(MARKER)


def leftovers(executions: Iterable[Execution]) -> list[tuple[ProcessFacts, Execution]]:
    """Every running process that belongs to one of `executions`."""
    wanted = list(executions)
    if not wanted:
        return []
    boot = boot_id()
    found = []
    for proc in processes():
        for execution in wanted:
            if is_leftover(proc, execution, boot):
                found.append((proc, execution))
                break
    return found


async def reap(executions: Iterable[Execution], timeout: float = 5.0) -> list[ProcessFacts]:
    """SIGKILL every leftover process of `executions` (and the group of a proven agent), then wait until they
    are gone. Returns what was killed."""
    boot = boot_id()
    found = leftovers(executions)
    for proc, execution in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if is_group_of(proc, execution, boot):
                os.killpg(proc.pgid, signal.SIGKILL)
            os.kill(proc.pid, signal.SIGKILL)
    await proctree.wait_gone([p for p, _ in found], MARKER, timeout)
    return [p for p, _ in found]
