"""Agents under bubblewrap (`sandbox = "bwrap"`): an owner's agent, through its own shell, sees its workspace, its
home and the system — not the gateway's state, configuration or store, not another owner's workspace or home, not
the gateway's environment — and dies with the gateway. The same attempts under `none` succeed (so these tests can
fail). Also: the command line itself, by table; which limit an agent hit; serve's refusal of unconfined owners."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from gateway.runtime.sandbox import Limits, SandboxPlan, bwrap_argv, limit_hit, owner_uid
from tests.conftest import wait_until
from tests.gateway_harness import ALICE, BOB, agent_said, processes_naming, running, two_owner_gateway
from tests.support.probes import terminal_said
from tests.support.world import Layout, Spec, World, WorldFactory, start

PG_SECRET = "dummy-pg-password-for-the-sandbox-4711"


def plan(**change: object) -> SandboxPlan:
    fields: dict[str, object] = {
        "command": ["/usr/bin/agent", "--acp"], "cwd": "/work/alice/p", "writable": ["/work/alice/p", "/data/x"],
        "home": "/state/homes/alice", "readable": ["/opt/node", "/srv/venv"], "masked_dirs": ["/state"],
        "masked_files": ["/etc/acp-gateway/gateway.toml", "/srv/venv/gw.db"],
        "system": [("/usr", None), ("/etc", None), ("/opt", None), ("/bin", "usr/bin")], "uid": 12345}
    fields.update(change)
    return SandboxPlan(**fields)  # type: ignore[arg-type]


def pairs(argv: list[str], flag: str, width: int = 2) -> list[tuple[str, ...]]:
    return [tuple(argv[i + 1:i + 1 + width]) for i, a in enumerate(argv) if a == flag]


def test_the_command_line_shows_only_what_it_should() -> None:
    argv = bwrap_argv(plan())
    assert argv[:4] == ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    assert argv[argv.index("--"):] == ["--", "/usr/bin/agent", "--acp"]
    assert ("--uid", "12345") == tuple(argv[argv.index("--uid"):argv.index("--uid") + 2])
    assert "--share-net" in argv
    assert pairs(argv, "--ro-bind") == [
        ("/usr", "/usr"), ("/etc", "/etc"), ("/opt", "/opt"), ("/srv/venv", "/srv/venv"),
        ("/dev/null", "/etc/acp-gateway/gateway.toml"), ("/dev/null", "/srv/venv/gw.db")]
    assert ("usr/bin", "/bin") in pairs(argv, "--symlink")  # a merged /usr, as on the host
    assert pairs(argv, "--bind") == [("/work/alice/p", "/work/alice/p"), ("/data/x", "/data/x"),
                                     ("/state/homes/alice", "/state/homes/alice")]
    # the state directory is not under a bound directory: absent anyway, so not masked; /opt/node is within /opt
    assert ("/state",) not in pairs(argv, "--tmpfs", 1) and ("/opt/node", "/opt/node") not in pairs(argv, "--ro-bind")
    inside = bwrap_argv(plan(masked_dirs=["/etc/acp-gateway"]))
    assert ("/etc/acp-gateway",) in pairs(inside, "--tmpfs", 1)
    # masks come after the read-only binds they hide in, and before the writable binds (the home is in the state)
    assert inside.index("/etc/acp-gateway") < inside.index("--bind")
    assert "--share-net" not in bwrap_argv(plan(network="none"))
    # its private /tmp comes before what is bound into it: programs and workspaces may live under /tmp
    in_tmp = bwrap_argv(plan(readable=["/tmp/checkout/.venv"], writable=["/tmp/work"], cwd="/tmp/work"))
    assert in_tmp.index("/tmp") < in_tmp.index("/tmp/checkout/.venv") < in_tmp.index("/tmp/work")


# (how it ended, what it said, its limits) -> the limit named
LIMITS: list[tuple[int | None, list[str], Limits, str | None]] = [
    (-signal.SIGXFSZ, [], Limits(file_size=1), "file_size"),
    (1, ["OSError: [Errno 24] Too many open files"], Limits(open_files=64), "open_files"),
    (1, ["OSError: [Errno 24] Too many open files"], Limits(), None),  # not a limit it was given
    (1, ["MemoryError"], Limits(address_space=1 << 30), "address_space"),
    (134, ["FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory"],
     Limits(address_space=1 << 30), "address_space"),
    (1, ["BlockingIOError: [Errno 11] Resource temporarily unavailable"], Limits(processes=32), "processes"),
    (0, [], Limits(processes=32), None),
    (-signal.SIGKILL, [], Limits(processes=32), None),
]


@pytest.mark.parametrize(("returncode", "stderr", "limits", "expected"), LIMITS)
def test_the_limit_an_agent_hit_is_named(returncode: int | None, stderr: list[str], limits: Limits,
                                         expected: str | None) -> None:
    assert limit_hit(returncode, stderr, limits) == expected


def reference_without_state(agents: Path, agent_id: str, extra: str = "") -> None:
    """The reference agent keeping its sessions where it would on its own: in its agent home."""
    command = [sys.executable, "-m", "agents.reference"]
    (agents / f"{agent_id}.toml").write_text(f'id = "{agent_id}"\ncommand = {orjson.dumps(command).decode()}\n'
                                            f"native_session_resume = true\n{extra}")


def sref(at: Layout) -> None:
    reference_without_state(at.agents, "sref")


def profiles(at: Layout) -> None:
    reference_without_state(at.agents, "sref")
    reference_without_state(at.agents, "small", "[limits]\nfile_size = 1048576\n")
    for network in ("outbound", "host"):
        reference_without_state(at.agents, f"sref-{network}", f'network = "{network}"\n')


# The module's gateway, under bwrap (`world`: an owner of its own on it); a test that kills its gateway, or runs it
# unconfined or with another PATH, has one of its own.
GATEWAY = Spec(agents=profiles, config='sandbox = "bwrap"\n')


async def shell(world: World, sid: str, command: str) -> str:
    return await agent_said(world.gateway, world.token, sid, f"/sh {command}")


async def session(client: GatewayClient, cwd: Path, agent: str = "sref") -> str:
    """A session of `agent` in `cwd` (made), its agent ready."""
    cwd.mkdir(parents=True, exist_ok=True)
    view = await start(client, cwd, agent)
    assert view["state"] == "WAITING_FOR_INPUT", view["error_message"]
    return str(view["session_id"])


ATTEMPTS = {  # what owner B's agent tries, through its own shell: each must fail under bwrap
    "the state database": "cat {state}/gateway.db | head -c 16",
    "the configuration": "cat {config}",
    "owner A's workspace": "ls {work_a}; cat {work_a}/notes.txt",
    "owner A's agent home": "cat {home_a}/.secret",
    "the gateway's environment": "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {pg} || true",
    "writing outside": "echo x > {outside}/dropped; echo x > /etc/dropped && echo wrote-etc",
}


def places(bob: World, alice: World, outside: Path) -> dict[str, Path | str]:
    """What B's attempts name: the gateway's files, A's workspace and home, and a directory outside them all."""
    from gateway.runtime.homes import owner_dir_name

    return {"state": bob.gateway.state_dir, "config": bob.layout.config, "work_a": alice.work,
            "home_a": bob.gateway.state_dir / "homes" / owner_dir_name(alice.owner), "pg": PG_SECRET,
            "outside": outside}


async def attempts(bob: World, alice: World, outside: Path, sid_b: str) -> dict[str, str]:
    where = places(bob, alice, outside)
    return {what: await shell(bob, sid_b, command.format(**where)) for what, command in ATTEMPTS.items()}


async def test_an_owners_agent_sees_only_its_owners_world_under_bwrap(gateway_world: WorldFactory, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", PG_SECRET)
    alice = await gateway_world(Spec(agents=sref, config='sandbox = "bwrap"\n'))  # its own: it is killed
    bob = alice.another()
    alice_client, bob_client = await alice.client(), await bob.client()
    sid_a = await session(alice_client, alice.work)
    (alice.work / "notes.txt").write_text("alice's notes\n")
    assert "wrote" in await shell(alice, sid_a, "echo hidden-value-42 > ~/.secret && echo wrote")
    sid_b = await session(bob_client, bob.work)
    tried = await attempts(bob, alice, tmp_path, sid_b)
    assert "SQLite" not in tried["the state database"], tried
    assert "auth.tokens" not in tried["the configuration"] and alice.token not in tried["the configuration"], tried
    assert "alice's notes" not in tried["owner A's workspace"], tried
    assert "hidden-value-42" not in tried["owner A's agent home"], tried
    assert tried["the gateway's environment"].strip() == "0", tried
    # a write outside lands nowhere: the sandbox's /tmp is its own, the system read-only
    assert "wrote-etc" not in tried["writing outside"] and not (tmp_path / "dropped").exists(), tried
    # its own world works: its workspace, its home; its processes are its own, as its owner's uid
    own = await shell(bob, sid_b, "echo mine > here.txt && cat here.txt; echo h > ~/h && cat ~/h; "
                                  "ls /proc | grep -c '^[0-9]'; id -u")
    lines = own.split()
    assert lines[:2] == ["mine", "h"] and int(lines[2]) < 10 and lines[3] == str(owner_uid(bob.owner)), own
    assert (bob.work / "here.txt").read_text() == "mine\n"
    # a restart restores the session: its agent's own store is in its owner's home
    await alice.gateway.kill9()
    await wait_until(lambda: not running_agents(tmp_path), 10, "no sandboxed agent left behind")
    await alice.gateway.start()
    bob_client = await bob.client()
    resumed = await bob_client.call("task.session.resume", {"session_id": sid_b})
    assert resumed["is_agent_running"] and "restored by session/resume" in (resumed["how"] or ""), resumed


async def test_an_agents_terminal_is_confined_as_the_agent_is(world: World, tmp_path: Path) -> None:
    alice, bob = world, world.another()
    alice_client, bob_client = await alice.client(), await bob.client()
    await session(alice_client, alice.work)
    (alice.work / "notes.txt").write_text("alice's notes\n")
    sid_b = await session(bob_client, bob.work)
    where = places(bob, alice, tmp_path)
    tried = {what: await terminal_said(bob.gateway, bob.token, sid_b, command.format(**where))
             for what, command in ATTEMPTS.items()}
    assert "SQLite" not in tried["the state database"], tried
    assert "auth.tokens" not in tried["the configuration"], tried
    assert "alice's notes" not in tried["owner A's workspace"], tried
    assert "wrote-etc" not in tried["writing outside"] and not (tmp_path / "dropped").exists(), tried
    own = await terminal_said(bob.gateway, bob.token, sid_b,
                              "echo mine > t.txt && cat t.txt; ls /proc | grep -c '^[0-9]'; id -u")
    lines = own.split()
    assert lines[0] == "mine" and int(lines[1]) < 10 and lines[2] == str(owner_uid(bob.owner)), own


async def test_the_same_attempts_succeed_unconfined(gateway_world: WorldFactory, tmp_path: Path) -> None:
    bob = await gateway_world(Spec(agents=sref, args=("--default-agent", "sref")))  # its own: unconfined
    alice = bob.another()
    (alice.work / "notes.txt").write_text("alice's notes\n")
    sid_b = await session(await bob.client(), bob.work)
    tried = await attempts(bob, alice, tmp_path, sid_b)
    assert "SQLite" in tried["the state database"], tried
    assert "auth.tokens" in tried["the configuration"], tried
    assert "alice's notes" in tried["owner A's workspace"], tried
    assert (tmp_path / "dropped").exists()


async def test_an_agent_over_its_limit_gets_a_named_error_and_the_rest_carry_on(world: World) -> None:
    client = await world.client()
    other = await session(client, world.work / "other")
    small = await session(client, world.work / "small", "small")
    with pytest.raises(RpcCallError) as failed:
        await client.call("task.session.prompt", {"session_id": small, "prompt": "/fill 4194304"})
    assert failed.value.code == -32015  # (Python ignores SIGXFSZ: the write fails, the agent answers an error)
    assert "it hit its file_size limit (limits.file_size = 1048576 in profile 'small')" in failed.value.message
    assert "ok" in await shell(world, other, "echo ok")  # the other session carries on


def running_agents(tmp_path: Path) -> list[str]:
    return [cmdline for cmdline in processes_naming(str(tmp_path)) if "bwrap" in cmdline]


def test_serve_refuses_several_owners_with_unconfined_agents(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(f'[[auth.tokens]]\ntoken = "{ALICE}"\nowner = "alice"\n'
                      f'[[auth.tokens]]\ntoken = "{BOB}"\nowner = "bob"\n')
    base = [sys.executable, "-m", "gateway.cli", "serve", "--port", "0", "--state-dir", str(tmp_path / "state"),
            "--config", str(config)]
    refused = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    said = refused.stderr.strip().splitlines()[-1]
    assert "2 owners are configured and agents run unconfined" in said and "--allow-unconfined-agents" in said
    assert 'sandbox = "bwrap"' in said


async def test_accepted_unconfined_agents_are_said_by_healthz(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path)  # the harness accepts it for two owners
    async with running(gw):
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        answer = (await asyncio.wait_for(reader.read(4096), 10)).decode()
        writer.close()
        assert "200" in answer.splitlines()[0] and "agents unconfined for several owners" in answer
        assert any("agents run unconfined for 2 owners" in line for line in gw.stderr_lines)


PROBE = ("import socket, sys\nfor port in sys.argv[1:]:\n    try:\n        socket.create_connection(('127.0.0.1', "
         "int(port)), 3).close(); print(port, 'reachable')\n    except OSError as e: print(port, 'unreachable', e)\n"
         "print('routes', sum(1 for line in open('/proc/net/route') if line.split()[1] == '00000000'))")


@pytest.mark.parametrize(("network", "reachable"), [("outbound", False), ("host", True)])
async def test_outbound_has_a_way_out_but_no_loopback_services(world: World, pg_url: str, network: str,
                                                              reachable: bool) -> None:
    """Under `outbound` the agent's namespace has a default route out (through slirp4netns) and reaches neither the
    test PostgreSQL server nor the gateway's own port on loopback; under `host` it reaches both (so this can fail).
    No outside host is contacted: the test machines have no network beyond loopback."""
    from urllib.parse import urlparse

    pg_port = urlparse(pg_url).port or 5432
    client = await world.client()
    sid = await session(client, world.work, f"sref-{network}")
    (world.work / "probe.py").write_text(PROBE)
    said = await shell(world, sid, f"{sys.executable} probe.py {pg_port} {world.gateway.port}")
    lines = dict(line.split(" ", 1) for line in said.strip().splitlines())
    assert lines[str(pg_port)].startswith("reachable" if reachable else "unreachable"), said
    assert lines[str(world.gateway.port)].startswith("reachable" if reachable else "unreachable"), said
    assert int(lines["routes"]) >= 1, said  # a default route out


def test_doctor_says_what_serve_would_make_of_it(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(f'[[auth.tokens]]\ntoken = "{ALICE}"\nowner = "alice"\n'
                      f'[[auth.tokens]]\ntoken = "{BOB}"\nowner = "bob"\n')
    base = [sys.executable, "-m", "gateway.cli", "doctor", "--config", str(config), "--state-dir", str(tmp_path)]
    refused = subprocess.run(base, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "agents unconfined for several owners: REFUSED at serve" in refused.stdout
    assert "PROBLEM: 2 owners are configured and agents run unconfined" in refused.stdout
    accepted = subprocess.run([*base, "--allow-unconfined-agents"], capture_output=True, text=True, timeout=60)
    assert accepted.returncode == 0 and "accepted (allow_unconfined_agents)" in accepted.stdout
    confined = subprocess.run([*base, "--sandbox", "bwrap"], capture_output=True, text=True, timeout=60)
    assert confined.returncode == 0, confined.stdout
    assert "sandbox bwrap: works here" in confined.stdout and "agent reference: found; sandbox bwrap, network " \
        "outbound" in confined.stdout


async def test_a_start_whose_sandbox_cannot_run_is_refused_at_once(gateway_world: WorldFactory, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that loses what a sandbox needs after `serve` started (user namespaces turned off, say): the next
    start of a sandboxed agent is a typed error naming why, and nothing is created."""
    import shutil as shell_tools

    real = shell_tools.which("bwrap")
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    broken = tmp_path / "userns-off"
    fake.write_text(f"#!/bin/sh\nif [ -e {broken} ]; then echo 'bwrap: setting up uid map: Permission denied' >&2; "
                    f"exit 1; fi\nexec {real} \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    world = await gateway_world(Spec(agents=sref, config='sandbox = "bwrap"\n'))  # its own, on that PATH
    client = await world.client()
    broken.touch()
    with pytest.raises(RpcCallError) as refused:
        await start(client, world.work, "sref", wait_ready=False)
    assert refused.value.code == -32015 and refused.value.data["session_id"] is None
    assert "sandbox, which cannot start here: bwrap: setting up uid map: Permission denied" in refused.value.message
    assert (await client.call("task.session.list", {}))["sessions"] == []
