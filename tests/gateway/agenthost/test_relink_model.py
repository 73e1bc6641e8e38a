"""A state machine over one real agent host reached through a link that drops (a unix-socket relay standing in for
ssh's forward, cut at any moment): floods asked, lines read, commits acked, the link cut — before, during or after
a line is sent. The invariant: the reader sees the agent's lines once each, in order, with no gap, across any
number of dropped links, on one connection; every flood asked reaches the agent once (its lines are numbered by
what it received, so a flood written twice would show as extra lines)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gateway.agenthost.client import HostConnection, HostDisconnected, Relink

from .support import WAIT, SeenLines, Started, read_lines, start_numbered


class Relay:
    """A link to the host's socket: each connection to `path` piped to the host's; `cut` drops every one."""

    def __init__(self, path: Path, target: str) -> None:
        self.path, self.target = path, target
        self.pipes: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.links = 0

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._pipe, str(self.path))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.links += 1
        host_reader, host_writer = await asyncio.open_unix_connection(self.target)
        self.pipes |= {writer, host_writer}

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            for end in (writer, host_writer):
                end.close()

        await asyncio.gather(copy(reader, host_writer), copy(host_reader, writer))
        self.pipes -= {writer, host_writer}

    def cut(self) -> None:
        for end in list(self.pipes):
            end.transport.abort()  # as a killed ssh: no goodbye


class Relinking(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.directory = Path(tempfile.mkdtemp(prefix="relink-model-"))
        self.host: Started = self.runner.run(start_numbered(self.directory, spool_max_bytes=16 * 1024))
        self.relay = Relay(self.directory / "link.sock", self.host.handle.socket_path)
        self.runner.run(self.relay.start())
        self.incarnation = 1

        async def again() -> tuple[str, int]:
            self.incarnation += 1
            return str(self.relay.path), self.incarnation

        self.connection: HostConnection = self.runner.run(
            HostConnection.attach(str(self.relay.path), self.host.secret, 1, 0))
        self.connection.relink = Relink(again, WAIT)
        self.written = 0  # lines the agent will have written: the sum of the floods asked for
        self.lines = SeenLines()
        self.cuts = 0

    def teardown(self) -> None:
        try:
            while self.lines.head < self.written:  # everything, committing as a gateway does
                self.read(self.written)
                self.commit(1.0)
            assert self.status()["head"] == self.written  # and nothing more
            assert self.relay.links == 1 + self.connection.relinks and self.connection.relinks <= self.cuts
        finally:
            self.runner.run(self.connection.close())
            self.host.kill()
            self.runner.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def status(self) -> dict[str, Any]:
        """The host's status, asked again when the link dropped under the question (a dropped link fails what was
        asked on it)."""
        for _ in range(20):
            self.runner.run(self.connection.wait_linked())
            with contextlib.suppress(HostDisconnected):
                return self.runner.run(self.connection.status())
        raise AssertionError("the host's status could not be asked in 20 links")

    @rule(lines=st.integers(min_value=1, max_value=400), cut_after=st.booleans())
    def flood(self, lines: int, cut_after: bool) -> None:
        """Sent whether the link is up or being replaced; optionally cut right after (the line may be lost on
        the wire: it goes again from the outbox, and reaches the agent once)."""
        self.connection.send(f"flood {lines}".encode())
        self.written += lines
        if cut_after:
            self.cut()

    @rule()
    def cut(self) -> None:
        self.relay.cut()
        self.cuts += 1

    @rule(count=st.integers(min_value=0, max_value=300))
    def read(self, count: int) -> None:
        """Up to `count` of the lines the host has spooled and not yet seen here (asked of it once linked)."""
        available = self.status()["head"] - self.lines.head
        self.lines.add(self.runner.run(read_lines(self.connection, min(count, available))))

    @rule(share=st.floats(min_value=0.0, max_value=1.0))
    def commit(self, share: float) -> None:
        if self.lines.commit(share):
            self.connection.ack(self.lines.committed)

    @invariant()
    def lines_seen_follow_the_commit_and_the_connection_stands(self) -> None:
        self.lines.check()
        assert self.connection.closed_reason is None


Relinking.TestCase.settings = settings(max_examples=12, stateful_step_count=20, deadline=None,
                                       suppress_health_check=[HealthCheck.too_slow])
test_relink_model = Relinking.TestCase
