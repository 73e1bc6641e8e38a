"""An agent host with a real agent (tests/gateway/agenthost/numbered_agent.py), over its real socket: lines reach a
reattaching gateway exactly once and in order, the gateway's lines reach the agent once, fencing, the secret, the
linger, the parent-death signal, the file modes and the spool's bound (docs/agent-hosts.md)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.agenthost import protocol
from gateway.agenthost.client import HostConnection, HostDisconnected, HostError, start_host
from gateway.agenthost.host import READ_CHUNK
from gateway.agenthost.spec import socket_address
from tests.conftest import wait_until

from .support import WAIT, Started, alive, gone, numbered, numbered_spec, read_lines, start_numbered

STUB = str(Path(__file__).with_name("gateway_stub.py"))


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Started]:
    started = await start_numbered(tmp_path)
    yield started
    started.kill()


async def test_a_gateway_that_drops_mid_flood_gets_every_remaining_line_once_in_order(host: Started) -> None:
    first = await host.attach(incarnation=1, committed=0)
    first.send(b"flood 5000")
    seen = await read_lines(first, 1234)
    committed = 1000  # what this gateway had committed when its connection went
    first.ack(committed)
    await first.close()
    second = await host.attach(incarnation=2, committed=committed)
    rest = await read_lines(second, 5000 - committed)
    assert [offset for offset, _ in rest] == list(range(committed + 1, 5001))
    assert numbered(seen + rest)
    status = await second.status()
    assert status["head"] == 5000  # and nothing more: no line came twice on the second connection


async def test_a_killed_gateway_process_loses_nothing(host: Started) -> None:
    stub = await asyncio.create_subprocess_exec(
        sys.executable, STUB, host.handle.socket_path, "1", "4000", "1537", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    assert stub.stdin is not None and stub.stdout is not None
    stub.stdin.write(host.secret.encode() + b"\n")
    await stub.stdin.drain()
    committed = 0
    while committed < 1537:  # it stalls there, attached, its last ack at 1500
        committed = int(await asyncio.wait_for(stub.stdout.readline(), WAIT))
    stub.kill()  # SIGKILL, mid-flood
    await stub.wait()
    after = await host.attach(incarnation=2, committed=committed)
    rest = await read_lines(after, 4000 - committed)
    assert [offset for offset, _ in rest] == list(range(committed + 1, 4001))
    assert numbered(rest)
    assert (await after.status())["head"] == 4000


async def test_a_line_sent_twice_reaches_the_agent_once(host: Started) -> None:
    connection = await host.attach()
    for seq in (1, 1, 2, 1, 2):  # AH-8: what was written is not written again
        connection._send({"t": "line", "seq": seq, "line": f"echo {seq}"})
    assert [line for _, line in await read_lines(connection, 2)] == [b"1 echo 1", b"2 echo 2"]
    connection._send({"t": "line", "seq": 3, "line": "echo 3"})
    assert await read_lines(connection, 1) == [(3, b"3 echo 3")]  # not a fourth: the duplicates were dropped
    connection._send({"t": "line", "seq": 9, "line": "echo 9"})  # AH-10: a gap ends the connection
    with pytest.raises(HostDisconnected) as ended:
        await asyncio.wait_for(connection.next_line(), WAIT)
    assert ended.value.rule == "AH-10"


async def test_lines_the_host_had_not_taken_are_sent_again_on_reattach_and_written_once(host: Started) -> None:
    first = await host.attach()
    outbox = first.outbox
    await first.close()
    for word in (b"echo a", b"echo b"):  # sent while detached: kept, numbered
        first.send(word)
    assert sorted(outbox.unwritten) == [1, 2]
    second = await host.attach(incarnation=2, outbox=outbox)
    assert await read_lines(second, 2) == [(1, b"1 echo a"), (2, b"2 echo b")]
    await second.close()
    third = await host.attach(incarnation=3, committed=2, outbox=outbox)  # the same seqs again: written already
    for seq, line in ((1, "echo a"), (2, "echo b"), (3, "echo c")):
        third._send({"t": "line", "seq": seq, "line": line})
    assert await read_lines(third, 1) == [(3, b"3 echo c")]
    assert third.welcome.written == 2 and outbox.unwritten == {}


async def test_a_newer_incarnation_wins_and_an_older_one_is_refused(host: Started) -> None:
    old = await host.attach(incarnation=3)
    new = await host.attach(incarnation=4)  # AH-3
    with pytest.raises(HostDisconnected) as superseded:
        await asyncio.wait_for(old.next_line(), WAIT)
    assert superseded.value.rule == "AH-3"
    with pytest.raises(HostError) as refused:
        await host.attach(incarnation=3)  # AH-2
    assert refused.value.rule == "AH-2"
    await new.close()
    with pytest.raises(HostError) as still:
        await host.attach(incarnation=3)  # fenced by the newest accepted, attached or not
    assert still.value.rule == "AH-2"
    new.send(b"echo still mine")
    again = await host.attach(incarnation=4, outbox=new.outbox)
    assert await read_lines(again, 1) == [(1, b"1 echo still mine")]


async def test_a_gateway_that_does_not_ask_for_raw_frames_gets_the_same_lines_as_json(host: Started) -> None:
    """An older gateway's hello (no `raw`) is sent JSON line frames; this gateway's, raw ones: the same lines."""
    with socket_address(host.handle.socket_path) as address:
        reader, writer = await asyncio.open_unix_connection(address)
    writer.write(protocol.encode({"t": "hello", "secret": host.secret, "incarnation": 1, "committed": 0}))
    assert protocol.decode(await asyncio.wait_for(reader.readline(), WAIT))["t"] == "welcome"
    writer.write(protocol.encode({"t": "line", "seq": 1, **protocol.carry(b"flood 3")}))
    frames: list[bytes] = []
    while len([f for f in frames if f.startswith(b'{"t":"line"')]) < 3:
        frames.append(await asyncio.wait_for(reader.readline(), WAIT))
    as_json = [(f["offset"], protocol.carried(f)) for f in map(protocol.decode, frames) if f["t"] == "line"]
    writer.close()
    newer = await host.attach(incarnation=2)
    assert await read_lines(newer, 3) == as_json
    assert numbered(as_json)


async def test_an_offset_the_spool_never_had_is_refused(host: Started) -> None:
    with pytest.raises(HostError) as refused:
        await host.attach(committed=1)
    assert refused.value.rule == "AH-4"


async def test_the_secret_is_checked_and_never_reaches_the_agent_nor_the_hosts_command_line(host: Started) -> None:
    with pytest.raises(HostError) as refused:
        await HostConnection.attach(host.handle.socket_path, "not-the-secret", 1, 0)
    assert refused.value.rule == "AH-1"
    connection = await host.attach()  # the refusal attached nothing
    connection.send(b"echo still here")
    assert await read_lines(connection, 1) == [(1, b"1 echo still here")]
    environ = Path(f"/proc/{host.handle.agent_pid}/environ").read_bytes()
    assert dict(entry.split("=", 1) for entry in environ.decode().split("\0") if entry) == host.spec.env
    for pid in (host.handle.agent_pid, host.handle.host_pid):
        for part in ("environ", "cmdline"):
            assert host.secret.encode() not in Path(f"/proc/{pid}/{part}").read_bytes()
    assert not any(path.name.endswith(".spec") for path in Path(host.spec.socket_path).parent.iterdir())


async def test_socket_and_spool_are_the_owners_alone(host: Started) -> None:
    connection = await host.attach()
    connection.send(b"flood 10")
    await read_lines(connection, 10)
    socket_path = Path(host.handle.socket_path)
    assert stat.S_ISSOCK(socket_path.stat().st_mode)
    assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700
    spool = Path(host.handle.spool_dir)
    assert stat.S_IMODE(spool.stat().st_mode) == 0o700
    files = list(spool.iterdir())
    assert files and all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in files)


async def test_no_gateway_within_the_linger_ends_agent_and_host(tmp_path: Path) -> None:
    started = await start_numbered(tmp_path, linger=0.3)
    try:
        connection = await started.attach()
        await connection.close()  # LG-1 counts from the last detach
        await gone(started.handle.host_pid)
        await gone(started.handle.agent_pid)
        assert not Path(started.handle.socket_path).exists()
        assert not Path(started.handle.spool_dir).exists()
    finally:
        started.kill()


async def test_a_killed_host_takes_its_agent_with_it(host: Started) -> None:
    assert alive(host.handle.agent_pid)
    os.kill(host.handle.host_pid, signal.SIGKILL)
    await gone(host.handle.agent_pid)  # PR_SET_PDEATHSIG


async def test_the_agents_exit_stderr_and_release(host: Started) -> None:
    connection = await host.attach()
    connection.send(b"err something went wrong")
    assert await read_lines(connection, 1) == [(1, b"1 err written")]
    assert "something went wrong" in await connection.stderr_tail(5)
    connection.send(b"exit 3")
    assert await asyncio.wait_for(connection.next_line(), WAIT) is None
    assert await connection.exit_code == 3
    await connection.close()
    late = await host.attach(incarnation=2, committed=1)  # LG-3: the exit waits for the gateway
    assert late.welcome.exit_code == 3
    assert await asyncio.wait_for(late.next_line(), WAIT) is None
    await late.release()  # LG-2
    await gone(host.handle.host_pid)


async def test_stop_ends_the_agents_tree(host: Started) -> None:
    connection = await host.attach()
    connection.stop(grace=5.0)
    assert await asyncio.wait_for(connection.next_line(), WAIT) is None
    assert await connection.exit_code == 0  # stdin closed: the agent ends by itself
    await gone(host.handle.agent_pid)


async def test_past_the_bound_the_host_stops_reading_the_agent_and_loses_nothing(tmp_path: Path) -> None:
    """SP-1: with nothing acknowledged the spool stops near its bound; acks let the flood go on, every line once."""
    bound = 64 * 1024
    started = await start_numbered(tmp_path, spool_max_bytes=bound)
    try:
        connection = await started.attach()
        connection.send(b"flood 20000")  # about 600 KB
        received: list[tuple[int, bytes]] = []
        while True:
            status = await connection.status()
            received += await read_lines(connection, status["head"] - len(received))
            if status["paused"]:
                break
        assert bound <= status["unacked_bytes"] < bound + READ_CHUNK + 100
        assert status["stored_bytes"] < bound + READ_CHUNK + 200
        assert sum(f.stat().st_size for f in Path(started.handle.spool_dir).iterdir()) == status["stored_bytes"]
        while len(received) < 20000:
            connection.ack(received[-1][0])
            received += await read_lines(connection, min(500, 20000 - len(received)))
        assert [offset for offset, _ in received] == list(range(1, 20001))
        assert numbered(received)
        assert (await connection.status())["head"] == 20000
    finally:
        started.kill()


async def test_an_attached_gateway_that_reads_nothing_paces_the_agent_and_a_detach_lets_it_run(tmp_path: Path) -> None:
    """SP-3: attached, the host reads the agent only a window ahead of what it sent the gateway (the agent blocks on
    its pipe, as a gateway's child would); detached, it reads on up to the spool's bound (SP-1)."""
    flood = 300_000
    flooded = sum(len(b"%d flood line %d of %d\n" % (i, i, flood)) for i in range(1, flood + 1))  # about 9 MB
    started = await start_numbered(tmp_path, spool_max_bytes=64 << 20)
    spool = Path(started.handle.spool_dir)

    def spooled() -> int:
        return sum(f.stat().st_size for f in spool.glob("agent-*"))

    def writing_blocked() -> bool:
        return "pipe_write" in Path(f"/proc/{started.handle.agent_pid}/wchan").read_text()

    try:
        with socket_address(started.handle.socket_path) as address:
            _, writer = await asyncio.open_unix_connection(address)
        writer.write(protocol.encode({"t": "hello", "secret": started.secret, "incarnation": 1, "committed": 0,
                                      "raw": True}))
        writer.write(protocol.encode({"t": "line", "seq": 1, **protocol.carry(b"flood %d" % flood)}))
        await wait_until(writing_blocked, WAIT, "the agent to block on its stdout")
        assert spooled() < flooded // 4  # a window past what the socket took, not the flood
        writer.close()  # detached: nothing paces the agent but the bound
        await wait_until(lambda: spooled() == flooded, WAIT, "the whole flood in the spool")
    finally:
        started.kill()


async def test_an_agent_that_cannot_start_is_said_so(tmp_path: Path) -> None:
    hashed = protocol.secret_hash("x")
    with pytest.raises(HostError, match="agent command not found"):
        await start_host(numbered_spec(tmp_path, hashed, argv=[str(tmp_path / "no-such-agent")]))
    assert not any(path.suffix == ".spec" for path in (tmp_path / "hosts").iterdir())


OLDER_HOSTS_LINES = [b'{"jsonrpc":"2.0","method":"x"}', "ünïcødé ✓".encode(), b"\xff\xfe not utf-8", b""]


async def older_host(path: Path) -> asyncio.Server:
    """A host of an older version on `path`, as it speaks: it answers any hello, ignores `raw`, and sends the agent's
    lines as JSON line frames, then the agent's exit."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = protocol.decode(await reader.readline())
        assert hello["t"] == "hello" and hello["raw"] is True  # asked for: an older host does not know it
        writer.write(protocol.encode(protocol.welcome(len(OLDER_HOSTS_LINES), 0, os.getpid(), os.getpid(), None)))
        for offset, line in enumerate(OLDER_HOSTS_LINES, 1):
            writer.write(protocol.encode({"t": "line", "offset": offset, **protocol.carry(line)}))
        writer.write(protocol.encode({"t": "exit", "code": 0, "head": len(OLDER_HOSTS_LINES)}))
        await writer.drain()
        await reader.read()  # until the gateway closes
        writer.close()

    return await asyncio.start_unix_server(serve, str(path))


async def test_a_host_of_an_older_version_sending_json_frames_is_read_as_before(tmp_path: Path) -> None:
    """An upgraded gateway attaching to a host an older version started: its JSON line frames reach the ACP reader
    unchanged, each with its offset, then the end."""
    path = tmp_path / "older.sock"
    server = await older_host(path)
    try:
        one = await HostConnection.attach(str(path), "any", 1, 0)
        assert [await asyncio.wait_for(one.next_line(), WAIT) for _ in OLDER_HOSTS_LINES] == \
            list(enumerate(OLDER_HOSTS_LINES, 1))
        assert await asyncio.wait_for(one.next_line(), WAIT) is None
        await one.close()
        other = await HostConnection.attach(str(path), "any", 2, 0)  # as the gateway's ACP reader takes them
        taken: list[bytes] = []
        while lines := await asyncio.wait_for(other.stdout.read_lines(), WAIT):
            taken += lines
        assert taken == OLDER_HOSTS_LINES
        await other.close()
    finally:
        server.close()
