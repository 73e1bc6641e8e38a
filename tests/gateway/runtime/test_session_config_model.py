"""A session's configuration, model-based: hypothesis drives a real gateway and a reference agent that forgets its
configuration at every restore, with changes from a frontend (valid and refused, set_config_option and set_mode, on a
live session and on a stored one), the agent changing its own mode mid-turn, and restarts (SIGTERM and kill -9) in
any order. After every step the view's choices are the model's and a live agent is where they say; and whenever the
agent is asked, it reports exactly the model's values itself."""

from __future__ import annotations

import asyncio
import collections
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from gateway.clients.client import GatewayClient, RpcCallError
from tests.gateway_harness import EventLog, GatewayProcess, end_model_run, reference_profile

DOMAINS: dict[str, list[Any]] = {"mode": ["ask", "code", "plan"], "model": ["ref-small", "ref-large"],
                                 "effort": ["low", "medium", "high"], "verbose": [False, True]}
DEFAULTS = {"mode": "code", "model": "ref-small", "effort": "medium", "verbose": False}
OPTIONS = list(DOMAINS)
RAN: collections.Counter[str] = collections.Counter()
STEPS = {"count": 0}


class ConfigModel(RuleBasedStateMachine):
    """The model: what was chosen (and by whom), and what the agent runs with (its defaults after every restore,
    then the choices re-applied)."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = Path(tempfile.mkdtemp(prefix="acp-config-model-"))
        self.gateway: GatewayProcess | None = None
        self.client: GatewayClient | None = None
        self.log: EventLog | None = None  # every event of the session on the current connection
        self.turns = 0
        self.session = ""
        self.chosen: dict[str, tuple[Any, str]] = {}
        self.live = True

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 60))

    def call(self, method: str, params: dict[str, Any]) -> Any:
        assert self.client is not None
        return self.run(self.client.call(method, params))

    def current(self) -> dict[str, Any]:
        return {**DEFAULTS, **{k: v for k, (v, _) in self.chosen.items()}}

    @initialize()
    def boot(self) -> None:
        for name in ("agents", "work"):
            (self.tmp / name).mkdir()
        reference_profile(self.tmp / "agents", self.tmp / "agent-state", "ref", "--forget-config")
        (self.tmp / "gw.toml").write_text('default_agent = "ref"\nstop_grace = 0.5\n')
        self.gateway = GatewayProcess(self.tmp / "state", self.tmp / "agents", config=self.tmp / "gw.toml")
        self.run(self.gateway.start())
        self.client = self.run(self.gateway.client())
        self.session = self.call("task.session.start", {"cwd": str(self.tmp / "work"), "wait_ready": True})[
            "session_id"]
        self._subscribe()

    def _subscribe(self) -> None:
        assert self.client is not None
        self.log = EventLog(self.client)
        self.turns = 0  # turns prompted on this connection's subscription
        self.call("task.session.subscribe", {"session_id": self.session})

    def _prompt(self, text: str) -> list[dict[str, Any]]:
        """Prompt, and the events of that turn (each turn has one turn_ended: the n-th is this one's)."""
        log = self.log
        assert log is not None
        self.call("task.session.prompt", {"session_id": self.session, "prompt": text})
        self.turns += 1
        self.run(log.wait(lambda e: len(log.of_type("turn_ended")) >= self.turns))
        ends = [i for i, e in enumerate(log.events) if e["type"] == "turn_ended"]
        return log.events[(ends[-2] + 1 if len(ends) > 1 else 0):ends[-1]]

    @rule(option=st.sampled_from(OPTIONS), index=st.integers(0, 2))
    def change(self, option: str, index: int) -> None:
        """A frontend's change of an option to one of its values."""
        value = DOMAINS[option][index % len(DOMAINS[option])]
        self.call("task.session.set_config_option", {"session_id": self.session, "config_id": option,
                                                     "value": value})
        self.chosen[option] = (value, "user")
        self.live = True  # a stored session was resumed for it
        RAN["change"] += 1

    @rule(mode=st.sampled_from(DOMAINS["mode"]))
    def change_the_mode(self, mode: str) -> None:
        self.call("task.session.set_mode", {"session_id": self.session, "mode_id": mode})
        self.chosen["mode"] = (mode, "user")
        self.live = True
        RAN["change_the_mode"] += 1

    @rule(option=st.sampled_from(OPTIONS))
    def change_refused(self, option: str) -> None:
        """A value the agent does not offer, or of the wrong type: refused up front, nothing changes (a stored session
        is not even resumed for it)."""
        try:
            self.call("task.session.set_config_option", {"session_id": self.session, "config_id": option,
                                                         "value": "yes" if option == "verbose" else "nonsense"})
        except RpcCallError as err:
            assert err.code == -32017, err
        else:
            raise AssertionError(f"{option} = nonsense was taken")
        RAN["refused"] += 1

    @rule(mode=st.sampled_from(DOMAINS["mode"]))
    def agent_changes_its_mode(self, mode: str) -> None:
        self._prompt(f"/mode {mode}")
        if mode != self.current()["mode"]:
            self.chosen["mode"] = (mode, "agent")
        self.live = True
        RAN["agent"] += 1

    @rule(kill=st.booleans(), resume=st.booleans())
    def restart(self, kill: bool, resume: bool) -> None:
        assert self.gateway is not None and self.client is not None
        self.run(self.client.close())
        self.run(self.gateway.kill9() if kill else self.gateway.stop())
        self.run(self.gateway.start())
        self.client = self.run(self.gateway.client())
        self._subscribe()
        self.live = False
        if resume:
            assert self.log is not None
            self.call("task.session.resume", {"session_id": self.session})
            event = self.run(self.log.wait(lambda e: e["type"] == "session_config"
                                           and e["data"]["cause"] == "restore"))
            assert event["data"]["unapplied"] == []
            self.live = True
        RAN["restart"] += 1

    @rule()
    def ask_the_agent(self) -> None:
        """The agent's own word: a prompt (which resumes a stored session) makes it say its values."""
        said = next(e for e in self._prompt("/config") if e["type"] == "session_update" and "config:" in str(
            e["data"]["update"].get("content", {}).get("text", "")))
        values = self.current()
        assert said["data"]["update"]["content"]["text"] == "config: " + " ".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items())
        self.live = True
        RAN["ask"] += 1

    @invariant()
    def the_view_is_the_model(self) -> None:
        if self.client is None:
            return
        STEPS["count"] += 1
        view = self.call("task.session.get", {"session_id": self.session})
        assert {k: (c["value"], c["by"]) for k, c in view["config"]["chosen"].items()} == self.chosen
        assert view["is_agent_running"] is self.live
        if self.live:
            assert {o["id"]: o["currentValue"] for o in view["config"]["options"]} == self.current()

    def teardown(self) -> None:
        end_model_run(self.loop, self.gateway, [self.client.close()] if self.client is not None else [])


def test_session_config_model() -> None:
    STEPS["count"] = 0
    RAN.clear()
    # Derandomized: hypothesis's swarm testing leaves some rules out of whole examples, and which ones varies from run
    # to run; the seeded run is one that exercises every rule, every time (asserted below).
    run_state_machine_as_test(ConfigModel, settings=settings(
        max_examples=8, stateful_step_count=15, deadline=None, database=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))
    assert STEPS["count"] >= 80, f"only {STEPS['count']} steps ran"
    assert {"change", "change_the_mode", "refused", "agent", "restart", "ask"} <= set(RAN), RAN
