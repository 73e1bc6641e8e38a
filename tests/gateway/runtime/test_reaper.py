"""gateway.runtime.reaper: which processes are a crashed gateway's agents (pure rules), and reaping real ones."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.runtime import reaper
from gateway.runtime.reaper import Execution, ProcessFacts, is_group_of, is_leftover, parse_marker, parse_stat
from tests.conftest import process_alive

BOOT = "boot-1"
RECORD = Execution("x-abc", pid=100, start=5000, boot_id=BOOT)

LEFTOVER = [
    # process, boot now -> a leftover of RECORD?
    (ProcessFacts(100, 100, 5000, "x-abc"), BOOT, True),  # the agent itself, marked
    (ProcessFacts(230, 100, 5100, "x-abc"), BOOT, True),  # its child, same group
    (ProcessFacts(400, 400, 5200, "x-abc"), BOOT, True),  # a child that left the group (setsid)
    (ProcessFacts(100, 100, 5000, None), BOOT, True),  # environ unreadable: pid and start time prove it
    (ProcessFacts(100, 100, 9000, None), BOOT, False),  # the pid was recycled: another start time
    (ProcessFacts(100, 100, 9000, "x-other"), BOOT, False),  # recycled by another gateway's agent
    (ProcessFacts(100, 100, 5000, None), "boot-2", False),  # another boot: every pid is new
    (ProcessFacts(230, 100, 5100, None), BOOT, False),  # same group, unproven: left alone
    (ProcessFacts(555, 555, 5000, "x-abcd"), BOOT, False),  # a marker is matched whole
]


@pytest.mark.parametrize(("proc", "boot", "expected"), LEFTOVER)
def test_is_leftover(proc: ProcessFacts, boot: str, expected: bool) -> None:
    assert is_leftover(proc, RECORD, boot) is expected


def test_only_the_proven_agent_has_its_group_signalled() -> None:
    assert is_group_of(ProcessFacts(100, 100, 5000, "x-abc"), RECORD, BOOT)
    assert not is_group_of(ProcessFacts(230, 100, 5100, "x-abc"), RECORD, BOOT)
    assert not is_group_of(ProcessFacts(100, 100, 9000, "x-abc"), RECORD, BOOT)
    assert not is_group_of(ProcessFacts(100, 100, 5000, "x-abc"), Execution("x-abc", None, None, None), BOOT)


STAT = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 123 456"


def test_parse_stat_and_marker() -> None:
    assert parse_stat(STAT) == ("S", 4242, 987654)
    assert parse_marker(b"A=1\0ACP_AGENT_EXECUTION=x-abc\0B=2\0") == "x-abc"
    assert parse_marker(b"A=1\0NOT_ACP_AGENT_EXECUTION=x\0") is None


async def test_reap_kills_marked_processes_and_spares_others() -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    env = {**os.environ, reaper.MARKER: "x-test-reap"}
    marked = subprocess.Popen(sleeper, env=env, start_new_session=True)
    other = subprocess.Popen(sleeper, start_new_session=True)
    try:
        killed = await reaper.reap([Execution("x-test-reap", None, None, None)])
        marked.wait(timeout=10)
        assert [p.pid for p in killed] == [marked.pid]
        assert process_alive(other.pid)
    finally:
        for proc in (marked, other):
            proc.kill()
            proc.wait()
