"""The ways out of the sandbox through the gateway's own launch path, tried as owner B would, in every network mode:
a `gateway` package planted in its workspace, and `LD_PRELOAD`, `PYTHONPATH`, `BASH_ENV` and a fake `unshare` first
on `PATH` asked for a terminal (`terminal/create` env), and an `env_var` sign-in that names `LD_PRELOAD`. Each
payload writes a marker file where only the host can write (outside every directory the sandbox shows): it must stay
absent. Each also leaves a note in the workspace when it runs inside: there it may (ENV-2), and that shows the
variables did reach the program, so the test could fail. Unconfined, the variables that change how programs load
are refused (ENV-3), with an error that says what to do."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway.clients.client import RpcCallError
from tests.gateway_harness import BOB, GatewayProcess, agent_said, reference_profile, running, two_owner_gateway
from tests.support.probes import terminal_said
from tests.support.world import start

NETWORKS = ["none", "host", "outbound"]

PRELOAD_C = r"""
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    int fd = open("%(outside)s", O_WRONLY | O_CREAT, 0600);  /* only the host can: outside the sandbox's world */
    if (fd >= 0) close(fd);
    fd = open("%(inside)s", O_WRONLY | O_CREAT, 0600);  /* its workspace: there, it may run */
    if (fd >= 0) close(fd);
}
"""


def plant(work: Path, outside: Path) -> dict[str, str]:
    """What B writes into its own workspace with its shell (done here directly: the same bytes): a `gateway`
    package, a preloadable library, a `sitecustomize` for PYTHONPATH, a BASH_ENV script and a fake `unshare`.
    Each writes `outside` (and, run inside, a note in the workspace)."""
    touch = f"open({str(outside)!r}, 'w').close()\nopen({str(work / 'ran-inside-python')!r}, 'w').close()\n"
    (work / "gateway").mkdir(exist_ok=True)
    (work / "gateway" / "__init__.py").write_text(touch)
    (work / "gateway" / "runtime").mkdir(exist_ok=True)
    (work / "gateway" / "runtime" / "__init__.py").write_text(touch)
    (work / "gateway" / "runtime" / "outbound.py").write_text(touch)
    (work / "pylib").mkdir(exist_ok=True)
    (work / "pylib" / "sitecustomize.py").write_text(touch)
    script = f"#!/bin/sh\n: > {outside}\n: > {work / 'ran-inside-sh'}\n"
    (work / "bashenv.sh").write_text(script)
    (work / "bin").mkdir(exist_ok=True)
    for tool in ("unshare", "slirp4netns", "prlimit", "bwrap", "setpriv", "python3"):
        (work / "bin" / tool).write_text(script)
        (work / "bin" / tool).chmod(0o755)
    source = work / "planted.c"
    source.write_text(PRELOAD_C % {"outside": outside, "inside": work / "ran-inside-preload"})
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(work / "planted.so"), str(source)], check=True)
    return {"LD_PRELOAD": str(work / "planted.so"), "PYTHONPATH": str(work / "pylib"),
            "BASH_ENV": str(work / "bashenv.sh"), "PATH": f"{work / 'bin'}:/usr/bin:/bin"}


def sandboxed_gateway(tmp_path: Path, network: str, sandbox: str = "bwrap") -> GatewayProcess:
    """Owners alice and bob; `ref`, the reference agent, and `signin`, one that asks for an `env_var` sign-in naming
    LD_PRELOAD; both in `network`."""
    unconfined = "allow_unconfined_agents = true\n" if sandbox == "none" else ""
    gw = two_owner_gateway(tmp_path, config=f'{unconfined}sandbox = "{sandbox}"\n')
    reference_profile(gw.agents_dir, tmp_path / "agent-state", "ref", extra=f'network = "{network}"\n')
    command = [sys.executable, "-m", "agents.reference", "--state-dir", str(tmp_path / "agent-state"),
               "--require-auth", "--auth-env", "LD_PRELOAD"]
    (gw.agents_dir / "signin.toml").write_text(f'id = "signin"\ncommand = {orjson.dumps(command).decode()}\n'
                                               f'network = "{network}"\n')
    return gw


@pytest.fixture(autouse=True)
def tools() -> None:
    assert shutil.which("bwrap") and shutil.which("cc"), "make test installs bubblewrap; cc builds the payload"


@pytest.mark.parametrize("network", NETWORKS)
async def test_nothing_b_plants_runs_outside_the_sandbox(tmp_path: Path, network: str) -> None:
    outside = tmp_path / "escaped"  # tmp_path is not shown to the sandbox: only the host can create this
    gw = sandboxed_gateway(tmp_path, network)
    work = tmp_path / "work"
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await start(bob, work, "ref"))["session_id"]
        planted = plant(work, outside)
        # A terminal with each variable, then all of them at once; the planted `gateway` package is in the
        # workspace all along (a relaunch and every terminal start there).
        # Inside, each also does what it is planted for: a program loads, Python starts, bash starts, a tool is
        # looked up on PATH (the fake one, there).
        commands = {"LD_PRELOAD": "true", "PYTHONPATH": "python3 -c pass", "BASH_ENV": "bash -c true",
                    "PATH": "unshare"}
        for name, value in planted.items():
            said = await terminal_said(gw, BOB, sid, f"--env {name}={value} {commands[name]}; echo ran-{name}")
            assert f"ran-{name}" in said, (name, said)
        everything = " ".join(f"--env {name}={value}" for name, value in planted.items())
        await terminal_said(gw, BOB, sid, f"{everything} echo all")
        await bob.close()
        await gw.stop()  # a relaunch, in the workspace holding the planted package
        await gw.start()
        bob = await gw.client(BOB)
        resumed = await bob.call("task.session.resume", {"session_id": sid})
        assert resumed["is_agent_running"], resumed
        await terminal_said(gw, BOB, sid, "echo after-a-relaunch")
        # The env_var sign-in naming LD_PRELOAD: the value reaches the agent inside its sandbox only.
        signin = (await start(bob, work, "signin"))["session_id"]
        await bob.call("task.session.authenticate", {"session_id": signin, "method_id": "reference-env",
                                                     "values": {"LD_PRELOAD": planted["LD_PRELOAD"]}})
        assert "pong" in await agent_said(gw, BOB, signin, "/sh echo pong")
        await bob.close()
    assert not outside.exists(), "code B planted ran outside the sandbox"
    assert (work / "ran-inside-preload").exists()  # LD_PRELOAD did reach the program, inside (ENV-2)
    assert (work / "ran-inside-sh").exists()  # so did BASH_ENV and PATH
    # and PYTHONPATH (a system Python inside; the gateway's own is not shown to a terminal's `sh`)
    assert (work / "ran-inside-python").exists() or not Path("/usr/bin/python3").exists()


async def test_unconfined_the_loading_variables_are_refused_with_what_to_do(tmp_path: Path) -> None:
    outside = tmp_path / "escaped"
    gw = sandboxed_gateway(tmp_path, "host", sandbox="none")
    work = tmp_path / "work"
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await start(bob, work, "ref"))["session_id"]
        planted = plant(work, outside)
        said = await agent_said(gw, BOB, sid, f"/term --env LD_PRELOAD={planted['LD_PRELOAD']} echo ran")
        assert "LD_PRELOAD changes how programs load" in said and 'sandbox = "bwrap"' in said, said
        allowed = await terminal_said(gw, BOB, sid, "--env GREETING=hello echo $GREETING")
        assert "hello" in allowed
        signin = (await start(bob, work, "signin"))["session_id"]
        with pytest.raises(RpcCallError) as refused:
            await bob.call("task.session.authenticate", {"session_id": signin, "method_id": "reference-env",
                                                         "values": {"LD_PRELOAD": planted["LD_PRELOAD"]}})
        assert refused.value.data["field"] == "values" and "LD_PRELOAD" in refused.value.message
        await bob.close()
    assert not outside.exists()


async def test_asking_an_agent_what_it_supports_runs_nothing_planted_in_the_workspace(tmp_path: Path) -> None:
    """Before a session with additional directories starts, the gateway asks the profile's agent what it supports,
    in a short-lived process outside any session's sandbox. It starts in /: an `agents` package B planted in its
    workspace (the reference agent runs as `python -m agents.reference`) is never imported there."""
    outside = tmp_path / "escaped"
    gw = sandboxed_gateway(tmp_path, "outbound")
    work = tmp_path / "work"
    (work / "agents" / "reference").mkdir(parents=True)
    for module in ("agents/__init__.py", "agents/reference/__init__.py", "agents/reference/__main__.py"):
        (work / module).write_text(f"try:\n    open({str(outside)!r}, 'w').close()\nexcept OSError:\n    pass\n")
    (work / "more").mkdir()
    async with running(gw):
        bob = await gw.client(BOB)
        # Its agent, inside its sandbox, imports the planted package and stops: B's own session, B's doing.
        await bob.call("task.session.start", {"agent": "ref", "cwd": str(work), "wait_ready": True,
                                              "additional_directories": [str(work / "more")]})
        await bob.close()
    assert not outside.exists(), "code B planted ran outside the sandbox"


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
async def test_a_terminal_sign_in_naming_ld_preload_never_loads_it_outside(tmp_path: Path, sandbox: str) -> None:
    """An agent's `terminal` sign-in method carries the env its login program runs with: the agent chose it. Under
    bwrap it reaches the login inside the sandbox only; unconfined it is refused before anything runs."""
    outside = tmp_path / "escaped"
    work = tmp_path / "work"
    gw = sandboxed_gateway(tmp_path, "outbound", sandbox=sandbox)
    command = [sys.executable, "-m", "agents.reference", "--state-dir", str(tmp_path / "agent-state"),
               "--require-auth", "--auth-terminal", "--auth-terminal-always",
               "--auth-terminal-env", f"LD_PRELOAD={work / 'planted.so'}"]
    (gw.agents_dir / "tui.toml").write_text(f'id = "tui"\ncommand = {orjson.dumps(command).decode()}\n'
                                            'network = "outbound"\n')
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await start(bob, work, "tui"))["session_id"]
        plant(work, outside)
        ask = {"session_id": sid, "method_id": "reference-tui"}
        if sandbox == "none":
            with pytest.raises(RpcCallError) as refused:
                await bob.call("task.session.authenticate", ask)
            assert refused.value.data["field"] == "values" and "LD_PRELOAD" in refused.value.message
        else:
            await bob.call("task.session.authenticate", ask)  # the login ran, LD_PRELOAD and all, inside
            assert (work / "ran-inside-preload").exists(), "the variable never reached the login: nothing tested"
        await bob.close()
    assert not outside.exists(), "the login's library ran outside the sandbox"
