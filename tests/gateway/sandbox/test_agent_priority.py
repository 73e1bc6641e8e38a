"""Agents and their terminals run below the gateway's CPU priority (`agent_niceness`, 10 by default), confined or
not: a busy agent or a terminal running `yes` leaves the gateway the CPU it needs to serve every other owner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.gateway_harness import BOB, agent_said, running, two_owner_gateway
from tests.support.probes import terminal_said
from tests.support.world import start

NICENESS = "cut -d' ' -f19 /proc/self/stat"  # the 19th field of a process's stat: its nice value


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
async def test_an_agent_and_its_terminals_run_below_the_gateway(tmp_path: Path, sandbox: str) -> None:
    unconfined = "allow_unconfined_agents = true\n" if sandbox == "none" else ""
    gw = two_owner_gateway(tmp_path, config=f'{unconfined}sandbox = "{sandbox}"\n')
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await start(bob, tmp_path / "work"))["session_id"]
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert (await agent_said(gw, BOB, sid, f"/sh {NICENESS}")).split()[0] == str(mine + 10)
        assert (await terminal_said(gw, BOB, sid, NICENESS)).split()[0] == str(mine + 10)
        await bob.close()
