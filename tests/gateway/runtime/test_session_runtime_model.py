"""The session runtime, model-based: hypothesis drives a real gateway process with several connections that start,
prompt (short, long, asking permission, hanging), cancel turns, cancel sessions, answer permissions, disconnect
at any point, and restart the gateway (SIGTERM and kill -9). After every step the invariants below must hold."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from gateway.clients.client import GatewayClient, RpcCallError
from gateway.runtime.reaper import parse_marker
from tests.conftest import process_alive
from tests.gateway_harness import EventLog, GatewayProcess, journal_events, reference_profile

STEPS = {"count": 0}
PROMPTS = ["hi", "/sleep 0.2", "/permission", "/hang"]
# What a client may be answered; -32603 never (it is left for bugs).
ALLOWED_CODES = {
    "task.session.prompt": {-32010, -32013},  # busy; the session was cancelled
    "task.session.cancel_turn": set(),
    "task.session.cancel": {-32009},  # already terminal
    "task.session.permission.respond": {-32009, -32002},  # answered already; gone with a restart
    "task.session.status": set(),
}
CALL_TIMEOUT = 30.0


def agent_processes(agent_state: Path) -> dict[int, str | None]:
    """pid -> execution marker of every live reference agent of this test."""
    found: dict[int, str | None] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if not environ:
            # The kernel answers an empty environment once an exiting process has released its memory, before it
            # is a zombie: an agent on its way out, not one without a marker (every agent is started with one).
            continue
        if b"agents.reference" in argv and str(agent_state).encode() in argv and process_alive(int(entry.name)):
            found[int(entry.name)] = parse_marker(environ)
    return found


class GatewayModel(RuleBasedStateMachine):
    """The model: which sessions exist and which are cancelled; everything else is read from the gateway."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = Path(self.run(self._tmpdir()))
        self.gateway: GatewayProcess | None = None
        self.connections: list[GatewayClient] = []
        self.sessions: list[str] = []
        self.cancelled: set[str] = set()
        self.calls: list[asyncio.Task[Any]] = []
        self.answers: list[tuple[str, Any]] = []
        self.observer: EventLog | None = None
        self.seen_ids: list[int] = []

    @staticmethod
    async def _tmpdir() -> str:
        import tempfile

        return tempfile.mkdtemp(prefix="runtime-model-")

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 60))

    # -- set-up --------------------------------------------------------------------------
    @initialize()
    def boot(self) -> None:
        for name in ("agents", "work"):
            (self.tmp / name).mkdir()
        reference_profile(self.tmp / "agents", self.tmp / "agent-state", "ref")
        (self.tmp / "gw.toml").write_text("cancel_grace = 1.0\nstop_grace = 0.5\nheartbeat_interval = 1.0\n")
        self.gateway = GatewayProcess(self.tmp / "state", self.tmp / "agents", config=self.tmp / "gw.toml")
        self.run(self.gateway.start())
        self.run(self._observe())
        self.run(self._connect())

    async def _connect(self) -> None:
        assert self.gateway is not None
        self.connections.append(await self.gateway.client())

    async def _observe(self) -> None:
        """One subscribed connection sees every event, replayed from its cursor after each restart."""
        assert self.gateway is not None
        client = await self.gateway.client()
        log = EventLog(client)
        params = {"since": self.seen_ids[-1]} if self.seen_ids else {}
        sub = await client.call("task.session.subscribe", params)
        await log.wait(lambda e: e["type"] == "caught_up" and e["data"]["subscription_id"] == sub["subscription_id"])
        self.observer = log

    def _record(self, method: str, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, RpcCallError):
            self.answers.append((method, exc.code))
        elif exc is not None and not isinstance(exc, (ConnectionError, OSError, asyncio.TimeoutError)):
            self.answers.append((method, repr(exc)))

    def _fire(self, conn: GatewayClient, method: str, params: dict[str, Any]) -> None:
        task = self.loop.create_task(conn.call(method, params, timeout=CALL_TIMEOUT))
        task.add_done_callback(lambda t: self._record(method, t))
        self.calls.append(task)

    def _call(self, conn: GatewayClient, method: str, params: dict[str, Any]) -> Any:
        async def call() -> Any:
            try:
                return await conn.call(method, params, timeout=CALL_TIMEOUT)
            except RpcCallError as exc:
                self.answers.append((method, exc.code))
            except ConnectionError:
                return None
            return None

        return self.run(call())

    def _pump(self) -> None:
        """Let the loop run what is due (fired calls, notifications) without waiting on anything."""
        self.run(asyncio.sleep(0))

    # -- rules ---------------------------------------------------------------------------
    @precondition(lambda self: len(self.connections) < 3)
    @rule()
    def connect(self) -> None:
        self.run(self._connect())

    @precondition(lambda self: len(self.connections) > 1)
    @rule(i=st.integers(0, 2))
    def disconnect(self, i: int) -> None:
        conn = self.connections.pop(i % len(self.connections))
        self.run(conn.close())  # whatever it was waiting for stays the gateway's to finish

    @precondition(lambda self: len(self.sessions) - len(self.cancelled) < 3)
    @rule()
    def start_session(self) -> None:
        view = self._call(self.connections[0], "task.session.start",
                          {"agent": "ref", "cwd": str(self.tmp / "work"), "wait_ready": True})
        if view is not None:
            self.sessions.append(view["session_id"])

    @precondition(lambda self: bool(self.sessions))
    @rule(c=st.integers(0, 2), s=st.integers(0, 5), prompt=st.sampled_from(PROMPTS))
    def prompt(self, c: int, s: int, prompt: str) -> None:
        conn = self.connections[c % len(self.connections)]
        self._fire(conn, "task.session.prompt", {"session_id": self.sessions[s % len(self.sessions)],
                                                 "prompt": prompt})
        self._pump()

    @precondition(lambda self: bool(self.sessions))
    @rule(c=st.integers(0, 2), s=st.integers(0, 5))
    def cancel_turn(self, c: int, s: int) -> None:
        conn = self.connections[c % len(self.connections)]
        self._call(conn, "task.session.cancel_turn", {"session_id": self.sessions[s % len(self.sessions)]})

    @precondition(lambda self: bool(self.sessions))
    @rule(c=st.integers(0, 2), s=st.integers(0, 5))
    def cancel(self, c: int, s: int) -> None:
        sid = self.sessions[s % len(self.sessions)]
        view = self._call(self.connections[c % len(self.connections)], "task.session.cancel", {"session_id": sid})
        if view is not None or sid in self.cancelled:
            self.cancelled.add(sid)

    @precondition(lambda self: bool(self.sessions))
    @rule(c=st.integers(0, 2), allow=st.booleans())
    def answer_permission(self, c: int, allow: bool) -> None:
        assert self.gateway is not None
        with sqlite3.connect(self.gateway.state_dir / "gateway.db") as db:
            pending = db.execute("SELECT id, session_id FROM permissions WHERE state = 'pending'").fetchall()
        for request_id, sid in pending[:1]:
            self._call(self.connections[c % len(self.connections)], "task.session.permission.respond",
                       {"session_id": sid, "request_id": request_id, "option_id": "allow-once" if allow
                        else "reject-once"})

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        assert self.gateway is not None
        self.run(self._drain_observer())
        for conn in self.connections:
            self.run(conn.close())
        if self.observer is not None:
            self.run(self.observer.client.close())
        self.run(self.gateway.kill9() if kill else self.gateway.stop())
        self.run(self._settle())
        self.calls = []
        self.connections = []
        self.run(self.gateway.start())
        self.run(self._observe())
        self.run(self._connect())
        # A turn cut by the restart was closed before the gateway served anyone.
        for sid in self.sessions:
            status = self._call(self.connections[0], "task.session.status", {"session_id": sid})
            assert status is None or status["state"] != "RUNNING", status

    # -- invariants ------------------------------------------------------------------------
    async def _settle(self) -> None:
        await asyncio.gather(*self.calls, return_exceptions=True)

    async def _drain_observer(self) -> None:
        if self.observer is None:
            return
        client = self.observer.client
        while not client.notifications.empty():
            note = client.notifications.get_nowait()
            if note.get("method") == "task.session.event":
                self.observer.events.append(note["params"])

    @invariant()
    def no_internal_errors(self) -> None:
        STEPS["count"] += 1
        bad = [(m, code) for m, code in self.answers if code not in ALLOWED_CODES.get(m, set())]
        assert not bad, bad

    @invariant()
    def event_ids_strictly_increase(self) -> None:
        if self.observer is None:
            return
        self.run(self._drain_observer())
        ids = [e["id"] for e in self.observer.events if e["id"] is not None]
        self.observer.events = []
        seq = self.seen_ids[-1:] + ids
        assert all(a < b for a, b in itertools.pairwise(seq)), seq
        self.seen_ids += ids

    @invariant()
    def each_turn_ends_once_and_running_means_a_turn(self) -> None:
        if self.gateway is None:
            return
        with sqlite3.connect(self.gateway.state_dir / "gateway.db") as db:
            events = journal_events(db)
            states = dict(db.execute("SELECT id, state FROM sessions").fetchall())
        for sid in self.sessions:
            turns = [e["type"] for e in events if e["session_id"] == sid and e["type"] in ("turn_started",
                                                                                             "turn_ended")]
            # started, ended, started, ended, ... : every turn ends exactly once; only the last may still run
            assert all(t == ("turn_started" if i % 2 == 0 else "turn_ended") for i, t in enumerate(turns)), turns
            if states.get(sid) == "RUNNING":  # a RUNNING session has its agent, which runs the turn
                status = self._call(self.connections[0], "task.session.status", {"session_id": sid})
                assert status is None or status["state"] != "RUNNING" or status["is_agent_running"], status

    @invariant()
    def at_most_one_agent_per_session(self) -> None:
        if self.gateway is None:
            return
        processes = agent_processes(self.tmp / "agent-state")
        with sqlite3.connect(self.gateway.state_dir / "gateway.db") as db:
            running = dict(db.execute("SELECT execution_id, session_id FROM executors WHERE status = 'running'"
                                      ).fetchall())
        owners = [running.get(marker) for marker in processes.values()]
        assert None not in owners, (processes, running)  # no agent outside a running execution
        assert len(owners) == len(set(owners)), (processes, running)  # one per session

    def teardown(self) -> None:
        try:
            if self.gateway is not None:
                for conn in self.connections:
                    self.run(conn.close())
                if self.observer is not None:
                    self.run(self.observer.client.close())
                self.run(self.gateway.stop())
                self.run(self._settle())
                log = "".join(self.gateway.stderr_lines)
                assert "Traceback" not in log, log[-4000:]
                assert agent_processes(self.tmp / "agent-state") == {}
        finally:
            with contextlib.suppress(Exception):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


def test_session_runtime_model() -> None:
    STEPS["count"] = 0
    run_state_machine_as_test(GatewayModel, settings=settings(
        max_examples=6, stateful_step_count=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)))
    assert STEPS["count"] >= 200, f"only {STEPS['count']} steps ran"
