"""The gateway against every real agent of the recorded corpus (fixtures/agents/), through the replay agent.

No real agent is installed or run: each profile's command is `acp-gateway replay <corpus dir>`. For each agent
one gateway starts sessions, prompts, cancels and chooses an option, is killed (`kill -9`) and restarted, and
brings each session back by the restore rules, once against the agent as recorded and once against the agent
having lost its sessions (`--forget-sessions`). What the user sees of each is the row's outcome; EXPECTED says
what it must be, agent by agent, so a change to the rules shows which real agents it affects. And
`acp-gateway check`, run against the replay of its own recorded run on each real agent, must give the verdicts it
gave the real agent.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp.check.options import CheckOptions
from acp.check.run import run_checks
from acp.replay.script import CLIENT, Script
from fixtures.agents.record import CHECK_OPTIONS, DUMMY_SECRETS
from gateway.clients.client import GatewayClient, RpcCallError
from tests.gateway_harness import EventLog, GatewayProcess
from tests.support.paths import REPO

ROOT = REPO
CORPUS = ROOT / "fixtures" / "agents"
DRIFT = ROOT / "fixtures" / "drift"  # newer releases, for `fixtures diff` (tests/acp/replay/test_fixture_diff.py)

# agent -> scenario -> what the user sees. Scenarios:
#   start      task.session.start: ready, and what the agent offers (option ids)
#   prompt     "hello" (offline, the model call fails): how the turn ends
#   cancel     a turn cancelled at once
#   choose     an option set the way the user would, then kept across kill -9 and the restore
#   restore    kill -9, restart, task.session.resume: how the agent came back (rule and method)
#   forgotten  the same against the agent having lost its sessions
#   status     task.session.status's resume_reason after `forgotten`
#   check      `acp-gateway check` against the replay of the checker's own recorded run: the checks that fail
EXPECTED: dict[str, dict[str, str]] = {
    "auggie": {
        "start": "WAITING_FOR_INPUT, offers mode, model",
        "prompt": "runs until cancelled: cancelled",
        "cancel": "cancelled",
        "choose": "mode ask kept",
        "restore": "restored by session/load",  # resume advertised nowhere, load is (R3)
        "forgotten": "kept: inconclusive",  # load of an unknown session: -32602 Invalid params, which names nothing
        "status": "error_recovery",
        "check": "fails ACP-CONFIG-002, ACP-STDOUT-001, ACP-UNKNOWN-001",
    },
    "claude-agent-acp": {
        "start": "WAITING_FOR_INPUT, offers effort, fast, mode, model, ultracode",
        "prompt": "runs until cancelled: cancelled",
        "cancel": "cancelled",
        "choose": "mode default kept; model opus kept",
        "restore": "restored by session/resume",
        "forgotten": "fresh session: unknown_session",  # -32002, as the spec says
        "status": "agent_running",
        "check": "fails ACP-UNKNOWN-001, ACP-UNKNOWN-002",
    },
    "codex-acp": {
        "start": "WAITING_FOR_INPUT, offers mode, model, reasoning_effort",  # signed in by OPENAI_API_KEY first
        "prompt": "runs until cancelled: cancelled",
        "cancel": "cancelled",
        "choose": "mode auto kept; model gpt-5.4 kept",
        "restore": "restored by session/resume",
        "forgotten": "fresh session: unknown_session",
        "status": "agent_running",
        "check": "fails ACP-JSONRPC-003, ACP-SHUTDOWN-001, ACP-STDOUT-001",
    },
    "copilot": {
        "start": "asks to sign in: copilot-login (terminal)",  # auth_required on session/new
        "prompt": "error -32013: asks to sign in",
        "cancel": "error -32013: asks to sign in",
        "choose": "nothing to choose",
        "restore": "asks to sign in",
        "forgotten": "asks to sign in",
        "status": "not_started",
        "check": "passes",
    },
    "gemini-cli": {
        "start": "WAITING_FOR_INPUT, offers mode, model",
        "prompt": "runs until cancelled: cancelled",
        "cancel": "cancelled",
        "choose": "model gemini-3.1-pro-preview kept",  # its first choice, a mode, it refused (untrusted folder)
        "restore": "kept: authentication",  # resume -32601, then load (R2) asks to sign in in a new process
        "forgotten": "kept: authentication",
        "status": "error_recovery",
        "check": "fails ACP-CONFIG-002",
    },
    "opencode": {
        "start": "WAITING_FOR_INPUT, offers mode, model",
        "prompt": "runs until cancelled: end_turn",
        "cancel": "end_turn",
        "choose": "model opencode/ling-3.0-flash-fin-free kept; mode plan kept",
        "restore": "restored by session/resume",
        "forgotten": "kept: inconclusive",  # -32603 "OpenCode service failure": not a statement that it is unknown
        "status": "error_recovery",
        "check": "fails ACP-UNKNOWN-001, ACP-UNKNOWN-002",
    },
    "pi-acp": {
        "start": "WAITING_FOR_INPUT, offers mode, model",
        "prompt": "end_turn",
        "cancel": "cancelled",
        "choose": "mode off kept; model anthropic/claude-3-5-haiku-20241022 kept",
        "restore": "restored by session/load",
        "forgotten": "kept: inconclusive",  # -32602 Invalid params
        "status": "error_recovery",
        "check": "fails ACP-AUTH-002, ACP-LOAD-001, ACP-UNKNOWN-001",
    },
    "qwen-code": {
        "start": "WAITING_FOR_INPUT, offers mode, model",
        "prompt": "error -32015 (agent -32603)",
        "cancel": "cancelled",
        "choose": "mode plan kept",
        "restore": "restored by session/load",  # resume advertised, answered -32601: load (R2)
        "forgotten": "restored by session/load",  # its load of a session it never had answers as if it had
        "status": "agent_running",
        "check": ("fails ACP-CAPS-001, ACP-CONFIG-004, ACP-JSONRPC-004, ACP-SCHEMA-001, "
                  "ACP-UNKNOWN-001, ACP-UNKNOWN-002"),
    },
}

SCENARIOS = ("start", "prompt", "cancel", "choose", "restore", "forgotten", "status", "check")

# Verdicts a replay cannot repeat: how fast the real agent answered initialize (the replay answers at once); and the
# cancel checks, which cancel once the turn has said something — whether an update the agent sent as the prompt
# went out counts is a race, on the real agent as in the replay (pi-acp's came either side of it).
TIMING_CHECKS = frozenset({"ACP-STARTUP-001", "ACP-CANCEL-001", "ACP-CANCEL-002", "ACP-CLOSE-002"})


def corpus_dirs() -> dict[str, Path]:
    return {d.name.split("@", 1)[0]: d for d in sorted(CORPUS.iterdir()) if d.is_dir() and "@" in d.name}


def recorded_choices(corpus: Path) -> list[tuple[str, dict[str, Any]]]:
    """The options the recording set, and the agent accepted, after session/new: the row `choose` sets them the
    same way (a choice the agent refused is kept by nobody)."""
    entries = Script.from_lines("new", (corpus / "new.jsonl").read_bytes().splitlines()).entries
    accepted = {e.msg.get("id") for e in entries if e.direction != CLIENT and "result" in e.msg}
    return [(str(e.msg["method"]), dict(e.msg["params"])) for e in entries
            if e.direction == CLIENT and e.msg.get("id") in accepted
            and e.msg.get("method") in ("session/set_config_option", "session/set_mode", "session/set_model")]


def cancelled_by_the_recorder(corpus: Path, text: str) -> bool:
    """Whether the recorder cancelled the turn `text` (it runs until cancelled offline): the row does the same."""
    entries = Script.from_lines("new", (corpus / "new.jsonl").read_bytes().splitlines()).entries
    prompt_id = next((e.msg["id"] for e in entries if e.direction == CLIENT and e.msg.get("method") == "session/prompt"
                      and e.msg["params"]["prompt"][0].get("text") == text), None)
    for entry in entries:
        if entry.direction == CLIENT and entry.msg.get("method") == "session/cancel":
            return True
        if entry.direction != CLIENT and "method" not in entry.msg and entry.msg.get("id") == prompt_id:
            return False
    return False


def write_profile(agents: Path, profile_id: str, corpus: Path, forget: bool) -> None:
    """A profile whose agent is the replay of `corpus`. The variables the agent was given keys in are set (to other
    dummies): the gateway signs in with a method whose variables are set, as it did with the real agent."""
    # The gateway waits on nothing an agent says unasked: the replay need not keep the recorded gaps.
    command = [sys.executable, "-m", "agents.replay", "--pace", "0", str(corpus),
               *(["--forget-sessions"] if forget else [])]
    names = orjson.loads((corpus / "agent.json").read_bytes())["env_redacted"]
    env = ", ".join(f'{name} = "dummy-matrix-value"' for name in names)
    (agents / f"{profile_id}.toml").write_text(f'id = "{profile_id}"\ncommand = {orjson.dumps(command).decode()}\n'
                                               f"native_session_resume = true\nenv = {{ {env} }}\n")


def option_value(view: dict[str, Any], config_id: str) -> Any:
    for option in view["config"]["options"]:
        if option.get("id") == config_id:
            return option.get("current_value", option.get("currentValue"))
    return None


async def turn(client: GatewayClient, log: EventLog, session_id: str, text: str, cancel: bool) -> str:
    """How a turn ends, as the user sees it; cancelled once it runs when `cancel`."""
    earlier = {id(e) for e in log.events}  # this turn's events only
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": session_id, "prompt": text}))
    if cancel:
        await log.wait(lambda e: id(e) not in earlier and e["type"] == "session_active_stage"
                       and e["session_id"] == session_id and e["data"]["stage"] == "prompting", timeout=30)
        await client.call("task.session.cancel_turn", {"session_id": session_id})
    try:
        answer = await asyncio.wait_for(prompt, 60)
    except RpcCallError as exc:
        agent_error = (exc.data or {}).get("agent_error") or {}
        return (f"error {exc.code}" + (f" (agent {agent_error['code']})" if agent_error.get("code") else "")
                + (": asks to sign in" if "asks to be signed in" in exc.message else ""))
    return str(answer["stop_reason"])


async def cancelling_permissions(client: GatewayClient, log: EventLog, call: Any) -> Any:
    """`call`, with each permission the agent asks meanwhile answered `cancelled`, as the recorder answered it (Auggie
    asks to index the workspace when its mode is first set)."""
    task = asyncio.ensure_future(call)
    earlier = {id(e) for e in log.events}
    while not task.done():
        waiter = asyncio.ensure_future(log.wait(lambda e: id(e) not in earlier and e["type"] == "permission_requested",
                                                timeout=120))
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            asked = waiter.result()
            earlier.add(id(asked))
            await client.call("task.session.permission.respond", {"session_id": asked["session_id"],
                                                                  "request_id": asked["data"]["request_id"],
                                                                  "cancelled": True})
        else:
            waiter.cancel()
    return task.result()


def came_back(answer: dict[str, Any]) -> str:
    """What task.session.resume says of how the agent came back, in the words a row compares."""
    how = answer.get("how") or ""
    if answer.get("error_message"):
        text = answer["error_message"]
        for cls in ("unknown_session", "unsupported", "authentication", "transport", "inconclusive"):
            if f": {cls} (" in text:
                return f"kept: {cls}"
        return "asks to sign in" if "asks to be signed in" in text else f"failed: {text[:80]}"
    if "restored by" in how:
        return "restored by " + how.split("restored by ", 1)[1].split(",")[0].rstrip(".")
    if "no longer knew" in how:
        return "fresh session: " + how.split("(", 1)[1].split(")", 1)[0]
    return f"fresh session: {how}"


async def run_matrix(agent: str, corpus: Path, tmp_path: Path) -> dict[str, str]:
    agents, work = tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    for suffix, forget in (("", False), ("-choose", False), ("-forgetful", True)):
        write_profile(agents, agent + suffix, corpus, forget)
    outcomes: dict[str, str] = {}
    gw = GatewayProcess(tmp_path / "state", agents)
    await gw.start()
    try:
        client = await gw.client()
        log = EventLog(client)
        await client.call("task.session.subscribe")

        async def start(profile: str) -> dict[str, Any]:
            return await client.call("task.session.start", {"agent": profile, "cwd": str(work), "wait_ready": True})

        main = await start(agent)
        sign_in = main["config"]["auth"]
        if sign_in:  # the agent asked to be signed in: the session waits for it, no turn runs
            methods = ", ".join(f"{m['id']} ({m['kind']})" for m in sign_in["methods"])
            outcomes["start"] = f"asks to sign in: {methods}"
        else:
            offered = sorted(str(o.get("id")) for o in main["config"]["options"])
            outcomes["start"] = f"{main['state']}, offers {', '.join(offered) or 'nothing'}"
        waits = cancelled_by_the_recorder(corpus, "hello")
        outcomes["prompt"] = ("runs until cancelled: " if waits else "") + await turn(
            client, log, main["session_id"], "hello", cancel=waits and not sign_in)
        outcomes["cancel"] = await turn(client, log, main["session_id"], "Count slowly to one hundred.",
                                        cancel=not sign_in)

        chooser = await start(agent + "-choose")
        chosen: list[tuple[str, Any]] = []
        for method, params in recorded_choices(corpus):
            if method == "session/set_mode":
                view = await cancelling_permissions(client, log, client.call(
                    "task.session.set_mode", {"session_id": chooser["session_id"], "mode_id": params["modeId"]}))
                chosen.append((next(o["id"] for o in view["config"]["options"] if o.get("category") == "mode"),
                               params["modeId"]))
                continue
            if method == "session/set_model":
                config_id = next(o["id"] for o in chooser["config"]["options"] if o.get("category") == "model")
                value = params["modelId"]
            else:
                config_id, value = params["configId"], params["value"]
            await cancelling_permissions(client, log, client.call("task.session.set_config_option", {
                "session_id": chooser["session_id"], "config_id": config_id, "value": value}))
            chosen.append((config_id, value))
        forgetful = await start(agent + "-forgetful")
        await client.close()
        await gw.kill9()

        await gw.start()
        client = await gw.client()
        outcomes["restore"] = came_back(await client.call("task.session.resume", {"session_id": main["session_id"]}))
        outcomes["forgotten"] = came_back(await client.call("task.session.resume",
                                                            {"session_id": forgetful["session_id"]}))
        status = await client.call("task.session.status", {"session_id": forgetful["session_id"]})
        outcomes["status"] = str(status["resume_reason"])
        outcomes["choose"] = "nothing to choose"
        if chosen:
            back = await client.call("task.session.resume", {"session_id": chooser["session_id"]})
            outcomes["choose"] = "; ".join(
                f"{config_id} {value} " + ("kept" if option_value(back, config_id) == value
                                           else f"lost ({option_value(back, config_id)}; {came_back(back)})")
                for config_id, value in chosen)
        await client.close()
    finally:
        await gw.stop()
    return outcomes


def test_every_recorded_agent_has_its_row() -> None:
    assert len(corpus_dirs()) >= 8
    assert set(corpus_dirs()) == set(EXPECTED)
    for agent, row in EXPECTED.items():
        assert set(row) == set(SCENARIOS), agent


@pytest.mark.parametrize("agent", sorted(EXPECTED))
async def test_the_gateway_against_each_recorded_agent(agent: str, tmp_path: Path) -> None:
    outcomes = await run_matrix(agent, corpus_dirs()[agent], tmp_path)
    assert outcomes == {k: v for k, v in EXPECTED[agent].items() if k != "check"}


# A replay answers at once (its frames at most 0.25 s apart) or never: what has not come in 5 s (a turn's first word)
# or 15 s (an answer; 20 s a whole turn) will not come at all. The recording waited 10, 45 and 30 s on the real agent;
# the verdicts are the same, and the run takes a minute less.
REPLAY_CHECK_OPTIONS = {**CHECK_OPTIONS, "quiet_timeout": 5.0, "setup_timeout": 15.0, "turn_timeout": 20.0}


async def check_verdicts(corpus: Path, tmp_path: Path) -> dict[str, str]:
    """`acp-gateway check` against the replay of its recorded run on the real agent (fixtures/agents/*/check/)."""
    work = tmp_path / f"check-{corpus.name}"
    work.mkdir()
    names = orjson.loads((corpus / "agent.json").read_bytes())["env_redacted"]
    env = {**os.environ, **{name: "dummy-matrix-value" for name in names}}  # the checker signs in as it did
    results = await run_checks([sys.executable, "-m", "agents.replay", str(corpus / "check")], env=env,
                               options=CheckOptions(agent_cwd=str(work), **REPLAY_CHECK_OPTIONS))
    return {r.check.id: r.result.value for r in results}


async def test_check_through_replay_repeats_its_verdicts_on_the_real_agent(tmp_path: Path) -> None:
    """All agents at once: each check run mostly waits (a turn that never answers), so they overlap well."""
    agents = sorted(EXPECTED)
    runs = await asyncio.gather(*(check_verdicts(corpus_dirs()[a], tmp_path) for a in agents))
    differing: dict[str, dict[str, tuple[str | None, str | None]]] = {}
    failing: dict[str, str] = {}
    for agent, verdicts in zip(agents, runs, strict=True):
        real = orjson.loads((corpus_dirs()[agent] / "agent.json").read_bytes())["outcomes"]["check"]
        differing[agent] = {k: (real.get(k), verdicts.get(k)) for k in set(real) | set(verdicts)
                            if k not in TIMING_CHECKS and real.get(k) != verdicts.get(k)}
        fails = sorted(k for k, v in verdicts.items() if v == "fail" and k not in TIMING_CHECKS)
        failing[agent] = "fails " + ", ".join(fails) if fails else "passes"
    assert differing == {agent: {} for agent in agents}  # (real verdict, replayed verdict) where they differ
    assert failing == {agent: EXPECTED[agent]["check"] for agent in agents}


def test_the_corpus_holds_no_secret_and_no_host_path() -> None:
    recordings = [*CORPUS.rglob("*.jsonl"), *CORPUS.rglob("agent.json"), *DRIFT.rglob("*.jsonl"),
                  *DRIFT.rglob("agent.json")]
    assert len(recordings) >= 8 * 2
    for path in recordings:
        data = path.read_bytes()
        for secret in DUMMY_SECRETS:
            assert secret.encode() not in data, (path, "holds a dummy key used while recording")
        for host in (str(ROOT), "/tmp/acp-corpus-"):
            assert host.encode() not in data, (path, f"holds the host path {host}")


def test_each_recorded_agent_says_where_it_came_from() -> None:
    for agent, corpus in corpus_dirs().items():
        info = orjson.loads((corpus / "agent.json").read_bytes())
        assert info["agent"] == agent and corpus.name == f"{agent}@{info['version']}"
        assert info["package"] and info["registry"] == "npm" and info["licence"] not in ("", "unknown")
        # The restores are recorded when there is a session to restore: not for an agent that asks to sign in first.
        restores = set() if "new" in info["outcomes"] else {"restore_known.jsonl", "restore_unknown.jsonl"}
        assert {p.name for p in corpus.glob("*.jsonl")} == {"new.jsonl", *restores}, agent
        assert sorted(corpus.glob("check/*.jsonl")) and info["outcomes"]["check"], agent
