"""The conformance checker: against the reference agent (clean, then one row per fault mode), against an agent built
on the official Python SDK, and the CLI's reports."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from acp.check import CHECKS, UNKNOWN_PREFIX, Check, CheckResult, Result, Tier, all_checks, launch_probe
from acp.check.options import CheckOptions, CheckPrompts, ClientOffer
from acp.check.report import Verdict, summary, verdict
from acp.check.run import run_checks
from acp.check.schema import acp_v1_schema
from agents.catalog import load_profiles
from tests.gateway_harness import processes_naming
from tests.support.paths import REPO
from tests.third_party import sdk_python

ROOT = REPO
ALL_IDS = {c.id for c in all_checks()}
# The reference agent's own commands, from its profile's [check] table; other agents get plain requests.
REFERENCE = CheckOptions(prompts=load_profiles()["reference"].check)

# fault flags -> exactly the checks that must fail (everything else passes, skips or informs)
FAULTS: list[tuple[list[str], set[str]]] = [
    (["--noise", "2"], {"ACP-STDOUT-001"}),
    (["--protocol-version", "2"], {"ACP-INIT-001"}),
    (["--fault", "session/resume=unsupported"], {"ACP-CAPS-001", "ACP-RESUME-001", "ACP-UNKNOWN-002"}),
    (["--fault", "session/load=internal"], {"ACP-LOAD-001", "ACP-LOAD-002", "ACP-UNKNOWN-001"}),
    (["--fault", "session/resume=unknown_session"], {"ACP-RESUME-001"}),
    (["--late-replay"], {"ACP-LOAD-001"}),
    (["--replay-on-resume"], {"ACP-RESUME-001"}),
    (["--ignore-cancel"], {"ACP-CANCEL-001"}),
    (["--bad-stop-reason"], {"ACP-PROMPT-001", "ACP-SCHEMA-001"}),
    (["--bad-update"], {"ACP-UPDATE-001", "ACP-SCHEMA-001"}),
    (["--fault", "session/list=unsupported"], {"ACP-CAPS-001", "ACP-LIST-001", "ACP-LIST-002"}),
    (["--fault", "session/close=unsupported"], {"ACP-CAPS-001", "ACP-CLOSE-001", "ACP-CLOSE-002"}),
    (["--linger"], {"ACP-SHUTDOWN-001"}),
    (["--ignore-client-capabilities"], {"ACP-CLIENTCAP-001"}),
    (["--keep-terminals"], {"ACP-TERMINAL-001"}),
    (["--auth-terminal", "--auth-terminal-always"], {"ACP-AUTH-002"}),
    (["--auth-terminal"], set()),  # offered only to a client that runs terminal sign-ins: conformant
    (["--quirk", "string-id-null"], {"ACP-JSONRPC-001"}),
    (["--quirk", "silent-unknown"], {"ACP-JSONRPC-001", "ACP-JSONRPC-004"}),
    (["--fault", "_acp_check/ping=internal"], {"ACP-JSONRPC-004"}),  # -32603 for a method it does not have
    (["--quirk", "answer-notifications"], {"ACP-JSONRPC-003"}),
    (["--quirk", "result-and-error"], {"ACP-JSONRPC-002"}),
    (["--quirk", "multiline-errors"], {"ACP-ERROR-001"}),
    (["--quirk", "bad-utf8"], {"ACP-STDOUT-001", "ACP-UTF8-001"}),
    (["--quirk", "bad-current-value"], {"ACP-CONFIG-001"}),
    (["--quirk", "booleans-always"], {"ACP-CONFIG-003"}),
    (["--quirk", "partial-config-answer"], {"ACP-CONFIG-002"}),
    (["--refuse-value", "mode=ask"], {"ACP-CONFIG-002"}),  # an offered value refused
    (["--quirk", "accept-any-value"], {"ACP-CONFIG-002", "ACP-CONFIG-004"}),
    (["--quirk", "list-ignores-cwd"], {"ACP-LIST-002"}),
    (["--quirk", "null-load-result"], {"ACP-LOAD-003", "ACP-SCHEMA-001"}),
    (["--quirk", "refuse-additional-directories"], {"ACP-ADDDIRS-001"}),
    (["--fault", "session/delete=internal"], {"ACP-DELETE-001", "ACP-DELETE-002"}),
    (["--quirk", "delete-unknown-errors"], {"ACP-DELETE-002"}),
    (["--quirk", "close-keeps-turn"], {"ACP-CLOSE-002"}),
    (["--quirk", "silent-mode-change"], {"ACP-MODES-003"}),
    (["--forget-config"], set()),  # not kept across a restore: reported (ACP-CONFIG-005), not a finding
    (["--quirk", "refuse-meta"], {"ACP-META-001"}),
    (["--quirk", "refuse-resource-link"], {"ACP-PROMPT-003"}),
    (["--quirk", "refuse-embedded"], {"ACP-PROMPTCAP-003"}),
    (["--media"], set()),
    (["--media", "--quirk", "refuse-media"], {"ACP-PROMPTCAP-001", "ACP-PROMPTCAP-002"}),
    (["--require-auth"], set()),  # the checker authenticates with the advertised method, as a client would
    # Not the agent's fault: blocked (authentication without credentials, a turn the model could not run) or
    # inconclusive (turns that end before a cancel can reach them) — never FAIL (see the verdict test below).
    (["--require-auth", "--auth-fails"], set()),
    (["--fault", "session/prompt=internal"], set()),
    (["--brief-turns"], set()),
]

# fault flags -> the checks that must come out BLOCKED / INCONCLUSIVE, with the exit status
UNDECIDED: list[tuple[list[str], Result, set[str]]] = [
    (["--require-auth", "--auth-fails"], Result.BLOCKED, {
        "ACP-SESSION-001", "ACP-STDOUT-001", "ACP-PROMPT-001", "ACP-UPDATE-001", "ACP-CANCEL-001", "ACP-CANCEL-002",
        "ACP-LOAD-001", "ACP-LOAD-002", "ACP-RESUME-001", "ACP-UNKNOWN-001", "ACP-UNKNOWN-002", "ACP-CAPS-001",
        "ACP-LIST-001", "ACP-CLOSE-001", "ACP-CLIENT-001", "ACP-CLIENTCAP-001", "ACP-TERMINAL-001",
        "ACP-ADDDIRS-001", "ACP-CONFIG-001", "ACP-CONFIG-002", "ACP-CONFIG-003", "ACP-CONFIG-004", "ACP-DELETE-001",
        "ACP-DELETE-002",
        "ACP-LIST-002", "ACP-LOAD-003", "ACP-CLOSE-002", "ACP-PROMPT-003", "ACP-PROMPTCAP-003",
        "ACP-META-001", "ACP-INFO-003", "ACP-INFO-004", "ACP-MODES-003", "ACP-CONFIG-005"}),
    (["--fault", "session/prompt=internal"], Result.BLOCKED, {
        "ACP-STDOUT-001", "ACP-PROMPT-001", "ACP-UPDATE-001", "ACP-CANCEL-001", "ACP-CANCEL-002", "ACP-LOAD-001",
        "ACP-LOAD-002", "ACP-RESUME-001", "ACP-LIST-001", "ACP-CLIENT-001", "ACP-CLIENTCAP-001", "ACP-TERMINAL-001",
        "ACP-CLOSE-002", "ACP-PROMPT-003", "ACP-PROMPTCAP-003", "ACP-META-001", "ACP-INFO-004", "ACP-MODES-003"}),
    (["--brief-turns"], Result.INCONCLUSIVE, {"ACP-CANCEL-001", "ACP-MODES-003"}),
]


def agent(tmp_path: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "agents.reference", "--state-dir", str(tmp_path / "agent-state"), *flags]


async def test_reference_agent_passes_every_mandatory_check(tmp_path: Path) -> None:
    results = await run_checks(agent(tmp_path), options=REFERENCE)
    assert {r.check.id for r in results} == ALL_IDS
    by_id = {r.check.id: r for r in results}
    assert [r.check.id for r in results if r.result is Result.FAIL] == []
    assert all(by_id[c.id].result is Result.PASS for c in CHECKS if c.tier is Tier.MANDATORY)
    assert by_id["ACP-INFO-001"].result is Result.INFO
    assert by_id["ACP-CANCEL-002"].result is Result.PASS  # the reference agent asks permission on /permission
    # Values as JSON or plain words, not Python's: `['embeddedContext']`, `stopReason 'end_turn'` were shown.
    info = by_id["ACP-INFO-001"].evidence
    assert "prompt capabilities: " in info and "embeddedContext" in info and "[" not in info, info
    assert by_id["ACP-PROMPT-001"].evidence.startswith('stopReason "end_turn" after'), by_id["ACP-PROMPT-001"].evidence
    assert not [r.evidence for r in results if "'end_turn'" in r.evidence or "['" in r.evidence]


@pytest.mark.parametrize(("flags", "failing"), FAULTS, ids=[" ".join(f) for f, _ in FAULTS])
async def test_each_fault_fails_exactly_its_checks(tmp_path: Path, flags: list[str], failing: set[str]) -> None:
    results = await run_checks(agent(tmp_path, *flags), options=REFERENCE)
    failed = {r.check.id for r in results if r.result is Result.FAIL}
    assert failed == failing, {r.check.id: r.evidence for r in results if r.check.id in failed ^ failing}
    for r in results:
        if r.result is Result.FAIL:
            assert r.transcript or r.check.id == "ACP-SCHEMA-001" or r.violations


@pytest.mark.parametrize(("flags", "verdict"), [([], Result.PASS),
                                                (["--quirk", "authenticate-no-effect"], Result.FAIL)])
async def test_authenticate_with_the_method_given_then_a_session(tmp_path: Path, flags: list[str],
                                                                 verdict: Result) -> None:
    options = dataclasses.replace(REFERENCE, auth_method="reference-login")
    results = await run_checks(agent(tmp_path, "--require-auth", *flags), options=options, only=["ACP-AUTH-003"])
    assert [(r.check.id, r.result) for r in results] == [("ACP-AUTH-003", verdict)]


@pytest.mark.parametrize(("flags", "verdict", "checks"), UNDECIDED, ids=[" ".join(f) for f, _, _ in UNDECIDED])
async def test_what_the_agent_is_not_to_blame_for_is_blocked_or_inconclusive(
        tmp_path: Path, flags: list[str], verdict: Result, checks: set[str]) -> None:
    results = await run_checks(agent(tmp_path, *flags), options=REFERENCE)
    got = {r.check.id for r in results if r.result is verdict}
    assert got == checks, {r.check.id: (r.result, r.evidence) for r in results if r.check.id in got ^ checks}
    assert not [r for r in results if r.fatal]  # the exit status counts FAILs only
    for r in results:
        if r.result is Result.BLOCKED:
            assert "run again" in r.evidence  # it says what would unblock it


def turns_sent(log: Path) -> list[str]:
    """The prompts an agent received for sessions it has (ACP-INFO-002 prompts one it never made: no turn runs)."""
    return [line for line in log.read_text().splitlines()
            if '"session/prompt"' in line and UNKNOWN_PREFIX not in line]


async def test_a_failing_turn_is_tried_once_for_the_whole_run(tmp_path: Path) -> None:
    """A model that cannot answer fails every turn the same way: the run's first turn decides it, and every other
    check that needs a turn is BLOCKED at once with that evidence (not by sending its own turn to fail again)."""
    log = tmp_path / "received.jsonl"
    results = await run_checks(agent(tmp_path, "--fault", "session/prompt=internal", "--log", str(log)),
                               options=REFERENCE)
    prompts = turns_sent(log)
    assert len(prompts) == 1, prompts
    blocked = [r for r in results if r.result is Result.BLOCKED]
    assert len(blocked) >= 5 and all("a prompt turn failed" in r.evidence for r in blocked)
    assert verdict(results) is Verdict.NOT_SHOWN
    line = summary(results)
    assert "conformant" not in line.replace("conformance", "")
    assert "still unknown: mandatory ACP-" in line


async def test_a_turn_that_says_nothing_blocks_the_checks_at_once(tmp_path: Path) -> None:
    """An agent whose model is unreachable says nothing in a turn (it retries the API for minutes): after the quiet
    timeout the turn is taken as not running, and every check needing a turn is BLOCKED — by one wait, not one per
    check, and never FAILed for it."""
    log = tmp_path / "received.jsonl"
    options = CheckOptions(prompts=REFERENCE.prompts, turn_timeout=60.0, quiet_timeout=2.0, setup_timeout=10.0)
    results = await run_checks(agent(tmp_path, "--fault", "session/prompt=hang", "--log", str(log)), options=options)
    prompts = turns_sent(log)
    assert len(prompts) == 1, prompts
    quiet = [r for r in results if "said nothing (no update, no answer) within 2 s" in r.evidence]
    assert len(quiet) >= 5 and all(r.result is Result.BLOCKED for r in quiet)
    assert not [r for r in results if r.fatal], [(r.check.id, r.evidence) for r in results if r.fatal]


async def test_a_turn_that_never_ends_is_judged_once(tmp_path: Path) -> None:
    """A turn that streams but never ends fails the check whose turn it was; the other checks needing a turn are
    blocked at once instead of each waiting out the turn timeout."""
    log = tmp_path / "received.jsonl"
    options = CheckOptions(prompts=CheckPrompts(short="/stream 100000", long="/hang", longer="/hang",
                                                permission="/permission"),
                           turn_timeout=3.0, setup_timeout=10.0)
    results = await run_checks(agent(tmp_path, "--log", str(log)), options=options)
    timed_out = [r for r in results if "did not end within 3 s" in r.evidence]
    assert [r.result for r in timed_out if r.result is Result.FAIL] == [Result.FAIL], timed_out
    assert sum(1 for r in timed_out if r.result is Result.BLOCKED) >= 3


def _result(tier: Tier, result: Result, cid: str = "ACP-X-001") -> CheckResult:
    async def fn(ctx: object) -> str:
        return ""
    return CheckResult(Check(cid, tier, "t", "c", fn), result, "e")


# the deciding results of a run -> its verdict, and what the summary must (not) say
VERDICTS: list[tuple[list[tuple[Tier, Result]], Verdict, str, str]] = [
    ([(Tier.MANDATORY, Result.PASS), (Tier.CAPABILITY, Result.SKIP)], Verdict.CONFORMANT, "; conformant", "unknown"),
    ([(Tier.MANDATORY, Result.PASS), (Tier.ADVISORY, Result.FAIL)], Verdict.CONFORMANT, "advisory findings",
     "NOT"),
    ([(Tier.MANDATORY, Result.PASS), (Tier.ADVISORY, Result.BLOCKED)], Verdict.CONFORMANT, "could not be checked here: "
     "advisory", "NOT"),
    ([(Tier.MANDATORY, Result.FAIL), (Tier.MANDATORY, Result.BLOCKED)], Verdict.NOT_CONFORMANT,
     "NOT conformant (failed: mandatory", "; conformant"),
    ([(Tier.CAPABILITY, Result.FAIL)], Verdict.NOT_CONFORMANT, "failed: capability", "; conformant"),
    ([(Tier.MANDATORY, Result.PASS), (Tier.MANDATORY, Result.BLOCKED)], Verdict.NOT_SHOWN,
     "conformance not shown: 1 mandatory", "; conformant"),
    ([(Tier.CAPABILITY, Result.INCONCLUSIVE), (Tier.ADVISORY, Result.FAIL)], Verdict.NOT_SHOWN,
     "still unknown: capability", "; conformant"),
]


@pytest.mark.parametrize(("found", "expected", "says", "never"), VERDICTS)
def test_the_verdict_is_conformant_only_when_every_deciding_check_passed(
        found: list[tuple[Tier, Result]], expected: Verdict, says: str, never: str) -> None:
    results = [_result(tier, result, f"ACP-T-{i:03}") for i, (tier, result) in enumerate(found)]
    assert verdict(results) is expected
    line = summary(results, 1.0)
    assert says in line and never not in line, line


async def test_capability_checks_skip_when_not_advertised(tmp_path: Path) -> None:
    results = await run_checks(agent(tmp_path, "--no-load", "--no-resume", "--no-list", "--no-close"),
                               options=REFERENCE)
    skipped = {r.check.id for r in results if r.result is Result.SKIP}
    assert {"ACP-LOAD-001", "ACP-LOAD-002", "ACP-RESUME-001", "ACP-UNKNOWN-001", "ACP-UNKNOWN-002",
            "ACP-LIST-001", "ACP-CLOSE-001", "ACP-CLOSE-002", "ACP-LIST-002", "ACP-LOAD-003", "ACP-PROMPTCAP-001",
            "ACP-PROMPTCAP-002"} <= skipped
    assert not [r for r in results if r.result is Result.FAIL]


def test_cli_json_report_and_exit_status(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "gateway.cli", "check"]
    own = ["--prompt", "long=/hang", "--prompt", "longer=/hang"]  # the profile's: a turn that runs until cancelled
    ok = subprocess.run([*base, *own, "--", *agent(tmp_path)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "conformant" in ok.stdout.splitlines()[-1]
    assert "; conformant; " in ok.stdout.splitlines()[-1] and ok.stdout.rstrip().endswith(" s")  # the total time
    progress = ok.stderr.splitlines()  # a line per check as it ends, on stderr
    total = len(ALL_IDS)
    assert len(progress) == total and progress[-1].startswith(f"[{total}/{total}] ")
    assert all("ACP-" in line for line in progress)
    assert "Task was destroyed" not in ok.stderr and "Traceback" not in ok.stderr  # a clean exit
    assert agents_running(tmp_path) == []  # and no agent left behind
    junit = tmp_path / "report.xml"
    bad = subprocess.run([*base, "--json", "--junit", str(junit), "--only", "ACP-RESUME-001", "ACP-LOAD-001", "--",
                          *agent(tmp_path, "--replay-on-resume")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    suite = ElementTree.parse(junit).getroot()  # a standard parser reads it
    assert (suite.tag, suite.get("tests"), suite.get("failures")) == ("testsuite", "2", "1")
    failures = [case.get("name", "") for case in suite.iter("testcase") if case.find("failure") is not None]
    assert len(failures) == 1 and failures[0].startswith("ACP-RESUME-001 ")
    tck = {case.get("name", "").split()[0]: prop.get("value") for case in suite.iter("testcase")
           for prop in case.iter("property")}
    assert tck == {"ACP-RESUME-001": "ACP-RESUME-001 ACP-RESUME-002", "ACP-LOAD-001": "ACP-LOAD-001 ACP-LOAD-002"}
    report = json.loads(bad.stdout)
    assert report["seconds"] > 0
    assert report["conformant"] is False
    checks = {c["id"]: c for c in report["checks"]}
    assert set(checks) == {"ACP-RESUME-001", "ACP-LOAD-001"}
    failed = checks["ACP-RESUME-001"]
    assert failed["result"] == "fail" and "replayed" in failed["evidence"] and failed["tier"] == "capability"
    assert failed["citation"].startswith("https://agentclientprotocol.com/")
    methods = [f["msg"].get("method") for f in failed["transcript"]]
    assert "session/resume" in methods and {f["process"] for f in failed["transcript"]} == {0, 1}
    assert "transcript" not in checks["ACP-LOAD-001"]
    advisory = subprocess.run([*base, "--only", "ACP-SHUTDOWN-001", "--", *agent(tmp_path, "--linger")],
                              capture_output=True, text=True, timeout=120)
    assert advisory.returncode == 0 and "FAIL" in advisory.stdout  # advisory failures are never fatal
    unknown = subprocess.run([*base, "--only", "ACP-NOPE", "--", "true"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "unknown check id" in unknown.stderr
    # A profile instead of a command line: its command and environment
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    log = tmp_path / "agent.log"
    command = agent(tmp_path, "--require-auth", "--auth-env", "REF_KEY", "--log", str(log))
    # REF_KEY set would pick the env_var method; the profile's auth_method says otherwise, and wins.
    (profiles / "mine.toml").write_text(f'id = "mine"\ncommand = {json.dumps(command)}\n'
                                        'auth_method = "reference-login"\nenv = { REF_KEY = "k" }\n')
    by_profile = subprocess.run([*base, "--agent", "mine", "--agents-dir", str(profiles), "--only", "ACP-SESSION-001"],
                                capture_output=True, text=True, timeout=120)
    assert by_profile.returncode == 0 and "1 passed" in by_profile.stdout, by_profile.stdout + by_profile.stderr
    asked = [json.loads(line) for line in log.read_text().splitlines()]
    assert {m["params"]["methodId"] for m in asked if m.get("method") == "authenticate"} == {"reference-login"}
    nope = subprocess.run([*base, "--agent", "nope"], capture_output=True, text=True, timeout=60)
    assert nope.returncode == 2 and "no agent profile 'nope'" in nope.stderr


def agents_running(tmp_path: Path) -> list[str]:
    """Processes whose command line names this test's directory (the agents it started)."""
    return processes_naming(str(tmp_path))


async def test_plain_prompts_blame_no_agent_for_what_it_was_not_asked(tmp_path: Path) -> None:
    """Without a [check] table the checks send plain requests: the reference agent only echoes them, so its turns
    are too short to cancel (INCONCLUSIVE), it asks no permission and calls no client method (SKIP), and nothing
    FAILs. No check sends the reference agent's slash commands."""
    results = await run_checks(agent(tmp_path))
    by_id = {r.check.id: r for r in results}
    assert [r.check.id for r in results if r.result is Result.FAIL] == []
    assert by_id["ACP-CANCEL-001"].result is Result.INCONCLUSIVE
    assert "longer task" in by_id["ACP-CANCEL-001"].evidence
    assert by_id["ACP-CANCEL-002"].result is Result.SKIP and by_id["ACP-CLIENT-001"].result is Result.SKIP
    assert by_id["ACP-TERMINAL-001"].result is Result.SKIP and "tools" in by_id["ACP-TERMINAL-001"].evidence
    sent = [block["text"] for r in results for frame in r.transcript if frame["dir"] == "out"
            for block in frame["msg"].get("params", {}).get("prompt", []) if block.get("type") == "text"]
    assert sent and not [text for text in sent if text.startswith("/")]
    assert CheckPrompts().long in sent and CheckPrompts().longer in sent  # the retry asks for a longer task


async def test_one_agent_process_serves_every_check_that_needs_no_fresh_one(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    results = await run_checks(agent(tmp_path, "--log", str(log)), options=REFERENCE)
    assert not [r for r in results if r.result is Result.FAIL]
    initializes = sum(1 for line in log.read_text().splitlines() if json.loads(line).get("method") == "initialize")
    restarts = {"ACP-LOAD-001", "ACP-LOAD-002", "ACP-RESUME-001", "ACP-CONFIG-005"}  # a first process and a second
    # (ACP-MODES-003 starts a second only when the turn said nothing of the mode: the clean agent says it)
    fresh = [c for c in CHECKS if c.fresh and c.id != "ACP-AUTH-003"]  # skipped before it starts one: no auth method
    # one shared process, plus those of the checks that need their own: not one (or two) per check
    assert initializes == 1 + len(fresh) + len(restarts & {c.id for c in fresh})
    assert agents_running(tmp_path) == []


async def test_a_slow_initialize_is_an_advisory_finding_and_the_checks_run(tmp_path: Path) -> None:
    """An adapter that takes 20 s to answer initialize (it probes for its CLI) is told so, advisory; with a setup
    timeout above that, the other checks run on the one process that paid for it."""
    options = CheckOptions(prompts=REFERENCE.prompts, setup_timeout=30.0)
    results = await run_checks(agent(tmp_path, "--slow-init", "20"), options=options,
                               only=["ACP-STARTUP-001", "ACP-SESSION-001", "ACP-PROMPT-001", "ACP-CANCEL-001"])
    by_id = {r.check.id: r for r in results}
    startup = by_id["ACP-STARTUP-001"]
    assert startup.result is Result.FAIL and startup.check.tier is Tier.ADVISORY and not startup.fatal
    assert "initialize took 2" in startup.evidence
    assert {by_id[i].result for i in ("ACP-SESSION-001", "ACP-PROMPT-001", "ACP-CANCEL-001")} == {Result.PASS}


@pytest.mark.parametrize(("flags", "cancel"), [([], "pass"), (["--echo-once"], "inconclusive")],
                         ids=["streaming", "echo-once"])
def test_an_agent_built_on_the_official_python_sdk_passes(tmp_path: Path, flags: list[str], cancel: str) -> None:
    """A conformant agent someone else's library speaks for: exit 0, the JUnit file parses. Its turns stream the
    prompt back; `--echo-once` ends each turn after one update, as the SDK's echo example does, which used to be
    reported as a failed cancel."""
    junit = tmp_path / "sdk.xml"
    run = subprocess.run([sys.executable, "-m", "gateway.cli", "check", "--json", "--junit", str(junit), "--",
                          str(sdk_python()), str(ROOT / "tests" / "sdk" / "streaming_agent.py"), *flags],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    report = json.loads(run.stdout)
    assert run.returncode == 0, [c for c in report["checks"] if c["result"] == "fail"]
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["ACP-CANCEL-001"]["result"] == cancel
    # a mandatory check that could not be decided leaves conformance unknown, and the report says so
    assert report["verdict"] == ("conformant" if cancel == "pass" else "not_shown")
    assert report["conformant"] is (cancel == "pass")
    assert checks["ACP-INFO-001"]["evidence"].startswith("sdk-streaming-agent")
    # One advisory finding, the SDK's own: an agent class derived from its `Agent` protocol inherits a stub
    # `ext_method` that answers any unknown `_` method with a null result, not -32601 (docs/agent-authors.md).
    found = {c["id"]: c["evidence"] for c in report["checks"] if c["result"] in ("fail", "blocked")}
    assert found == {"ACP-JSONRPC-004": "_acp_check/ping (a method no agent has) answered a result"}, found
    suite = ElementTree.parse(junit).getroot()
    assert suite.get("failures") == "0" and int(suite.get("tests", "0")) == len(ALL_IDS)  # advisory: not a failure


@pytest.mark.parametrize(("switches", "capabilities"), [
    ([], {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False}),
    (["fs-read=off", "fs_write=off"], {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}),
    (["terminal=on", "terminal-auth=on"], {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True,
                                           "auth": {"terminal": True}}),
    (["elicitation-url=on", "boolean-config=on"], {"fs": {"readTextFile": True, "writeTextFile": True},
                                                   "terminal": False, "elicitation": {"url": {}},
                                                   "session": {"configOptions": {"boolean": {}}}}),
])
def test_what_the_checker_offers_is_switched_capability_by_capability(switches: list[str],
                                                                      capabilities: dict[str, object]) -> None:
    assert ClientOffer().with_switches(switches).capabilities() == capabilities


@pytest.mark.parametrize("bad", ["terminal", "terminal=yes", "telepathy=on"])
def test_a_bad_offer_switch_is_refused_with_the_names(bad: str) -> None:
    with pytest.raises(ValueError, match="fs-read, fs-write, terminal"):
        ClientOffer().with_switches([bad])


def test_progress_is_live_on_a_terminal(tmp_path: Path) -> None:
    """On a TTY the line naming what runs now is redrawn in place; the per-check lines stay."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "check", "--only", "ACP-CANCEL-001",
                             "ACP-LOAD-001", "--agent", "reference"], stdout=subprocess.PIPE, stderr=slave,
                            env={**os.environ, "XDG_STATE_HOME": str(tmp_path)})
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed: every writer exited
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0
    assert proc.stdout is not None and "conformant" in proc.stdout.read().decode()
    text = seen.decode(errors="replace")
    assert "running: ACP-" in text and "\r\x1b[2K" in text
    assert "PASS    ACP-CANCEL-001" in text and "PASS    ACP-LOAD-001" in text


@pytest.mark.parametrize(("msg", "method", "path"), [
    ({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "done"}}, "session/prompt", "$.result.stopReason"),
    ({"jsonrpc": "2.0", "id": 1, "result": {}}, "session/new", "$.result"),
    ({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}}, None, "$.params"),
    ({"jsonrpc": "2.0", "id": 3, "method": "terminal/nope", "params": {}}, None, "$.method"),
    ({"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}}, "session/new", "$.error.code"),
])
def test_schema_violations_name_the_json_path(msg: dict[str, object], method: str | None, path: str) -> None:
    violation = acp_v1_schema().check_from_agent(msg, method)
    assert violation is not None and violation.path == path


def test_valid_messages_pass_the_schema() -> None:
    schema = acp_v1_schema()
    assert schema.check_from_agent({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s"}}, "session/new") is None
    assert schema.check_from_agent({"jsonrpc": "2.0", "method": "_vendor/thing", "params": 5}) is None


async def test_only_a_conversation_update_shows_a_turn_running(tmp_path: Path) -> None:
    """The cancel checks wait for a sign the turn runs before they cancel. A slash-command or usage report (which
    may arrive late, after the set-up answer) is no such sign: taking it for one cancelled turns that had not
    started and blamed the agent for the message that followed."""
    probe = await launch_probe(agent(tmp_path, "--brief-turns"), str(tmp_path), None, REFERENCE)
    try:
        for kind in ("available_commands_update", "usage_update", "current_mode_update"):
            probe.client.on_update({"sessionId": "s", "update": {"sessionUpdate": kind}}, False)
        assert not probe.first_update.is_set()
        probe.client.on_update({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                                             "content": {"type": "text", "text": "hi"}}}, False)
        assert probe.first_update.is_set()
    finally:
        await probe.client.stop()


def test_the_docs_give_no_count_of_checks_the_code_does_not_have() -> None:
    """docs/agent-authors.md said `check` "runs 22 requirements" when it ran 53: a count in the docs is the code's."""
    import re

    text = (REPO / "docs" / "agent-authors.md").read_text()
    counts = {int(n) for n in re.findall(r"runs\s+(\d+)\s+requirements", text)}
    assert counts <= {len(ALL_IDS)}, (counts, len(ALL_IDS))
