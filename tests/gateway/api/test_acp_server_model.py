"""`/acp`, model-based: hypothesis drives a real gateway with up to three ACP clients on one session that connect,
load, resume, prompt, start a hanging turn (and prompt while it runs), cancel it, close, disconnect at any point, and
restart the gateway (SIGTERM and kill -9). After every step, each client attached to the session has received
exactly the conversation the model says it is owed since it attached, in order, nothing twice; and no answer was
an error the rules do not allow."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
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

from gateway.clients.client import GatewayClient
from tests.acp_wire import AcpWire, AcpWireError, is_update
from tests.gateway_harness import TOKEN, EventLog, GatewayProcess, end_model_run, reference_profile

STEPS = {"count": 0}
RAN: collections.Counter[str] = collections.Counter()  # rules that did something, over all examples
HANGING = ("agent_message_chunk", "hanging until cancelled")
Said = tuple[str, str]


@dataclass
class Client:
    wire: AcpWire
    attached: bool = False
    start: int = 0  # the frame index from which it is owed `owed`
    owed: list[Said] = field(default_factory=list)


class AcpModel(RuleBasedStateMachine):
    """The model: the session's conversation as a full session/load replays it, what each attached client is owed,
    and whether a turn runs (and whose prompt it answers)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = Path(tempfile.mkdtemp(prefix="acp-model-"))
        self.gateway: GatewayProcess | None = None
        self.clients: list[Client] = []
        self.conversation: list[Said] = []
        self.session = ""
        self.hang: asyncio.Task[Any] | None = None  # the running turn's prompt, while its client is connected
        self.running = False
        self.turns_ended = 0
        self.observer: EventLog | None = None
        self.rpc: GatewayClient | None = None
        self.errors: list[tuple[str, Any]] = []
        self.n = 0

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 60))

    @property
    def cwd(self) -> str:
        return str(self.tmp / "work")

    # -- set-up ---------------------------------------------------------------------------------------------------
    @initialize()
    def boot(self) -> None:
        for name in ("agents", "work"):
            (self.tmp / name).mkdir()
        reference_profile(self.tmp / "agents", self.tmp / "agent-state", "ref")
        (self.tmp / "gw.toml").write_text('default_agent = "ref"\ncancel_grace = 2.0\nstop_grace = 0.5\n')
        self.gateway = GatewayProcess(self.tmp / "state", self.tmp / "agents", config=self.tmp / "gw.toml")
        self.run(self.gateway.start())
        creator = self.run(AcpWire.connect(self.gateway.port, TOKEN))
        self.session = self.run(creator.call("session/new", {"cwd": self.cwd, "mcpServers": []}))["sessionId"]
        self.clients.append(Client(creator, attached=True, start=len(creator.frames)))
        self.run(self._observe())

    async def _observe(self) -> None:
        """A /rpc subscriber counts turn ends (ACP has no event for a turn its client did not start)."""
        assert self.gateway is not None
        self.rpc = await self.gateway.client()
        self.observer = EventLog(self.rpc)
        await self.rpc.call("task.session.subscribe", {"session_id": self.session, "since": 0})
        await self.observer.wait(lambda e: e["type"] == "caught_up")
        self.turns_ended = len(self.observer.of_type("turn_ended"))

    async def _turn_ended(self) -> None:
        assert self.observer is not None
        want = self.turns_ended + 1
        await self.observer.wait(lambda e: len(self.observer.of_type("turn_ended")) >= want)  # type: ignore[union-attr]
        self.turns_ended = want

    def _said(self, prompter: Client | None, said: list[Said]) -> None:
        """The session said this: part of the conversation, owed to every attached client (a prompt's own user
        message is not echoed to the client that sent it)."""
        self.conversation += said
        for client in self.clients:
            if client.attached:
                client.owed += [s for s in said if not (client is prompter and s[0] == "user_message_chunk")]

    def attached(self) -> bool:
        return any(c.attached for c in self.clients)

    def _pick(self, i: int, attached: bool | None = None) -> Client | None:
        pool = [c for c in self.clients if attached is None or c.attached == attached]
        return pool[i % len(pool)] if pool else None

    async def _call(self, client: Client, method: str, params: dict[str, Any], allowed: set[int]) -> Any:
        try:
            return await client.wire.call(method, params)
        except AcpWireError as err:
            self.errors.append((method, err.code) if err.code not in allowed else ("ok", None))
            return err

    # -- rules ----------------------------------------------------------------------------------------------------
    @precondition(lambda self: len(self.clients) < 3)
    @rule()
    def connect(self) -> None:
        assert self.gateway is not None
        self.clients.append(Client(self.run(AcpWire.connect(self.gateway.port, TOKEN))))
        RAN["connect"] += 1

    @precondition(lambda self: len(self.clients) > 1)
    @rule(i=st.integers(0, 2))
    def disconnect(self, i: int) -> None:
        client = self.clients.pop(i % len(self.clients))
        if self.hang is not None and client.wire is getattr(self.hang, "wire", None):
            self._forget_hang()  # its turn goes on without it; nobody is left to read the prompt's answer
        self.run(client.wire.close())
        RAN["disconnect"] += 1

    @rule(i=st.integers(0, 2))
    def load(self, i: int) -> None:
        client = self._pick(i)
        assert client is not None
        mark = len(client.wire.frames)
        answer = self.run(client.wire.request("session/load", {"sessionId": self.session, "cwd": self.cwd,
                                                               "mcpServers": []}))
        assert answer.get("result", {}).get("modes", {}).get("currentModeId") == "code", answer  # what it offers
        before = client.wire.frames[mark:client.wire.frames.index(answer)]
        assert [(f["params"]["update"]["sessionUpdate"], f["params"]["update"]["content"]["text"]) for f in before
                if f.get("method") == "session/update" and "content" in f["params"]["update"]] == self.conversation
        client.attached, client.start, client.owed = True, mark, list(self.conversation)
        RAN["load"] += 1

    @rule(i=st.integers(0, 2))
    def resume(self, i: int) -> None:
        client = self._pick(i)
        assert client is not None
        mark = len(client.wire.frames)
        self.run(client.wire.call("session/resume", {"sessionId": self.session, "cwd": self.cwd, "mcpServers": []}))
        client.attached, client.start, client.owed = True, mark, []
        RAN["resume"] += 1

    @precondition(lambda self: not self.running and self.attached())
    @rule(i=st.integers(0, 2))
    def prompt(self, i: int) -> None:
        client = self._pick(i, attached=True)
        if client is None:
            return
        self.n += 1
        text = f"message {self.n}"
        answer = self.run(self._call(client, "session/prompt", {"sessionId": self.session,
                                                                "prompt": [{"type": "text", "text": text}]}, set()))
        assert answer == {"stopReason": "end_turn"}, answer
        self.turns_ended += 1
        self._said(client, [("user_message_chunk", text), ("agent_message_chunk", f"echo: {text}")])
        RAN["prompt"] += 1

    @precondition(lambda self: not self.running and self.attached())
    @rule(i=st.integers(0, 2), j=st.integers(0, 2))
    def hang_turn(self, i: int, j: int) -> None:
        client = self._pick(i, attached=True)
        if client is None:
            return
        mark = len(client.wire.frames)
        task = self.loop.create_task(client.wire.call("session/prompt", {"sessionId": self.session,
                                                                          "prompt": [{"type": "text",
                                                                                      "text": "/hang"}]}))
        task.wire = client.wire  # type: ignore[attr-defined]
        self.run(client.wire.wait_for(is_update(*HANGING), start=mark))
        self.hang, self.running = task, True
        self._said(client, [("user_message_chunk", "/hang"), HANGING])
        RAN["hang_turn"] += 1
        # While it runs, a prompt from any client of the session (its own included) is refused, and changes nothing.
        other = self._pick(j, attached=True)
        assert other is not None
        busy = self.run(self._call(other, "session/prompt", {"sessionId": self.session,
                                                             "prompt": [{"type": "text", "text": "busy?"}]}, {-32010}))
        assert isinstance(busy, AcpWireError) and busy.code == -32010, busy

    @precondition(lambda self: self.running and self.attached())
    @rule(i=st.integers(0, 2))
    def cancel(self, i: int) -> None:
        client = self._pick(i, attached=True)
        if client is None:
            return
        self.run(client.wire.notify("session/cancel", {"sessionId": self.session}))
        self._running_turn_ends()
        RAN["cancel"] += 1

    def _forget_hang(self) -> None:
        if self.hang is not None:
            self.hang.cancel()
            self.loop.run_until_complete(asyncio.gather(self.hang, return_exceptions=True))
        self.hang = None

    def _running_turn_ends(self) -> None:
        if self.hang is not None:
            assert self.run(self.hang) == {"stopReason": "cancelled"}
        self.run(self._turn_ended())
        self.hang, self.running = None, False

    @precondition(lambda self: self.attached())
    @rule(i=st.integers(0, 2))
    def close(self, i: int) -> None:
        client = self._pick(i, attached=True)
        if client is None:
            return
        own_turn = self.hang is not None and client.wire is getattr(self.hang, "wire", None)
        assert self.run(client.wire.call("session/close", {"sessionId": self.session})) == {}
        client.attached = False
        if own_turn:  # the turn it started ends with it
            self._running_turn_ends()
        RAN["close"] += 1

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        assert self.gateway is not None and self.rpc is not None
        for client in self.clients:
            self.run(client.wire.close())
        self.run(self.rpc.close())
        self.run(self.gateway.kill9() if kill else self.gateway.stop())
        self._forget_hang()
        self.running, self.clients = False, []
        self.run(self.gateway.start())
        self.clients.append(Client(self.run(AcpWire.connect(self.gateway.port, TOKEN))))
        self.run(self._observe())
        RAN["restart"] += 1

    # -- invariants -----------------------------------------------------------------------------------------------
    @invariant()
    def every_attached_client_has_exactly_what_it_is_owed(self) -> None:
        STEPS["count"] += 1
        for client in self.clients:
            if not client.attached:
                continue
            wire, start, owed = client.wire, client.start, client.owed
            with contextlib.suppress(TimeoutError):
                self.run(wire.settle(lambda: len(wire.texts(start=start)) >= len(owed), timeout=10))  # noqa: B023
            assert wire.texts(start=start) == owed

    @invariant()
    def no_error_the_rules_do_not_allow(self) -> None:
        bad = [e for e in self.errors if e[0] != "ok"]
        assert not bad, bad

    def teardown(self) -> None:
        self._forget_hang()
        end_model_run(self.loop, self.gateway, [*(client.wire.close() for client in self.clients),
                                                *([self.rpc.close()] if self.rpc is not None else [])])


def test_acp_clients_model() -> None:
    STEPS["count"] = 0
    RAN.clear()
    # Derandomized: hypothesis's swarm testing leaves some rules out of whole examples, and which ones varies from run
    # to run (a run without `resume` failed the assertion below); the seeded run exercises every rule asserted.
    run_state_machine_as_test(AcpModel, settings=settings(
        max_examples=8, stateful_step_count=30, deadline=None, database=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))
    assert STEPS["count"] >= 120, f"only {STEPS['count']} steps ran"
    # The rules every run must have exercised (the others, cancel and close among them, run in most; a run that
    # missed one is not a failure of the gateway).
    assert {"load", "resume", "prompt", "hang_turn", "restart"} <= set(RAN), RAN
