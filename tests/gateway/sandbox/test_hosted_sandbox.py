"""Agents in agent hosts (`host_linger`) under bubblewrap (`sandbox = "bwrap"`): the sandbox's arguments reach bwrap
through a descriptor the host passes on (`--args FD`), so a hosted agent starts confined and answers, and its turn
under way when the gateway is killed -9 ends in the same process; and the hosts' sockets and spools, under the
gateway's state directory, are out of every sandboxed agent's reach — its own host's and another owner's alike: it
can neither list, read nor connect to them, holds no descriptor leading there, and the execution's secret is in no
agent's environment or command line. The same attempts made by the gateway's user succeed (so these tests can fail)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from gateway.agenthost.protocol import secret_hash
from gateway.runtime.sandbox import owner_uid
from tests.gateway.agenthost.test_gateway_restart import chunk_texts, host_pids
from tests.gateway.cli.test_hosts_verb import stored_host
from tests.gateway.sandbox.test_sandbox import session, shell, sref
from tests.support.world import Spec, World, WorldFactory

# The module's gateway (`world`) and a test's own (`own`, killed -9): agents in hosts, under bubblewrap.
GATEWAY = Spec(agents=sref, config='sandbox = "bwrap"\nhost_linger = 60\n')


@pytest_asyncio.fixture(loop_scope="module")
async def own(gateway_world: WorldFactory) -> AsyncIterator[World]:
    """A gateway of the test's own; its hosts, which outlive it by design, are killed after the test (their agents
    die with them)."""
    world = await gateway_world(GATEWAY)
    yield world
    await world.gateway.stop()
    for pid in host_pids(world.gateway.state_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def proc_read(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def tree(pid: int) -> list[int]:
    """`pid` and every process descended from it (bwrap, its init inside the sandbox, the agent, its children)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found = [pid]
    for member in found:
        found += sorted(child for child, parent in parents.items() if parent == member and child not in found)
    return found


def reference_agent(pids: list[int]) -> int:
    """The reference agent's own process among a sandbox's processes (its wrappers name it too, further on)."""
    [pid] = [p for p in pids if proc_read(p, "cmdline").split(b"\0")[1:3] == [b"-m", b"agents.reference"]]
    return pid


async def test_a_hosted_agent_under_bwrap_answers_and_its_turn_outlives_a_gateway_kill(own: World) -> None:
    client, log = await own.subscribed()
    sid = await session(client, own.work)
    host = stored_host(own.gateway.state_dir, sid)
    assert set(host_pids(own.gateway.state_dir)) == {host["host_pid"]}  # the agent runs in a host
    argv = host["argv"]
    assert any(Path(a).name == "bwrap" for a in argv) and "--args" in argv, argv  # bwrap, its arguments on a fd
    sandboxed = tree(host["agent_pid"])
    agent = reference_agent(sandboxed)
    # it answers, confined: its owner's uid and its sandbox's few processes
    said = (await shell(own, sid, "id -u; ls /proc | grep -c '^[0-9]'")).split()
    assert said[0] == str(owner_uid(own.owner)) and int(said[1]) < 10, said
    answer = await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello"})
    assert answer["stop_reason"] == "end_turn"
    # a turn under way when the gateway is killed -9 ends in the same process once it is back
    gate = own.work / "gate"  # in the workspace: the agent polls it from inside its sandbox
    await log.wait(lambda _: len([e for e in log.events if e["type"] == "turn_ended"]) == 2)  # /sh's, hello's
    cursor = max(log.ids())
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"/gate {gate} 40"}))
    await log.wait(lambda _: "chunk 19 " in chunk_texts(log.events, sid))
    await own.gateway.kill9()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    assert tree(host["agent_pid"]) == sandboxed  # the sandboxed agent runs on with no gateway
    gate.touch()
    await own.gateway.start()
    client, log = await own.subscribed(cursor)
    ended = await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid, timeout=30)
    assert ended["data"]["stop_reason"] == "end_turn"
    assert chunk_texts(log.events, sid) == [f"chunk {i} " for i in range(40)]  # each once, in order
    assert [e["type"] for e in log.events if e["session_id"] == sid].count("turn_started") == 1
    assert reference_agent(tree(host["agent_pid"])) == agent  # the very same process answered
    assert stored_host(own.gateway.state_dir, sid)["agent_pid"] == host["agent_pid"]
    again = await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello again"})
    assert again["stop_reason"] == "end_turn"
    assert reference_agent(tree(host["agent_pid"])) == agent


# What an agent tries against the hosts: list their directory, each host's directory and spool, read every file
# there, stat and connect to each socket. One line an attempt: `<what> ok` or `<what> failed <errno>`.
PROBE = """\
import errno, os, socket, sys

def attempt(what, act):
    try:
        act()
        print(what, "ok")
    except OSError as e:
        print(what, "failed", errno.errorcode.get(e.errno, e.errno))

def connect(path):
    directory, name = os.path.split(path)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)  # a long path: reached through the directory's fd
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)

def read(path):
    with open(path, "rb") as f:
        f.read()

hosts, rest = sys.argv[1], sys.argv[2:]
attempt("list " + hosts, lambda: os.listdir(hosts))
for kind, path in zip(rest[::2], rest[1::2]):
    if kind == "dir":
        attempt("list " + path, lambda: os.listdir(path))
    elif kind == "file":
        attempt("read " + path, lambda: read(path))
    else:
        attempt("stat " + path, lambda: os.stat(path))
        attempt("connect " + path, lambda: connect(path))
"""


def probe_args(hosts: Path) -> list[str]:
    """Every host's directory, spool, files and socket, as the probe takes them."""
    args = [str(hosts)]
    for directory in sorted(hosts.iterdir()):
        args += ["dir", str(directory)]
        for path in sorted(directory.rglob("*")):
            if path.is_dir():
                args += ["dir", str(path)]
            elif path.is_socket():
                args += ["socket", str(path)]
            elif path.is_file():
                args += ["file", str(path)]
    return args


def outcomes(said: str) -> dict[str, str]:
    """The probe's attempts: `ok`, or the errno each failed with."""
    found = {}
    for line in said.splitlines():
        if line.endswith(" ok"):
            found[line.removesuffix(" ok")] = "ok"
        elif " failed " in line:
            what, how = line.rsplit(" failed ", 1)
            found[what] = how
    return found


async def probe(args: list[str]) -> str:
    """What the probe says run by the test, as the gateway's user, unconfined."""
    control = await asyncio.create_subprocess_exec(sys.executable, "-c", PROBE, *args, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    return (await asyncio.wait_for(control.communicate(), 60))[0].decode()


def trimmed(tried: dict[str, str]) -> set[str]:
    """The attempts at a spool segment the host deleted meanwhile (SP-2: every line in it acknowledged)."""
    return {what for what, how in tried.items() if how == "ENOENT" and what.startswith("read ")
            and what.endswith(".lines") and not Path(what.removeprefix("read ")).exists()}


def descriptors(pid: int) -> list[str]:
    """Where each of a process's descriptors leads."""
    leads = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            leads.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError as exc:
            leads.append(f"unreadable {errno.errorcode.get(exc.errno or 0, exc.errno)}")
    return leads


async def test_no_owners_sandboxed_agent_reaches_a_hosts_socket_or_spool(world: World) -> None:
    owners = [world, world.another()]
    sids = [await session(await owner.client(), owner.work) for owner in owners]
    state = world.gateway.state_dir
    stored = [stored_host(state, sid) for sid in sids]
    hosts = state / "hosts"
    for host in stored:  # where the gateway placed each host's socket and spool
        assert Path(host["socket"]).parent.parent == hosts and Path(host["spool"]).parent.parent == hosts
    args = probe_args(hosts)
    for host in stored:
        assert host["socket"] in args and host["spool"] in args, args
    # the gateway's user reaches them all (the paths are right, and this test can fail)
    said = await probe(args)
    tried = outcomes(said)
    gone = trimmed(tried)
    tried = {what: how for what, how in tried.items() if what not in gone}
    assert tried and set(tried.values()) == {"ok"}, said
    assert [what for what in tried if what.endswith(".lines")], said  # a spool's segment: the conversation
    # each owner's agent, from inside its sandbox, reaches none of them: its own host's nor the other owner's
    for owner, sid in zip(owners, sids, strict=True):
        (owner.work / "probe.py").write_text(PROBE)
        said = await shell(owner, sid, " ".join([sys.executable, "probe.py", *args]))
        inside = {what: how for what, how in outcomes(said).items() if what not in gone}
        assert inside.keys() == tried.keys(), said
        assert set(inside.values()) <= {"ENOENT", "EACCES", "EPERM"}, said
        assert inside[f"list {hosts}"] == "ENOENT", said  # not even there
    # no descriptor of a sandboxed process leads to a host's files or is one of a host's sockets (none was
    # inherited), and no secret is in its environment or command line
    secrets = [s for host in stored for s in (host["secret"].encode(), secret_hash(host["secret"]).encode())]
    host_sockets = {lead for host in stored for lead in descriptors(host["host_pid"]) if lead.startswith("socket:")}
    assert host_sockets  # each host's listening socket, at least
    for host in stored:
        pids = tree(host["agent_pid"])
        agent = reference_agent(pids)
        assert b"HOME=" in proc_read(agent, "environ")  # the agent's environment is read (the check is not empty)
        for pid in pids:
            seen = proc_read(pid, "environ") + b"\0" + proc_read(pid, "cmdline")
            assert not [s for s in secrets if s in seen], f"process {pid} holds a secret"  # (not repeated here)
            leads = descriptors(pid)
            assert not [lead for lead in leads if str(hosts) in lead or lead in host_sockets], (pid, leads)
    for host in stored:  # the host itself is given only the secret's hash, in a file it deleted
        pid = host["host_pid"]
        assert not [s for s in secrets if s in proc_read(pid, "environ") + proc_read(pid, "cmdline")]
