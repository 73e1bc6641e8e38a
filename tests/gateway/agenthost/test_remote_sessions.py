"""Sessions whose agent runs on a remote host (issue 47, docs/remote-hosts.md), against a real sshd on loopback
logging in another Unix user (tests/support/sshd.py) and an agent of the standard library alone sent there: a prompt,
a file written there as that user, `kill -9` of the ssh link mid-turn — the turn goes on and ends with every update,
once and in order — the gateway killed and started again with the turn still under way, and the gateway's machine
holding none of it (no spool, no agent home: those are the remote user's)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.agenthost.ssh import run_remote
from gateway.runtime.remote_hosts import clear_command
from tests.gateway_harness import EventLog, GatewayClient, GatewayProcess, subscribed
from tests.support.sshd import Sshd, sshd

AGENT = Path(__file__).parents[2] / "support" / "plain_acp_agent.py"
DUMMY_KEY = "sk-remote-dummy-7f3a9c51e2"  # the profile's API key: reaches the remote agent, shown nowhere here


class Remote:
    def __init__(self, server: Sshd, tmp_path: Path, work: str, sandbox: str = "none") -> None:
        self.server, self.tmp_path, self.work = server, tmp_path, work
        agents = tmp_path / "agents"
        agents.mkdir()
        command = ["python3", f"{work}/.agent/plain_acp_agent.py"]
        (agents / "plain.toml").write_text(f'id = "plain"\ncommand = {orjson.dumps(command).decode()}\n'
                                           "native_session_resume = false\n"
                                           f'[env]\nREMOTE_API_KEY = "{DUMMY_KEY}"\n')
        config = tmp_path / "gateway.toml"
        options = server.options
        config.write_text(
            f'[remote_hosts.lab]\nurl = "ssh://{server.target.user}@127.0.0.1:{server.target.port}"\n'
            f'identity_file = "{options.identity_file}"\nknown_hosts = "{options.known_hosts}"\n'
            f'python = "/usr/bin/python3"\nworkspace_roots = ["{work}"]\nsandbox = "{sandbox}"\n')
        self.gateway = GatewayProcess(tmp_path / "state", agents, config=config)

    def session_ids(self) -> list[str]:
        """Every session this test's gateway made (read from its store)."""
        db = self.gateway.state_dir / "gateway.db"
        if not db.exists():
            return []
        with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            return [str(r[0]) for r in conn.execute("SELECT id FROM sessions")]

    async def run(self, command: str) -> str:
        return (await run_remote(self.server.target, self.server.options, command)).decode()

    def forwards(self, session_id: str) -> list[int]:
        """The gateway's ssh forwards to the socket of this session's host (its id is in the remote path)."""
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if b"ssh" in cmdline and b"-L" in cmdline and f".acp-gateway/hosts/{session_id}/".encode() in cmdline:
                    found.append(int(entry.name))
        return found


@pytest.fixture(params=["none"])
async def remote(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Remote]:
    async with sshd(tmp_path / "sshd") as server:
        work = f"{server.home}/work-{secrets.token_hex(6)}"
        await run_remote(server.target, server.options, f"mkdir -p {work}/.agent && cat > "
                         f"{work}/.agent/plain_acp_agent.py", AGENT.read_bytes())
        world = Remote(server, tmp_path, work, request.param)
        try:
            yield world
        finally:
            await world.gateway.stop()
            # its sessions' hosts linger for their gateway there: ended, theirs only (other tests share the user)
            ended = [clear_command(sid) for sid in world.session_ids()]
            await world.run("; ".join([*ended, f"pkill -KILL -f '{work}/.agent/plain_acp_agen[t]'", f"rm -rf {work}",
                                       "true"]))


def chunks(events: list[dict[str, Any]], sid: str) -> list[str]:
    return [e["data"]["update"]["content"]["text"] for e in events
            if e["type"] == "session_update" and e["session_id"] == sid
            and e["data"]["update"].get("sessionUpdate") == "agent_message_chunk"
            and e["data"]["update"]["content"]["text"].startswith("chunk ")]


async def gated_turn(client: GatewayClient, log: EventLog, sid: str, gate: str, count: int) -> asyncio.Future[Any]:
    """A turn of `count` chunks under way, its agent waiting at `gate` after the tenth: the prompt's answer to come."""
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"/gate {gate} {count}"}))
    begun = await log.wait(lambda e: e["type"] == "turn_started" and f"/gate {gate} " in str(e["data"]))
    await log.wait(lambda e: e["type"] == "session_update" and (e["id"] or 0) > begun["id"]
                   and e["data"]["update"].get("content", {}).get("text") == "chunk 9 ")
    return prompt


async def start(client: GatewayClient, remote: Remote) -> str:
    view = await client.call("task.session.start", {"agent": "plain", "host": "lab", "cwd": remote.work,
                                                    "wait_ready": True})
    assert view["host"] == "lab" and view["state"] == "WAITING_FOR_INPUT", view.get("error_message")
    return str(view["session_id"])


async def test_a_remote_session_works_there_and_a_killed_link_loses_no_update(remote: Remote) -> None:
    await remote.gateway.start()
    client, log = await subscribed(remote.gateway)
    sid = await start(client, remote)
    said = await client.call("task.session.prompt", {"session_id": sid, "prompt": "/write hello.txt from afar"})
    assert said["stop_reason"] == "end_turn"
    uid = int(await remote.run("id -u"))
    assert uid != os.geteuid()
    assert await remote.run(f"stat -c %u {remote.work}/hello.txt") == f"{uid}\n"  # written there, as that user
    assert await remote.run(f"cat {remote.work}/hello.txt") == "from afar"
    # The profile's key reaches the agent there; what the agent says of it is shown as [secret]
    await client.call("task.session.prompt", {"session_id": sid, "prompt": "/env REMOTE_API_KEY"})
    told = await log.wait(lambda e: e["type"] == "session_update" and "env REMOTE_API_KEY=" in str(e["data"]))
    assert told["data"]["update"]["content"]["text"] == "env REMOTE_API_KEY=[secret]"
    # The file methods are served where the files are (FS-1), by the same rules: a file there is read...
    await client.call("task.session.prompt", {"session_id": sid, "prompt": "/fs hello.txt"})
    fs_said = await log.wait(lambda e: e["type"] == "session_update" and "fs said for hello.txt:" in str(e["data"]))
    assert '"content": "from afar"' in fs_said["data"]["update"]["content"]["text"]
    # ...but nothing outside its directory, nor through a link out of it, nor the hosts' own files there
    await remote.run(f"ln -s {remote.server.home}/.acp-gateway {remote.work}/state-link")
    for path in ("../.ssh/authorized_keys", "state-link/hosts/x", "/etc/passwd"):
        await client.call("task.session.prompt", {"session_id": sid, "prompt": f"/fs {path}"})
        refused = await log.wait(lambda e, p=path: e["type"] == "session_update"
                                 and f"fs said for {p}:" in str(e["data"]))
        assert '"code": -32602' in refused["data"]["update"]["content"]["text"], refused

    gate = f"{remote.work}/gate"
    prompt = await gated_turn(client, log, sid, gate, 40)
    [forward] = remote.forwards(sid)
    os.kill(forward, signal.SIGKILL)  # the link drops mid-turn
    await remote.run(f"touch {gate}")  # the rest of the turn happens while the link is down, or as it comes back
    assert (await asyncio.wait_for(prompt, 60))["stop_reason"] == "end_turn"
    last = await log.wait(lambda e: e["type"] == "session_update" and e["session_id"] == sid
                          and e["data"]["update"].get("content", {}).get("text") == "chunk 39 ", timeout=30)
    await log.wait(lambda e: e["type"] == "turn_ended" and (e["id"] or 0) > last["id"], timeout=30)
    events = [e for e in log.events if e["session_id"] == sid]
    assert chunks(events, sid) == [f"chunk {i} " for i in range(40)]  # each once, in order, no gap
    assert remote.forwards(sid) and forward not in remote.forwards(sid)  # a new link
    history = await client.call("task.session.history", {"session_id": sid})
    answer = [e for e in history["entries"] if e["kind"] == "agent_message"]
    assert answer[-1]["content"] == "".join(f"chunk {i} " for i in range(40))

    # The gateway killed mid-turn: the remote agent goes on, the next gateway links again and gets the rest.
    gate2 = f"{remote.work}/gate2"
    prompt = await gated_turn(client, log, sid, gate2, 30)
    await remote.gateway.kill9()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    await remote.run(f"touch {gate2}")
    await remote.gateway.start()
    client, log = await subscribed(remote.gateway, 0)
    begun = await log.wait(lambda e: e["type"] == "turn_started" and gate2 in str(e["data"]))
    last = await log.wait(lambda e: e["type"] == "session_update" and (e["id"] or 0) > begun["id"]
                          and e["data"]["update"].get("content", {}).get("text") == "chunk 29 ", timeout=60)
    await log.wait(lambda e: e["type"] == "turn_ended" and (e["id"] or 0) > last["id"], timeout=30)
    second = chunks([e for e in log.events if (e["id"] or 0) > begun["id"]], sid)
    assert second == [f"chunk {i} " for i in range(30)]
    status = await client.call("task.session.status", {"session_id": sid})
    assert status["is_agent_running"] is True

    # The key is nowhere on the gateway's side: its log, the events, the views, its state directory's files.
    assert DUMMY_KEY not in "".join(remote.gateway.stderr_lines)
    assert DUMMY_KEY not in str(log.events) + str(await client.call("task.session.get", {"session_id": sid}))
    assert not [p for p in remote.gateway.state_dir.rglob("*") if p.is_file() and DUMMY_KEY.encode() in p.read_bytes()]
    # What the session holds is the remote user's: nothing of it on the gateway's machine but the forward's socket.
    kept = [p for p in (remote.gateway.state_dir / "hosts").rglob("*") if p.is_file()]
    assert kept == [], kept
    assert not list(remote.gateway.state_dir.rglob("spool*"))
    assert "spool" in await remote.run("ls $HOME/.acp-gateway/hosts/*/*/")
    await client.call("task.session.delete", {"session_id": sid})
    # and nothing of it is left there: no host, no agent, no directory
    assert await remote.run(f"ls -d $HOME/.acp-gateway/hosts/{sid} 2>/dev/null; pgrep -f '{remote.work}/[.]agent'; "
                            "true") == ""
    await client.close()


async def test_a_remote_host_is_only_one_the_operator_configured(remote: Remote) -> None:
    await remote.gateway.start()
    client = await remote.gateway.client()
    for params in ({"host": "ssh://root@127.0.0.1", "cwd": remote.work}, {"host": "elsewhere", "cwd": remote.work}):
        with pytest.raises(Exception) as refused:
            await client.call("task.session.start", {"agent": "plain", **params})
        assert "not one of this gateway's remote hosts" in str(refused.value) and "lab" in str(refused.value)
    with pytest.raises(Exception) as refused:  # outside the host's workspace roots, as given or as resolved there
        await client.call("task.session.start", {"agent": "plain", "host": "lab", "cwd": "/etc"})
    assert "outside remote host lab's workspace roots" in str(refused.value)
    with pytest.raises(Exception) as refused:
        await client.call("task.session.start", {"agent": "plain", "host": "lab", "cwd": f"{remote.work}/../x"})
    assert "normal path" in str(refused.value)
    await remote.run(f"ln -s /etc {remote.work}/out")
    view = await client.call("task.session.start", {"agent": "plain", "host": "lab", "cwd": f"{remote.work}/out",
                                                    "wait_ready": True})
    assert view["state"] == "FAILED" and "resolves to /etc" in str(view), view
    view = await client.call("task.session.start", {"agent": "plain", "host": "lab", "cwd": f"{remote.work}/gone",
                                                    "wait_ready": True})
    assert view["state"] == "FAILED" and "does not exist on remote host lab" in str(view), view
    await client.close()


@pytest.mark.parametrize("remote", ["bwrap"], indirect=True)
async def test_a_sandboxed_remote_agent_sees_its_workspace_and_nothing_of_other_sessions(remote: Remote) -> None:
    await remote.gateway.start()
    client, log = await subscribed(remote.gateway)
    sid = await start(client, remote)
    other = await start(client, remote)  # another session's host: its spool lies in the remote user's home
    said = await client.call("task.session.prompt", {"session_id": sid, "prompt": "/write inside.txt yes"})
    assert said["stop_reason"] == "end_turn"
    assert await remote.run(f"cat {remote.work}/inside.txt") == "yes"
    home = remote.server.home
    for directory, expected in ((f"{home}/.acp-gateway/hosts", "ls {d}: error"),
                                (f"{home}/.ssh", "ls {d}: error"), (remote.work, "inside.txt")):
        await client.call("task.session.prompt", {"session_id": sid, "prompt": f"/ls {directory}"})
        seen = await log.wait(lambda e, d=directory: e["type"] == "session_update"
                              and f"ls {d}:" in str(e["data"]))
        assert expected.format(d=directory) in seen["data"]["update"]["content"]["text"], seen
    assert "spool" in await remote.run(f"ls {home}/.acp-gateway/hosts/*/*/")  # there, but not shown to it
    for session in (sid, other):
        await client.call("task.session.delete", {"session_id": session})
    await client.close()


async def test_doctor_reaches_each_remote_host_and_says_what_it_lacks(remote: Remote) -> None:
    from gateway.cli.doctor import report
    from gateway.config import load_config

    path = remote.tmp_path / "gateway.toml"
    text = path.read_text()
    path.write_text(text + '[remote_hosts.down]\nurl = "ssh://acp-remote@127.0.0.1:1"\nworkspace_roots = ["/w"]\n'
                    f'known_hosts = "{remote.server.options.known_hosts}"\n')
    said: list[str] = []
    config = load_config(path, {"state_dir": str(remote.tmp_path / "doctor-state"),
                                "agents_dir": [str(remote.tmp_path / "agents")]})
    await asyncio.to_thread(report, config, said.append)
    lab = next(line for line in said if line.startswith("remote host lab"))
    assert "reached" in lab and "python 3." in lab and "NOT" not in lab, lab
    down = next(line for line in said if line.startswith("remote host down"))
    assert "NOT REACHED" in down and "cannot start" in down, down
    assert said[-1] == "serve would start"  # a host that is down today is no reason not to serve
