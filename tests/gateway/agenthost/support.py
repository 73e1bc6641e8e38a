"""What the agent host's tests share: a spec for the numbered agent in a test's directory, waiting for a process
that is not our child to end (a pidfd: no polling), and reading the agent's lines."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from gateway.agenthost.client import HostConnection, HostHandle, new_secret, start_host
from gateway.agenthost.spec import HostSpec

AGENT = str(Path(__file__).with_name("numbered_agent.py"))
WAIT = 30.0  # a bound on every wait: a hung host fails the test instead of hanging it


def numbered_spec(directory: Path, secret_hash: str, **overrides: object) -> HostSpec:
    fields: dict[str, object] = {
        "argv": [sys.executable, AGENT], "cwd": str(directory),
        "env": {"PATH": os.defpath, "ACP_AGENT_EXECUTION": f"agenthost-test-{directory.name}"},
        "spool_dir": str(directory / "spool"), "socket_path": str(directory / "hosts" / "host.sock"),
        "secret_hash": secret_hash, "spool_max_bytes": 1 << 20, "linger": 120.0,
        "tree_marker": "ACP_AGENT_EXECUTION", "log_path": str(directory / "host.log")}
    fields.update(overrides)
    return HostSpec(**fields)  # type: ignore[arg-type]


class Started:
    """A host of the numbered agent, and its secret; killed at the test's end if it still runs."""

    def __init__(self, handle: HostHandle, secret: str, spec: HostSpec) -> None:
        self.handle, self.secret, self.spec = handle, secret, spec

    async def attach(self, incarnation: int = 1, committed: int = 0, **kwargs: object) -> HostConnection:
        return await HostConnection.attach(self.handle.socket_path, self.secret, incarnation, committed,
                                           **kwargs)  # type: ignore[arg-type]

    def kill(self) -> None:
        for pid in (self.handle.host_pid, self.handle.agent_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


async def start_numbered(directory: Path, **overrides: object) -> Started:
    secret, hashed = new_secret()
    spec = numbered_spec(directory, hashed, **overrides)
    return Started(await start_host(spec), secret, spec)


async def gone(pid: int, timeout: float = WAIT) -> None:
    """Until `pid` has ended (any process: its pidfd turns readable when it exits)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def exited() -> None:
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(fd, exited)
    try:
        await asyncio.wait_for(ended, timeout)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


async def read_lines(connection: HostConnection, count: int) -> list[tuple[int, bytes]]:
    found = []
    for _ in range(count):
        item = await asyncio.wait_for(connection.next_line(), WAIT)
        assert item is not None, "the agent exited early"
        found.append(item)
    return found


def numbered(lines: list[tuple[int, bytes]]) -> bool:
    """Every line's offset is the ordinal the agent wrote at its start."""
    return all(line.split(b" ", 1)[0] == str(offset).encode() for offset, line in lines)


class SeenLines:
    """What a model's gateway has of the agent's lines: the offset it committed, and the lines it has seen after it
    on its connection — which must be the very next offsets, each line the one the agent wrote there."""

    def __init__(self) -> None:
        self.committed = 0
        self.seen: list[tuple[int, bytes]] = []

    @property
    def head(self) -> int:
        """The last offset held: committed or seen."""
        return self.committed + len(self.seen)

    def add(self, lines: list[tuple[int, bytes]]) -> None:
        self.seen += lines
        self.check()

    def check(self) -> None:
        assert [offset for offset, _ in self.seen] == list(range(self.committed + 1, self.head + 1))
        assert numbered(self.seen)

    def commit(self, share: float) -> bool:
        """The first `share` of the lines seen committed (they are never seen again); whether the offset moved."""
        upto = int(len(self.seen) * share)
        if upto == 0:
            return False
        self.committed = self.seen[upto - 1][0]
        self.seen = self.seen[upto:]
        return True
