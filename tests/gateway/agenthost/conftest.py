"""The agent-host tests' shared fixture: a running gateway whose agents run in hosts (`host_linger = 60`)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.gateway.agenthost.test_gateway_restart import World, host_pids
from tests.gateway_harness import running


@pytest.fixture
async def hosted(tmp_path: Path) -> AsyncIterator[World]:
    w = World(tmp_path, 60)
    async with running(w.gateway):
        yield w
    for pid in host_pids(w.gateway.state_dir):  # a test that failed half-way leaves no host behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
