"""An agent's sign-in needs, known before its first prompt (issue 45, item 1): the rules of `auth_state` (AS-1…5) and
of an error that asks for a sign-in, the variables a registry agent's upstream documents; then a real gateway whose
reference agents behave as claude-agent-acp does (sessions made without a key, prompts refused `auth_required`), and
the real claude-agent-acp, started with no key, probed as `agents add` and `doctor` probe it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.profiles import AgentProfile
from agents.registry.credentials import TABLE, documented, keep_vars, required_vars
from agents.registry.probe import auth_state as probed_state
from agents.registry.probe import next_steps, probe
from gateway.clients.client import RpcCallError
from gateway.runtime.sign_in_rules import NEEDS_SIGN_IN, SIGNED_IN, AuthFacts, asks_sign_in, auth_state
from tests.gateway_harness import GatewayProcess, agent_said, reference_profile, running, subscribed
from tests.third_party import INTEROP, interop_node

DUMMY = "dummy-prompt-key-0123456789"
KEY = "REF_API_KEY"

# One row per rule of gateway.runtime.sign_in_rules.auth_state.
STATES: list[tuple[str, AuthFacts, str, str | None]] = [
    ("asked since: even with the key set", AuthFacts((KEY,), (KEY,), NEEDS_SIGN_IN, "signed_in"), "AS-1",
     NEEDS_SIGN_IN),
    ("its key set", AuthFacts((KEY,), (KEY,), None, None), "AS-2", SIGNED_IN),
    ("a key it offered a method for, set", AuthFacts((), (KEY,), None, None), "AS-2", SIGNED_IN),
    ("signed in with a method, no key", AuthFacts((KEY,), (), SIGNED_IN, None), "AS-3", SIGNED_IN),
    ("a known key, not set: the probe's word is not enough", AuthFacts((KEY,), (), None, "signed_in"), "AS-4",
     NEEDS_SIGN_IN),
    ("nothing known: the probe's word", AuthFacts((), (), None, "signed_in"), "AS-5", "signed_in"),
    ("nothing known, no probe", AuthFacts((), (), None, None), "AS-5", None),
]


@pytest.mark.unit
@pytest.mark.parametrize(("name", "facts", "rule", "state"), STATES, ids=[r[0] for r in STATES])
def test_whether_an_owners_agent_is_signed_in(name: str, facts: AuthFacts, rule: str, state: str | None) -> None:
    assert auth_state(facts) == (rule, state)


@pytest.mark.unit
@pytest.mark.parametrize(("code", "message", "asks"), [
    (-32000, "Sign in with an API key or a Console account to use this integration.", True),  # claude-agent-acp's
    (-32603, "Internal error: Authentication required", True),  # the words, under another code
    (-32603, "Internal error", False),
    (None, "session/new: authentication required (-32000)", True),  # a restore's account of its failure
])
def test_which_errors_ask_for_a_sign_in(code: int | None, message: str, asks: bool) -> None:
    assert asks_sign_in(code, message) is asks


@pytest.mark.unit
def test_the_registry_credentials_name_their_upstream_and_only_count_for_installs(tmp_path: Path) -> None:
    raw = orjson.loads(TABLE.read_bytes())
    snapshot = {a["id"] for a in orjson.loads((TABLE.parent / "snapshot.json").read_bytes())["agents"]}
    for agent_id, entry in raw.items():
        if agent_id.startswith("_"):
            continue
        assert agent_id in snapshot, agent_id  # a registry id
        assert entry["vars"] and ("README" in entry["source"] or ".ts" in entry["source"]), agent_id  # who says so
    assert documented()["claude-acp"] == ["ANTHROPIC_API_KEY"]
    installed = AgentProfile(id="claude-acp", command=["claude-agent-acp"], install=str(tmp_path))
    assert required_vars(installed) == keep_vars(installed) == ["ANTHROPIC_API_KEY"]
    codex = AgentProfile(id="codex-acp", command=["codex-acp"], install=str(tmp_path))
    assert required_vars(codex) == ["OPENAI_API_KEY", "CODEX_API_KEY"] and keep_vars(codex) == ["OPENAI_API_KEY"]
    # A profile of the same id written by hand is the operator's: only its own sign_in_vars count.
    assert required_vars(AgentProfile(id="claude-acp", command=["x"])) == []
    own = AgentProfile(id="copilot", command=["copilot"], sign_in_vars=["COPILOT_GITHUB_TOKEN"])
    assert required_vars(own) == keep_vars(own) == ["COPILOT_GITHUB_TOKEN"]


@pytest.mark.unit
def test_a_probe_that_got_a_session_without_the_key_says_to_set_it() -> None:
    found: dict[str, Any] = {"initialize": {"status": "ok"}, "session_new": {"status": "ok"},
                             "auth_methods": [], "missing_vars": ["ANTHROPIC_API_KEY"]}
    assert probed_state(found) == "needs_sign_in"
    [step] = next_steps("claude-acp", found)
    assert step.startswith("needs sign-in: set ANTHROPIC_API_KEY") and "profile-env ANTHROPIC_API_KEY=-" in step
    assert probed_state({**found, "missing_vars": []}) == "signed_in"
    assert next_steps("claude-acp", {**found, "missing_vars": []})[0].startswith("ready:")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    # As claude-agent-acp: sessions without a key, prompts refused until it is set; the profile names the key.
    reference_profile(agents, tmp_path / "agent-state", "keyed", "--prompt-key", KEY,
                      extra=f'sign_in_vars = ["{KEY}"]\n')
    # The same agent with nothing known of its key before it refuses a prompt, but an env_var method it offers.
    reference_profile(agents, tmp_path / "agent-state", "late", "--prompt-key", KEY, "--auth-env", KEY)
    # The real claude-agent-acp, as `agents add claude-acp` writes its profile (an install): never started here.
    claude = [str(interop_node()), str(INTEROP / "@agentclientprotocol" / "claude-agent-acp" / "dist" / "index.js")]
    (agents / "claude-acp.toml").write_text(f'id = "claude-acp"\ncommand = {orjson.dumps(claude).decode()}\n'
                                            f'version = "0.101.0"\ninstall = "{tmp_path / "install"}"\n')
    gw = GatewayProcess(tmp_path / "state", agents)
    async with running(gw):
        yield gw


def agents_of(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["id"]: a for a in info["agents"]}


async def test_a_known_key_is_asked_for_before_the_first_prompt(gateway: GatewayProcess, tmp_path: Path) -> None:
    client, log = await subscribed(gateway)
    shown = agents_of(await client.call("gateway.info", {}))
    assert (shown["keyed"]["auth_state"], shown["keyed"]["sign_in_vars"]) == ("needs_sign_in", [KEY])
    assert (shown["claude-acp"]["auth_state"], shown["claude-acp"]["sign_in_vars"]) == (
        "needs_sign_in", ["ANTHROPIC_API_KEY"])
    assert (shown["late"]["auth_state"], shown["late"]["sign_in_vars"]) == (None, [])  # nothing known yet
    view = await client.call("task.session.start", {"agent": "keyed", "cwd": str(tmp_path / "work"),
                                                    "wait_ready": True})
    sid = view["session_id"]
    # It made a session without the key; the gateway stopped it there: the session asks, before any prompt.
    assert (view["state"], view["is_agent_running"]) == ("WAITING_FOR_INPUT", False)
    methods = {m["id"]: m for m in view["config"]["auth"]["methods"]}
    assert methods["profile-env"]["vars"] == [KEY]
    assert f"acp-gateway sign-in {sid} profile-env {KEY}=-" in view["error_message"]
    asked = await log.wait(lambda e: e["type"] == "session_config" and e["data"].get("cause") == "auth")
    assert asked["session_id"] == sid
    warning = await log.wait(lambda e: e["type"] == "session_message" and e["data"]["level"] == "warning")
    assert KEY in warning["data"]["text"] and "acp-gateway sign-in" in warning["data"]["text"]
    signed = await client.call("task.session.authenticate", {"session_id": sid, "method_id": "profile-env",
                                                             "values": {KEY: DUMMY}})
    assert (signed["is_agent_running"], signed["config"]["auth"]) == (True, None)
    said = await agent_said(gateway, gateway.token, sid, "/sh echo key=$REF_API_KEY")  # it has the key now
    assert "key=[secret]" in said and DUMMY not in said
    shown = agents_of(await client.call("gateway.info", {}))
    assert shown["keyed"]["auth_state"] == "signed_in"  # AS-2: the key is kept for this owner
    await client.call("task.session.logout", {"session_id": sid})
    assert agents_of(await client.call("gateway.info", {}))["keyed"]["auth_state"] == "needs_sign_in"
    for where in (orjson.dumps(log.events), "".join(gateway.stderr_lines).encode()):
        assert DUMMY.encode() not in where
    await client.close()


async def test_a_prompt_refused_auth_required_puts_the_session_into_its_sign_in(gateway: GatewayProcess,
                                                                               tmp_path: Path) -> None:
    client, log = await subscribed(gateway)
    view = await client.call("task.session.start", {"agent": "late", "cwd": str(tmp_path / "work"),
                                                    "wait_ready": True})
    sid = view["session_id"]
    assert view["is_agent_running"] and view["config"]["auth"] is None
    # Its initialize offered an env_var method: the variable is named before any prompt.
    assert agents_of(await client.call("gateway.info", {}))["late"]["sign_in_vars"] == [KEY]
    with pytest.raises(RpcCallError) as refused:
        await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello"})
    assert refused.value.code == -32015
    assert f"acp-gateway sign-in {sid} reference-env {KEY}=-" in refused.value.message
    status = await client.call("task.session.status", {"session_id": sid})
    assert (status["state"], status["is_agent_running"]) == ("WAITING_FOR_INPUT", False)
    assert [m["id"] for m in status["config"]["auth"]["methods"]] == ["reference-login", "reference-env"]
    assert "Authentication required" in status["config"]["auth"]["reason"]
    await log.wait(lambda e: e["type"] == "session_config" and e["data"].get("cause") == "auth")
    warning = await log.wait(lambda e: e["type"] == "session_message" and e["data"]["level"] == "warning")
    assert KEY in warning["data"]["text"]
    assert agents_of(await client.call("gateway.info", {}))["late"]["auth_state"] == "needs_sign_in"  # AS-1
    signed = await client.call("task.session.authenticate", {"session_id": sid, "method_id": "reference-env",
                                                             "values": {KEY: DUMMY}})
    assert signed["is_agent_running"], signed["error_message"]
    answer = await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello again"})
    assert answer["stop_reason"] == "end_turn"
    assert agents_of(await client.call("gateway.info", {}))["late"]["auth_state"] == "signed_in"
    await client.close()


async def test_the_real_claude_agent_without_its_key_needs_a_sign_in(tmp_path: Path) -> None:
    script = INTEROP / "@agentclientprotocol" / "claude-agent-acp" / "dist" / "index.js"
    if not script.exists():
        pytest.fail("claude-agent-acp is not installed: `make interop` (part of `make test`) installs it")
    (tmp_path / "home").mkdir()
    profile = AgentProfile(id="claude-acp", command=[str(interop_node()), str(script)], install=str(tmp_path))
    # Offline: a closed local port fails its CLI's calls at once; as root its CLI needs IS_SANDBOX=1.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
           "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"}
    found = await probe(profile, env, timeout=60)
    assert found["session_new"]["status"] == "ok"  # it makes a session without a key: the probe alone said "ready"
    assert (found["auth_state"], found["sign_in_vars"]) == ("needs_sign_in", ["ANTHROPIC_API_KEY"])
    assert found["next"][0].startswith("needs sign-in: set ANTHROPIC_API_KEY")
    keyed = await probe(profile, {**env, "ANTHROPIC_API_KEY": "sk-ant-dummy-0123456789"}, timeout=60)
    assert keyed["auth_state"] == "signed_in" and keyed["next"][0].startswith("ready:")


def test_what_an_agent_said_of_a_sign_in_outlives_a_restart(tmp_path: Path) -> None:
    """AS-1/AS-3 facts are kept in the state directory: a person the agent signed in with its own login is not asked
    again after a gateway restart, and the file holds names only, owner-readable."""
    from gateway.runtime.sign_in import AuthSeen

    seen = AuthSeen(tmp_path)
    seen.said("alice", "claude-acp", SIGNED_IN)
    seen.said("bob", "claude-acp", NEEDS_SIGN_IN)
    again = AuthSeen(tmp_path)  # the next gateway process
    assert again.of("alice", "claude-acp") == SIGNED_IN
    assert again.of("bob", "claude-acp") == NEEDS_SIGN_IN
    again.forget("alice", "claude-acp")
    assert AuthSeen(tmp_path).of("alice", "claude-acp") is None
    assert (tmp_path / AuthSeen.FILE).stat().st_mode & 0o777 == 0o600
