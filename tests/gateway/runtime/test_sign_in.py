"""Signing an agent in: the methods as people see them, what an answer may carry and whether a sign-in goes ahead
(acp.auth and gateway.runtime.sign_in_rules, by table), then a real gateway whose agent answers auth_required — the
session waits for a sign-in instead of failing, an env_var method's value is kept write-only and given to the agent
at every launch, an agent method is sent as `authenticate`, a failing login leaves the session asking."""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp.auth import describe_methods, sign_in_refusal
from acp.models import AuthMethod
from gateway.clients.client import RpcCallError
from gateway.runtime.sign_in_rules import SignInFacts, SignInRefused, login_failure, sign_in_decision
from tests.gateway_harness import GatewayProcess, agent_said, metrics_text, reference_profile, running, subscribed

DUMMY = "dummy-sign-in-key-0123456789"

ADVERTISED = [AuthMethod.model_validate(m) for m in [
    {"id": "login", "name": "Log in", "description": "with the vendor"},
    {"id": "key", "name": "API key", "type": "env_var", "vars": [{"name": "VENDOR_KEY"}]},
    {"id": "tui", "name": "Terminal", "type": "terminal", "args": ["--login"], "env": {"X": "1"}},
]]


def test_methods_as_people_see_them() -> None:
    assert describe_methods(ADVERTISED) == [
        {"id": "login", "name": "Log in", "description": "with the vendor", "kind": "agent"},
        {"id": "key", "name": "API key", "description": None, "kind": "env_var", "vars": ["VENDOR_KEY"]},
        {"id": "tui", "name": "Terminal", "description": None, "kind": "terminal", "args": ["--login"],
         "env": {"X": "1"}},
    ]


METHODS = describe_methods(ADVERTISED)
REFUSALS: list[tuple[str, dict[str, str] | None, str | None]] = [
    ("login", None, None),
    ("key", {"VENDOR_KEY": "k"}, None),
    ("nope", None, "method_id"),
    ("key", None, "values"),
    ("key", {"VENDOR_KEY": ""}, "values"),
    ("key", {"VENDOR_KEY": "k", "PATH": "/evil"}, "values"),  # only the method's own variables
    ("login", {"X": "1"}, "values"),
]


@pytest.mark.parametrize(("method_id", "values", "field"), REFUSALS)
def test_what_a_sign_in_may_carry(method_id: str, values: dict[str, str] | None, field: str | None) -> None:
    refused = sign_in_refusal(METHODS, method_id, values)
    assert (refused[0] if refused else None) == field


def facts(method_id: str, values: dict[str, str] | None = None, *, running: bool = False, asked: bool = True,
          confined: bool = False, methods: list[dict[str, Any]] | None = None) -> SignInFacts:
    auth = {"methods": METHODS if methods is None else methods, "reason": "auth_required"} if asked else None
    return SignInFacts("s-1", "vendor", running, auth, method_id, values, confined)


ODD = {"id": "odd", "name": "Odd", "kind": "carrier_pigeon"}
LOADS = {"id": "key", "name": "k", "kind": "env_var", "vars": ["VENDOR_KEY", "LD_PRELOAD"]}
LOADING = {"VENDOR_KEY": "k", "LD_PRELOAD": "/x.so"}
# One row per rule of gateway.runtime.sign_in_rules (SI-1…5), and the methods that go ahead.
DECISIONS: list[tuple[str, SignInFacts, str | None, str | None]] = [
    # name, the facts -> the rule that refuses (None: it goes ahead), the field at fault
    ("SI-1 the agent is running", facts("login", running=True), "SI-1", "method_id"),
    ("SI-2 no sign-in asked", facts("login", asked=False), "SI-2", "method_id"),
    ("SI-3 a method not offered", facts("nope"), "SI-3", "method_id"),
    ("SI-3 values a method does not take", facts("login", {"X": "1"}), "SI-3", "values"),
    ("SI-4 an env_var method's loading variable, unconfined", facts("key", LOADING, methods=[LOADS]), "SI-4", "values"),
    ("SI-4 an env_var method's loading variable, confined", facts("key", LOADING, confined=True, methods=[LOADS]),
     None, None),
    ("SI-4 a terminal method's loading env, unconfined", facts("tui", methods=[
        {"id": "tui", "name": "t", "kind": "terminal", "args": [], "env": {"LD_PRELOAD": "/x.so"}}]), "SI-4", "values"),
    ("SI-4 a terminal method's loading env, confined", facts("tui", confined=True, methods=[
        {"id": "tui", "name": "t", "kind": "terminal", "args": [], "env": {"LD_PRELOAD": "/x.so"}}]), None, None),
    ("SI-5 a kind the gateway does not know", facts("odd", methods=[ODD]), "SI-5", "method_id"),
    ("an agent method", facts("login"), None, None),
    ("an env_var method", facts("key", {"VENDOR_KEY": "k"}), None, None),
    ("a terminal method", facts("tui"), None, None),
]


@pytest.mark.unit
@pytest.mark.parametrize(("name", "given", "rule", "field"), DECISIONS, ids=[r[0] for r in DECISIONS])
def test_whether_a_sign_in_goes_ahead(name: str, given: SignInFacts, rule: str | None, field: str | None) -> None:
    decided = sign_in_decision(given)
    if rule is None:
        assert not isinstance(decided, SignInRefused)
        assert decided["id"] == given.method_id
    else:
        assert isinstance(decided, SignInRefused)
        assert (decided.rule, decided.field) == (rule, field)
        assert "s-1" in decided.message or "gateway does not know" in decided.message


@pytest.mark.unit
@pytest.mark.parametrize(("status", "said"), [
    ({"exitCode": 0}, None),
    ({"exitCode": 2}, "the sign-in of agent 'vendor' (Terminal) ended with exit code 2: "),
    ({"exitCode": None, "signal": "SIGKILL"},
     "the sign-in of agent 'vendor' (Terminal) ended with killed by SIGKILL: "),
])
def test_what_a_failed_login_says(status: dict[str, Any], said: str | None) -> None:  # SI-6
    failed = login_failure(status, "vendor", "Terminal")
    assert failed is None if said is None else (failed or "").startswith(said)


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "locked", "--require-auth", "--auth-env", "REF_TOKEN")
    reference_profile(agents, tmp_path / "agent-state", "broken-login", "--require-auth", "--auth-fails")
    gw = GatewayProcess(tmp_path / "state", agents)
    async with running(gw):
        yield gw


async def test_an_agent_asking_to_sign_in_waits_for_it_and_keeps_the_key_write_only(gateway: GatewayProcess,
                                                                                  tmp_path: Path) -> None:
    client, log = await subscribed(gateway)
    answers: list[Any] = []
    view = await client.call("task.session.start", {"agent": "locked", "cwd": str(tmp_path / "work"),
                                                    "wait_ready": True})
    sid = view["session_id"]
    assert (view["state"], view["is_agent_running"]) == ("WAITING_FOR_INPUT", False)  # waiting, not FAILED
    auth = view["config"]["auth"]
    assert [(m["id"], m["kind"], m.get("vars")) for m in auth["methods"]] == [
        ("reference-login", "agent", None), ("reference-env", "env_var", ["REF_TOKEN"])]
    assert "acp-gateway sign-in" in view["error_message"]
    with pytest.raises(RpcCallError) as bad:
        await client.call("task.session.authenticate", {"session_id": sid, "method_id": "reference-env"})
    assert (bad.value.code, bad.value.data) == (-32602, {"field": "values"})
    signed = await client.call("task.session.authenticate", {"session_id": sid, "method_id": "reference-env",
                                                             "values": {"REF_TOKEN": DUMMY}})
    answers.append(signed)
    assert (signed["is_agent_running"], signed["config"]["auth"], signed["error_message"]) == (True, None, None)
    # The agent has the value (its own shell sees it); what it says of it is scrubbed.
    said = await agent_said(gateway, gateway.token, sid, "/sh echo key=$REF_TOKEN")
    assert "key=[secret]" in said and DUMMY not in said
    secrets = gateway.state_dir / "secrets"
    [kept] = list(secrets.iterdir())
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700 and stat.S_IMODE(kept.stat().st_mode) == 0o600
    # Every later launch gets it: a restart, then a resume.
    await client.close()
    await gateway.stop()
    await gateway.start()
    client, log = await subscribed(gateway)
    resumed = await client.call("task.session.resume", {"session_id": sid})
    answers.append(resumed)
    assert resumed["is_agent_running"], resumed["error_message"]
    # Signed out: the key is forgotten, and the next start asks again.
    await client.call("task.session.logout", {"session_id": sid})
    assert "locked" not in kept.read_text()
    asked = await client.call("task.session.resume", {"session_id": sid})
    assert not asked["is_agent_running"] and asked["config"]["auth"] is not None
    answers.append(asked)
    # Nowhere to be read back: no answer, no event, no log line, no metric.
    events = await client.call("task.session.events", {"session_id": sid})
    _, metrics = await metrics_text(gateway.port, gateway.token or "")
    for where in (orjson.dumps(answers), orjson.dumps(events), orjson.dumps(log.events),
                  "".join(gateway.stderr_lines).encode(), metrics.encode()):
        assert DUMMY.encode() not in where
    await client.close()


async def test_an_agent_method_is_sent_as_authenticate_and_a_failing_login_keeps_asking(gateway: GatewayProcess,
                                                                                        tmp_path: Path) -> None:
    client, _ = await subscribed(gateway)
    sid = (await client.call("task.session.start", {"agent": "locked", "cwd": str(tmp_path / "work"),
                                                    "wait_ready": True}))["session_id"]
    signed = await client.call("task.session.authenticate", {"session_id": sid, "method_id": "reference-login"})
    assert (signed["is_agent_running"], signed["config"]["auth"]) == (True, None)
    broken = (await client.call("task.session.start", {"agent": "broken-login", "cwd": str(tmp_path / "work"),
                                                       "wait_ready": True}))["session_id"]
    again = await client.call("task.session.authenticate", {"session_id": broken, "method_id": "reference-login"})
    assert not again["is_agent_running"] and again["config"]["auth"] is not None  # still asking, not FAILED
    assert again["state"] == "WAITING_FOR_INPUT" and "Authentication failed" in again["error_message"]
    with pytest.raises(RpcCallError) as running:
        await client.call("task.session.authenticate", {"session_id": sid, "method_id": "reference-login"})
    assert running.value.code == -32602 and "asks for no sign-in" in running.value.message
    await client.close()


async def test_the_cli_lists_the_methods_and_signs_in_without_the_key_on_its_command_line(
        gateway: GatewayProcess, tmp_path: Path) -> None:
    import asyncio
    import sys

    client = await gateway.client()
    sid = (await client.call("task.session.start", {"agent": "locked", "cwd": str(tmp_path / "work"),
                                                    "wait_ready": True}))["session_id"]
    await client.close()

    async def cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", *args, "--url", gateway.url, "--token", gateway.token or "",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
        return proc.returncode or 0, out.decode(), err.decode()

    rc, out, _ = await cli("start", "--agent", "locked", "--cwd", str(tmp_path / "work"))
    assert rc == 1 and "the agent asks to be signed in" in out and "reference-env REF_TOKEN=VALUE" in out
    rc, out, _ = await cli("status", sid)
    assert "the agent asks to be signed in" in out
    assert f"acp-gateway sign-in {sid} reference-env REF_TOKEN=VALUE    # API key (env_var)" in out
    rc, out, err = await cli("sign-in", sid, "reference-env", "REF_TOKEN=-", stdin=f"{DUMMY}\n".encode())
    assert rc == 0 and "agent running: yes" in out, err
    assert DUMMY not in out + err


async def test_a_terminal_login_runs_where_every_frontend_watches_it(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "tui", "--require-auth", "--auth-terminal")
    reference_profile(agents, tmp_path / "failing-state", "tui-fails", "--require-auth", "--auth-terminal",
                      "--auth-fails")
    gw = GatewayProcess(tmp_path / "state", agents)
    async with running(gw):
        client, log = await subscribed(gw)
        view = await client.call("task.session.start", {"agent": "tui", "cwd": str(tmp_path / "work"),
                                                        "wait_ready": True})
        methods = {m["id"]: m for m in view["config"]["auth"]["methods"]}
        # Offered because the gateway said it runs terminal logins (clientCapabilities.auth.terminal).
        assert methods["reference-tui"]["kind"] == "terminal" and methods["reference-tui"]["args"] == ["--login"]
        signed = await client.call("task.session.authenticate", {"session_id": view["session_id"],
                                                                 "method_id": "reference-tui"})
        assert (signed["is_agent_running"], signed["config"]["auth"]) == (True, None)
        started = await log.wait(lambda e: e["type"] == "terminal_started")
        assert started["data"]["command"].endswith("--require-auth --auth-terminal --login")
        exited = await log.wait(lambda e: e["type"] == "terminal_exited")
        assert exited["data"]["exit_code"] == 0
        output = "".join(e["data"]["text"] for e in log.events if e["type"] == "terminal_output")
        assert "enter the code REF-1234" in output and "signed in" in output
        # Signing out: the agent is told (its login's mark goes) and stopped; its next start asks again.
        out = await client.call("task.session.logout", {"session_id": view["session_id"]})
        assert not out["is_agent_running"]
        assert not (tmp_path / "agent-state" / "logged-in").exists()
        again = await client.call("task.session.resume", {"session_id": view["session_id"]})
        assert not again["is_agent_running"] and again["config"]["auth"] is not None
        failing = await client.call("task.session.start", {"agent": "tui-fails", "cwd": str(tmp_path / "work"),
                                                           "wait_ready": True})
        with pytest.raises(RpcCallError) as info:
            await client.call("task.session.authenticate", {"session_id": failing["session_id"],
                                                            "method_id": "reference-tui"})
        assert info.value.code == -32015 and "ended with exit code 1" in info.value.message
        status = await client.call("task.session.status", {"session_id": failing["session_id"]})
        assert status["config"]["auth"] is not None and status["state"] == "WAITING_FOR_INPUT"  # still asking
        await client.close()


def test_the_older_terminal_auth_form_and_a_profiles_variables() -> None:
    """copilot's `_meta["terminal-auth"]` is a terminal method with its own program; a profile's `sign_in_vars` add
    an env_var method unless the agent offers one with them."""
    copilot = AuthMethod.model_validate({"id": "copilot-login", "name": "Log in", "_meta": {"terminal-auth": {
        "command": "/opt/copilot", "args": ["login"], "label": "Copilot Login"}}})
    assert describe_methods([copilot], ["COPILOT_GITHUB_TOKEN"]) == [
        {"id": "copilot-login", "name": "Log in", "description": None, "kind": "terminal", "args": ["login"],
         "env": {}, "command": "/opt/copilot"},
        {"id": "profile-env", "name": "COPILOT_GITHUB_TOKEN", "kind": "env_var",
         "description": "read from the agent's environment: yours, kept for your agents of this profile",
         "vars": ["COPILOT_GITHUB_TOKEN"]}]
    assert [m["id"] for m in describe_methods(ADVERTISED, ["VENDOR_KEY"])] == ["login", "key", "tui"]  # offered
