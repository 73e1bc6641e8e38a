"""An agent's whole process tree, as /proc shows it: every process that carries the agent's environment marker.

A process group is not enough: a child may `setsid` out of it, and once its parent exits nothing links it to the
agent but what it inherited. An agent launched with a marker (`NAME=<unique value>` in its environment, inherited
by everything it starts) is stopped with everything that still carries it. Only processes this user may signal
and whose environment it may read are seen; a child that clears its environment is outside this net (the sandbox's
PID namespace holds those: see the gateway's confinement docs). Parsing is pure; `carrying` and `kill_carrying`
read /proc and signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessFacts:
    pid: int
    pgid: int
    start: int  # clock ticks since boot
    marker: str | None  # the value of the marker looked for in its environment, if any (None also when unreadable)


def parse_stat(text: str) -> tuple[str, int, int]:
    """(state, process group, start time) from /proc/PID/stat; the command name may hold spaces and ')'."""
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[2]), int(fields[19])


def parse_marker(environ: bytes, name: str) -> str | None:
    """The value of `name` in a /proc/PID/environ, or None."""
    prefix = name.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def process_start(pid: int) -> int | None:
    try:
        return parse_stat((PROC / str(pid) / "stat").read_text())[2]
    except (OSError, ValueError, IndexError):
        return None


def facts(pid: int, marker_name: str) -> ProcessFacts | None:
    """What /proc says of `pid` now; None when it is gone or a zombie (dead, waiting for its parent)."""
    try:
        state, pgid, start = parse_stat((PROC / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None
    if state == "Z":
        return None
    try:
        marker = parse_marker((PROC / str(pid) / "environ").read_bytes(), marker_name)
    except OSError:
        marker = None
    return ProcessFacts(pid, pgid, start, marker)


def processes(marker_name: str) -> Iterator[ProcessFacts]:
    """Every live process but this one."""
    me = os.getpid()
    for entry in PROC.iterdir():
        if entry.name.isdigit() and int(entry.name) != me:
            found = facts(int(entry.name), marker_name)
            if found is not None:
                yield found


def carrying(marker_name: str, value: str) -> list[ProcessFacts]:
    return [p for p in processes(marker_name) if p.marker == value]


def same_process(proc: ProcessFacts, marker_name: str) -> bool:
    """Is `proc` still alive as itself (not a recycled pid)?"""
    now = facts(proc.pid, marker_name)
    return now is not None and now.start == proc.start


async def wait_gone(found: list[ProcessFacts], marker_name: str, timeout: float) -> bool:
    """Until every process of `found` is gone (True), or `timeout`. A process that is not our child signals
    nothing we could wait on: poll, briefly."""
    deadline = time.monotonic() + timeout
    while any(same_process(p, marker_name) for p in found):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def kill_carrying(marker_name: str, value: str, timeout: float = 5.0) -> list[ProcessFacts]:
    """SIGKILL every process that carries `marker_name=value` and wait until they are gone. Returns them."""
    found = await asyncio.to_thread(carrying, marker_name, value)
    for proc in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
    await wait_gone(found, marker_name, timeout)
    return found
