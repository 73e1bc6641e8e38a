"""A terminal sign-in still running when the gateway stops (SIGTERM) is ended with it: its login program runs in a
process group of its own, which nothing but the gateway's shutdown would end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
from pathlib import Path

import orjson

from tests.gateway_harness import GatewayProcess, running, subscribed


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting to be reaped has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def hanging_login_profile(agents: Path, agent_state: Path, pidfile: Path) -> None:
    """The reference agent offering a terminal sign-in, whose login (`… --login`) waits on a `sleep` that never
    ends."""
    agent = [sys.executable, "-m", "agents.reference", "--state-dir", str(agent_state), "--require-auth",
             "--auth-terminal"]
    # The sleep is the login's child, as a real login's helpers are: the parent-death signal the gateway gives
    # what it starts reaches the login program, not its children.
    script = ('for a in "$@"; do if [ "$a" = --login ]; then sleep 600 & '
              f'echo $! > {shlex.quote(str(pidfile))}; echo "open the browser to sign in"; wait; fi; done; '
              'exec "$@"')
    command = ["/bin/sh", "-c", script, "login", *agent]
    (agents / "hanging.toml").write_text(f'id = "hanging"\ncommand = {orjson.dumps(command).decode()}\n')


async def test_a_running_login_ends_with_the_gateway(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    pidfile = tmp_path / "login.pid"
    hanging_login_profile(agents, tmp_path / "agent-state", pidfile)
    gw = GatewayProcess(tmp_path / "state", agents)
    async with running(gw):
        client, log = await subscribed(gw)
        view = await client.call("task.session.start", {"agent": "hanging", "cwd": str(tmp_path / "work"),
                                                        "wait_ready": True})
        signing = asyncio.ensure_future(client.call("task.session.authenticate", {
            "session_id": view["session_id"], "method_id": "reference-tui"}))
        await log.wait(lambda e: e["type"] == "terminal_output" and "open the browser" in e["data"]["text"])
        pid = int(pidfile.read_text())
        assert alive(pid)
        await gw.stop()
        with contextlib.suppress(ConnectionError):
            await signing
        assert not alive(pid), "the login program outlived the gateway"
        await client.close()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 9)  # should the test fail: not left behind
