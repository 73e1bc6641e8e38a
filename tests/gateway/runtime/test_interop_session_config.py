"""A session's choices against real third-party agents, pinned by `make interop` and run offline with dummy keys
(their model calls fail; setting up sessions does not): claude-agent-acp and opencode (config options), gemini-cli
(modes and the legacy `models`). Start, choose a mode and a model other than the defaults, `kill -9` the gateway,
restart, resume: the agent itself reports the chosen values again — read from its own answers and updates on the wire
(each agent runs under `acp-gateway record`), not from the gateway's memory — and the session view says so."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.clients.client import GatewayClient
from tests.conftest import wait_until
from tests.gateway_harness import EventLog, GatewayProcess
from tests.third_party import INTEROP, interop_node


@dataclass
class Agent:
    id: str
    script: str  # under .interop/node_modules
    args: list[str]
    env: dict[str, str]
    native: bool
    extra: str = ""  # more profile keys
    home: Path = field(default_factory=Path)


def agents(tmp_path: Path) -> dict[str, Agent]:
    return {
        # Offline, claude-agent-acp's CLI retries api.anthropic.com for ~18 s at each session set-up: a closed local
        # port makes it fail at once. As root, its CLI needs IS_SANDBOX=1 to run with permission bypass at all.
        "claude": Agent("claude", "@agentclientprotocol/claude-agent-acp/dist/index.js", [], {
            "ANTHROPIC_API_KEY": "sk-ant-dummy-interop-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
            "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"}, native=True),
        "opencode": Agent("opencode", "opencode-ai/bin/opencode.exe", ["acp"], {}, native=True),
        "gemini": Agent("gemini", "@google/gemini-cli/bundle/gemini.js", ["--experimental-acp"],
                        {"GEMINI_API_KEY": "dummy-gemini-interop-key"}, native=False),
    }


def profile(agents_dir: Path, agent: Agent, tmp_path: Path) -> Path:
    """The agent's profile, its command run under `acp-gateway record` (its wire, both ways, to a file)."""
    agent.home = tmp_path / f"home-{agent.id}"
    agent.home.mkdir()
    script = INTEROP / agent.script
    command = [str(script)] if script.suffix == ".exe" else [str(interop_node()), str(script)]
    wire = tmp_path / f"{agent.id}.wire.jsonl"
    argv = [sys.executable, "-m", "gateway.cli", "record", "--out", str(wire), "--", *command, *agent.args]
    env = {"HOME": str(agent.home), **agent.env}
    env_toml = ", ".join(f"{k} = {orjson.dumps(v).decode()}" for k, v in env.items())
    (agents_dir / f"{agent.id}.toml").write_text(
        f'id = "{agent.id}"\ncommand = {orjson.dumps(argv).decode()}\nenv = {{ {env_toml} }}\n'
        f"native_session_resume = {str(agent.native).lower()}\n{agent.extra}")
    return wire


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[GatewayProcess, dict[str, Agent], dict[str, Path]]]:
    found = agents(tmp_path)
    for agent in found.values():
        if not (INTEROP / agent.script).exists():
            pytest.fail(f"{agent.id} is not installed: `make interop` (part of `make test`) installs it")
    agents_dir = tmp_path / "agents"
    agents_dir.mkdir()
    (tmp_path / "work").mkdir()
    wires = {a.id: profile(agents_dir, a, tmp_path) for a in found.values()}
    gw = GatewayProcess(tmp_path / "state", agents_dir)
    await gw.start()
    yield gw, found, wires
    await gw.stop()


def other_value(view: dict[str, Any], category: str) -> tuple[str, str]:
    """(the option's id, a value other than its current one) of the option of this category the agent offers: plan
    mode where there is one (a user's most common pick, and one an agent takes in any folder)."""
    option = next(o for o in view["config"]["options"] if o.get("category") == category)
    values = [v["value"] for v in option["options"] if v["value"] != option["currentValue"]]
    return option["id"], "plan" if "plan" in values else next(v for v in values if v not in ("default", "auto"))


def reported(wire: Path) -> list[dict[str, Any]]:
    """What the agent's newest process said: every message it sent after the last `initialize` it was sent."""
    lines = [orjson.loads(line) for line in wire.read_bytes().splitlines() if line.strip()]
    start = max(i for i, e in enumerate(lines) if e.get("dir") == "client_to_agent"
                and e.get("msg", {}).get("method") == "initialize")
    return [e["msg"] for e in lines[start:] if e.get("dir") == "agent_to_client" and "msg" in e]


def says(messages: list[dict[str, Any]], option_id: str, value: str, category: str) -> bool:
    """The agent itself reports `option_id` = `value`: in an answer's or an update's configOptions, or (the mode) in
    its modes or a current_mode_update."""
    for msg in messages:
        body = msg.get("result") if isinstance(msg.get("result"), dict) else (msg.get("params") or {}).get("update")
        if not isinstance(body, dict):
            continue
        if any(o.get("id") == option_id and o.get("currentValue") == value for o in body.get("configOptions") or []):
            return True
        if category == "mode" and ((body.get("modes") or {}).get("currentModeId") == value
                                   or body.get("currentModeId") == value):
            return True
    return False


async def choose_restart_resume(gw: GatewayProcess, agent: str, work: Path,
                                before_crash: Any = None) -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    client = await gw.client()
    view = await client.call("task.session.start", {"agent": agent, "cwd": str(work), "wait_ready": True},
                             timeout=120)
    assert view["is_agent_running"], view["error_message"]
    sid = view["session_id"]
    picks = {category: other_value(view, category) for category in ("model", "mode")}
    await client.call("task.session.set_config_option", {"session_id": sid, "config_id": picks["model"][0],
                                                         "value": picks["model"][1]})
    view = await client.call("task.session.set_mode", {"session_id": sid, "mode_id": picks["mode"][1]})
    assert {o["id"]: o["currentValue"] for o in view["config"]["options"]} | dict(picks.values()) == \
        {o["id"]: o["currentValue"] for o in view["config"]["options"]}
    if before_crash is not None:
        await before_crash(client, sid)
    await client.close()
    await gw.kill9()
    await gw.start()
    client = await gw.client()
    log = EventLog(client)
    await client.call("task.session.subscribe", {"session_id": sid})
    view = await client.call("task.session.resume", {"session_id": sid}, timeout=120)
    assert view["is_agent_running"], view["error_message"]
    restored = await log.wait(lambda e: e["type"] == "session_config" and e["data"]["cause"] == "restore", 30)
    assert restored["data"]["unapplied"] == []
    await client.close()
    return view, picks


def a_turn_cut_short(home: Path) -> Any:
    """A prompt (offline, the agent retries its model until cancelled), cancelled once the agent keeps a transcript
    of it (claude-agent-acp writes it when its CLI takes the prompt, on its own time): the next restore is then a
    real `session/resume`."""
    async def cut(client: GatewayClient, sid: str) -> None:
        acp_id = (await client.call("task.session.get", {"session_id": sid}))["acp_session_id"]
        turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "hello"}))
        await wait_until(lambda: any(home.glob(f".claude/projects/*/{acp_id}.jsonl")), 60, "the agent's transcript")
        await client.call("task.session.cancel_turn", {"session_id": sid})
        assert (await asyncio.wait_for(turn, 60))["stop_reason"] == "cancelled"
    return cut


@pytest.mark.parametrize("agent", ["claude", "opencode"])
async def test_the_agent_reports_the_chosen_mode_and_model_after_a_crash(
        gateway: tuple[GatewayProcess, dict[str, Agent], dict[str, Path]], agent: str, tmp_path: Path) -> None:
    gw, found, wires = gateway
    view, picks = await choose_restart_resume(
        gw, agent, tmp_path / "work", a_turn_cut_short(found[agent].home) if agent == "claude" else None)
    current = {o["id"]: o["currentValue"] for o in view["config"]["options"]}
    said = reported(wires[agent])
    for category, (option_id, value) in picks.items():
        assert current[option_id] == value  # the view says so...
        assert says(said, option_id, value, category), (agent, option_id, value)  # ...because the agent said so
        assert view["config"]["chosen"][option_id] == {"value": value, "by": "user"}
    # How it came back: by session/resume, after which claude still had its mode (not its model) and opencode had
    # neither; only what the agent did not report was set again (in the order of the rules: the model first).
    lines = [orjson.loads(line) for line in wires[agent].read_bytes().splitlines() if line.strip()]
    start = max(i for i, e in enumerate(lines) if e.get("msg", {}).get("method") == "initialize")
    sent = [e["msg"] for e in lines[start:] if e.get("dir") == "client_to_agent" and "method" in e.get("msg", {})]
    again = {"claude": [picks["model"][0]], "opencode": [picks["model"][0], picks["mode"][0]]}[agent]
    assert [m["method"] for m in sent] == ["initialize", "session/resume", *["session/set_config_option"] * len(again)]
    assert [m["params"]["configId"] for m in sent[2:]] == again


async def test_a_legacy_agent_gets_its_mode_and_model_by_set_mode_and_set_model(
        gateway: tuple[GatewayProcess, dict[str, Agent], dict[str, Path]], tmp_path: Path) -> None:
    """gemini-cli: `modes` and the legacy `models`, set by session/set_mode and session/set_model, which answer nothing:
    after the restart (a fresh ACP session, its profile restores none) both calls go out again and succeed."""
    gw, _, wires = gateway
    view, picks = await choose_restart_resume(gw, "gemini", tmp_path / "work")
    assert view["config"]["models"]["currentModelId"] == picks["model"][1]
    assert view["config"]["modes"]["currentModeId"] == picks["mode"][1]
    lines = [orjson.loads(line) for line in wires["gemini"].read_bytes().splitlines() if line.strip()]
    start = max(i for i, e in enumerate(lines) if e.get("msg", {}).get("method") == "initialize")
    asked = {e["msg"]["id"]: e["msg"] for e in lines[start:] if e.get("dir") == "client_to_agent"
             and e["msg"].get("method") in ("session/set_model", "session/set_mode")}
    answered = [e["msg"] for e in lines[start:] if e.get("dir") == "agent_to_client" and e["msg"].get("id") in asked]
    assert sorted(m["method"] for m in asked.values()) == ["session/set_mode", "session/set_model"]
    assert {(asked[a["id"]]["params"].get("modelId") or asked[a["id"]]["params"].get("modeId")) for a in answered
            if "result" in a} == {picks["model"][1], picks["mode"][1]}
