"""No orphan agents: each agent carries its execution's marker, and a starting gateway ends what a crashed one
left running — never a process it cannot prove is one of those agents.

An agent's environment holds `ACP_AGENT_EXECUTION=<execution id>` (random, one per launch), which its
children inherit; its executor row records its pid (= its process group: agents lead their own), its start
time in clock ticks since boot, and the boot id. A process is a leftover of an execution when it carries
that marker, or when it is that very pid with that very start time in that same boot (a recycled pid has
another start time). `is_leftover` is the pure rule; `reap` reads /proc and signals.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MARKER = "ACP_AGENT_EXECUTION"
_MARKER_BYTES = MARKER.encode() + b"="
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessFacts:
    pid: int
    pgid: int
    start: int  # clock ticks since boot
    marker: str | None  # the execution id in its environment, if any (None also when unreadable)


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


def parse_stat(text: str) -> tuple[str, int, int]:
    """(state, process group, start time) from /proc/PID/stat; the command name may hold spaces and ')'."""
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[2]), int(fields[19])


def parse_marker(environ: bytes) -> str | None:
    for entry in environ.split(b"\0"):
        if entry.startswith(_MARKER_BYTES):
            return entry[len(_MARKER_BYTES):].decode(errors="replace")
    return None


def boot_id() -> str | None:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    try:
        return parse_stat((PROC / str(pid) / "stat").read_text())[2]
    except (OSError, ValueError, IndexError):
        return None


def _facts(pid: int) -> ProcessFacts | None:
    try:
        state, pgid, start = parse_stat((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None
    if state == "Z":
        return None  # already dead, waiting for its parent to reap it
    try:
        marker = parse_marker((PROC / str(pid) / "environ").read_bytes())
    except OSError:
        marker = None
    return ProcessFacts(pid, pgid, start, marker)


def processes() -> Iterator[ProcessFacts]:
    me = os.getpid()
    for entry in PROC.iterdir():
        if entry.name.isdigit() and int(entry.name) != me:
            facts = _facts(int(entry.name))
            if facts is not None:
                yield facts


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
    deadline = time.monotonic() + timeout
    # A process that is not our child signals nothing we could wait on: poll, briefly.
    while any(_same_process(p) for p, _ in found) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    return [p for p, _ in found]


def _same_process(proc: ProcessFacts) -> bool:
    now = _facts(proc.pid)
    return now is not None and now.start == proc.start
