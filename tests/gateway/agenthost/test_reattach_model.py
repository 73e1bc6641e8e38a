"""A state machine over one real agent host: attach, detach, flood, read, commit and ack in any order. The invariant:
the agent's lines a gateway sees after its committed offset are exactly the lines the agent wrote after it, in
order, none twice, none before it; and every gateway line reaches the agent once (its lines are numbered by what it
received, so a flood written twice would show as extra lines)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.agenthost.client import GatewayLines, HostConnection

from .support import SeenLines, Started, read_lines, start_numbered


class Reattaching(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.directory = Path(tempfile.mkdtemp(prefix="agenthost-model-"))
        self.host: Started = self.runner.run(start_numbered(self.directory, spool_max_bytes=16 * 1024))
        self.connection: HostConnection | None = None
        self.outbox = GatewayLines()
        self.incarnation = 0
        self.written = 0  # lines the agent will have written: the sum of the floods asked for
        self.lines = SeenLines()  # the gateway's committed offset, and the lines seen after it on this connection

    def teardown(self) -> None:
        try:
            if self.connection is None:
                self.attach()
            assert self.connection is not None
            while self.lines.head < self.written:  # everything, committing as a gateway does
                self.read(self.written)
                self.commit(1.0)
            assert self.runner.run(self.connection.status())["head"] == self.written  # and nothing more
        finally:
            self.host.kill()
            self.runner.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    @precondition(lambda self: self.connection is None)
    @rule()
    def attach(self) -> None:
        self.incarnation += 1
        self.connection = self.runner.run(self.host.attach(self.incarnation, self.lines.committed,
                                                           outbox=self.outbox))
        self.lines.seen = []

    @precondition(lambda self: self.connection is not None)
    @rule()
    def detach(self) -> None:
        assert self.connection is not None
        self.runner.run(self.connection.close())
        self.connection = None

    @rule(lines=st.integers(min_value=1, max_value=400))
    def flood(self, lines: int) -> None:
        """Sent attached or not: a detached gateway's line goes out on the next attach (once)."""
        if self.connection is not None:
            self.connection.send(f"flood {lines}".encode())
        else:
            self.outbox.add(f"flood {lines}".encode())
        self.written += lines

    @precondition(lambda self: self.connection is not None)
    @rule(count=st.integers(min_value=0, max_value=300))
    def read(self, count: int) -> None:
        """Reads up to `count` of the lines written and not yet seen (the host may be paused on its bound: only
        lines it spooled before the pause are asked for, and it paused only past the committed offset)."""
        assert self.connection is not None
        status = self.runner.run(self.connection.status())
        available = status["head"] - self.lines.head
        self.lines.add(self.runner.run(read_lines(self.connection, min(count, available))))

    @precondition(lambda self: self.connection is not None)
    @rule(share=st.floats(min_value=0.0, max_value=1.0))
    def commit(self, share: float) -> None:
        """The gateway commits some of what it has seen, and acks it: lines up to it are never seen again."""
        assert self.connection is not None
        if self.lines.commit(share):
            self.connection.ack(self.lines.committed)

    @invariant()
    def lines_seen_follow_the_commit(self) -> None:
        self.lines.check()


Reattaching.TestCase.settings = settings(max_examples=12, stateful_step_count=15, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
test_reattach_model = Reattaching.TestCase
