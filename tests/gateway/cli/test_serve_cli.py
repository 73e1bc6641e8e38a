"""`acp-gateway serve` as a user meets it: no flags, config files, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from pathlib import Path

import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from tests.conftest import process_alive, wait_until
from tests.gateway.agenthost.test_gateway_restart import host_pids
from tests.gateway_harness import GatewayProcess, agent_log, reference_profile


async def test_no_flags_on_a_fresh_machine(tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ACP_GATEWAY")},
           "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    # Port 0 is the only flag: the default 8765 may be taken on a shared machine.
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.cli", "serve", "--port", "0",
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                env=env)
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode() for _ in range(5)]
        port = int(re.search(r"ws://127\.0\.0\.1:(\d+)/rpc", lines[0]).group(1))  # type: ignore[union-attr]
        assert f"ws://127.0.0.1:{port}/acp" in lines[1]  # where ACP clients connect
        token_url = re.search(r"http://127\.0\.0\.1:\d+/\?token=(\S+)", lines[4])
        assert token_url is not None
        state = tmp_path / "xdg" / "acp-gateway"
        assert (state / "token").read_text().strip() == token_url.group(1)
        assert (state / "token").stat().st_mode & 0o777 == 0o600
        client = await GatewayClient.connect(f"ws://127.0.0.1:{port}/rpc", token_url.group(1))
        # Sessions run under the user's home by default; elsewhere is refused, saying which rule.
        outside = tmp_path / "elsewhere"
        outside.mkdir()
        with pytest.raises(RpcCallError) as info:
            await client.call("task.session.start", {"cwd": str(outside)})
        assert (info.value.code, info.value.data["rule"]) == (-32011, "outside_workspace_roots")
        work = tmp_path / "home" / "project"
        work.mkdir(parents=True)
        view = await client.call("task.session.start", {"cwd": str(work), "wait_ready": True})
        assert view["agent"] == "reference" and view["state"] == "WAITING_FOR_INPUT"
        assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "hi"}) == \
            {"stop_reason": "end_turn"}
        await client.close()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        # By default the agent runs in an agent host, which a SIGTERM leaves running for the next gateway.
        assert host_pids(state)
    finally:  # a failed assertion must not leave the gateway serving (it is nobody's GatewayProcess), nor its hosts
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        for pid in host_pids(tmp_path / "xdg" / "acp-gateway"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # The reference agent kept its sessions in its owner's agent home, under the gateway's state directory.
    from gateway.runtime.homes import owner_dir_name
    home = state / "homes" / owner_dir_name("default")
    assert list((home / ".local" / "state" / "acp-reference-agent").glob("ref-*.json"))


async def test_sigterm_stops_agents_and_sessions_stay_resumable(tmp_path: Path) -> None:
    agents, log = tmp_path / "agents", tmp_path / "agent.log"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref", "--grandchild-pidfile", str(tmp_path / "gc.pid"),
                      log=log)
    gw = GatewayProcess(tmp_path / "state", agents)
    await gw.start()
    client = await gw.client()
    view = await client.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"), "wait_ready": True})
    agent_pid = agent_log(log)[0]["pid"]
    grandchild = int((tmp_path / "gc.pid").read_text())
    await client.close()
    assert await gw.stop() == 0
    for pid in (agent_pid, grandchild):
        await wait_until(lambda p=pid: not process_alive(p), what=f"process {pid} to exit")
    await gw.start()
    client = await gw.client()
    status = await client.call("task.session.status", {"session_id": view["session_id"]})
    assert (status["needs_resume"], status["resume_reason"]) == (True, "agent_not_running")
    await client.close()
    await gw.stop()




@pytest.mark.parametrize(("text", "message"), [
    ("port = 'eighty'\n", "key 'port'"),
    ("colour = 1\n", "key 'colour' is not a configuration key"),
    ("[[auth.tokens]]\ntoken = 'short'\nowner = 'a'\n", "key 'auth.tokens.0.token'"),
    ("port = [\n", "not valid TOML"),
    ("[[auth.tokens]]\ntoken = 'same-token-0123456789'\nowner = 'a'\n"
     "[[auth.tokens]]\ntoken = 'same-token-0123456789'\nowner = 'b'\n", "key 'auth.tokens.1.token': this token is "
     "already the token of owner 'a'"),
])
async def test_bad_config_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
                                                "--state-dir", str(tmp_path / "s"),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    text_err = err.decode()
    assert message in text_err and str(config) in text_err and len(text_err.strip().splitlines()) == 1


async def test_gateway_token_never_reaches_the_agent(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    gw = GatewayProcess(tmp_path / "state", agents, token=None)
    env_token = "env-token-0123456789abcdefgh"
    gw.extra = []
    os.environ["ACP_GATEWAY_TOKEN"] = env_token
    try:
        argv = gw.argv()
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
    finally:
        del os.environ["ACP_GATEWAY_TOKEN"]
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    port = int(re.search(r":(\d+)/rpc", line).group(1))  # type: ignore[union-attr]
    client = await GatewayClient.connect(f"ws://127.0.0.1:{port}/rpc", env_token)
    view = await client.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"), "wait_ready": True})
    assert (await client.call("task.session.status", {"session_id": view["session_id"]}))["is_agent_running"]
    environ = _agent_environ(tmp_path / "agent-state")
    assert environ is not None and not any(k.startswith("ACP_GATEWAY") for k in environ)
    assert env_token not in "".join(environ.values())
    await client.close()
    proc.send_signal(signal.SIGTERM)
    await asyncio.wait_for(proc.wait(), 30)


def _agent_environ(agent_state: Path) -> dict[str, str] | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if b"agents.reference" in cmdline and str(agent_state).encode() in cmdline:
                pairs = (entry / "environ").read_bytes().split(b"\0")
                return dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)
        except OSError:
            continue
    return None
