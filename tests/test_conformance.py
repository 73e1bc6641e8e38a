"""The conformance checker against the reference agent: clean, then one row per fault mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from acp.conformance import CHECKS, Result, Tier, all_checks, run_checks
from acp.schema_check import acp_v1_schema

ALL_IDS = {c.id for c in all_checks()}

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
    (["--fault", "session/list=unsupported"], {"ACP-CAPS-001", "ACP-LIST-001"}),
    (["--fault", "session/close=unsupported"], {"ACP-CAPS-001", "ACP-CLOSE-001"}),
    (["--linger"], {"ACP-SHUTDOWN-001"}),
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
        "ACP-LIST-001", "ACP-CLOSE-001", "ACP-CLIENT-001"}),
    (["--fault", "session/prompt=internal"], Result.BLOCKED, {
        "ACP-STDOUT-001", "ACP-PROMPT-001", "ACP-UPDATE-001", "ACP-CANCEL-001", "ACP-LOAD-001", "ACP-LOAD-002",
        "ACP-RESUME-001", "ACP-LIST-001", "ACP-CLIENT-001"}),
    (["--brief-turns"], Result.INCONCLUSIVE, {"ACP-CANCEL-001"}),
]


def agent(tmp_path: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "agents.reference", "--state-dir", str(tmp_path / "agent-state"), *flags]


async def test_reference_agent_passes_every_mandatory_check(tmp_path: Path) -> None:
    results = await run_checks(agent(tmp_path))
    assert {r.check.id for r in results} == ALL_IDS
    by_id = {r.check.id: r for r in results}
    assert [r.check.id for r in results if r.result is Result.FAIL] == []
    assert all(by_id[c.id].result is Result.PASS for c in CHECKS if c.tier is Tier.MANDATORY)
    assert by_id["ACP-INFO-001"].result is Result.INFO
    assert by_id["ACP-CANCEL-002"].result is Result.PASS  # the reference agent asks permission on /permission


@pytest.mark.parametrize(("flags", "failing"), FAULTS, ids=[" ".join(f) for f, _ in FAULTS])
async def test_each_fault_fails_exactly_its_checks(tmp_path: Path, flags: list[str], failing: set[str]) -> None:
    results = await run_checks(agent(tmp_path, *flags))
    failed = {r.check.id for r in results if r.result is Result.FAIL}
    assert failed == failing, {r.check.id: r.evidence for r in results if r.check.id in failed ^ failing}
    for r in results:
        if r.result is Result.FAIL:
            assert r.transcript or r.check.id == "ACP-SCHEMA-001" or r.violations


@pytest.mark.parametrize(("flags", "verdict", "checks"), UNDECIDED, ids=[" ".join(f) for f, _, _ in UNDECIDED])
async def test_what_the_agent_is_not_to_blame_for_is_blocked_or_inconclusive(
        tmp_path: Path, flags: list[str], verdict: Result, checks: set[str]) -> None:
    results = await run_checks(agent(tmp_path, *flags))
    got = {r.check.id for r in results if r.result is verdict}
    assert got == checks, {r.check.id: (r.result, r.evidence) for r in results if r.check.id in got ^ checks}
    assert not [r for r in results if r.fatal]  # the exit status counts FAILs only
    for r in results:
        if r.result is Result.BLOCKED:
            assert "run again" in r.evidence  # it says what would unblock it


async def test_capability_checks_skip_when_not_advertised(tmp_path: Path) -> None:
    results = await run_checks(agent(tmp_path, "--no-load", "--no-resume", "--no-list", "--no-close"))
    skipped = {r.check.id for r in results if r.result is Result.SKIP}
    assert {"ACP-LOAD-001", "ACP-LOAD-002", "ACP-RESUME-001", "ACP-UNKNOWN-001", "ACP-UNKNOWN-002",
            "ACP-LIST-001", "ACP-CLOSE-001"} <= skipped
    assert not [r for r in results if r.result is Result.FAIL]


def test_cli_json_report_and_exit_status(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "gateway.cli", "check"]
    ok = subprocess.run([*base, "--", *agent(tmp_path)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "conformant" in ok.stdout.splitlines()[-1]
    assert "; conformant; " in ok.stdout.splitlines()[-1] and ok.stdout.rstrip().endswith(" s")  # the total time
    progress = ok.stderr.splitlines()  # a line per check as it ends, on stderr
    assert len(progress) == 21 and progress[-1].startswith("[21/21] ") and all("ACP-" in line for line in progress)
    assert "Task was destroyed" not in ok.stderr and "Traceback" not in ok.stderr  # a clean exit
    junit = tmp_path / "report.xml"
    bad = subprocess.run([*base, "--json", "--junit", str(junit), "--only", "ACP-RESUME-001", "ACP-LOAD-001", "--",
                          *agent(tmp_path, "--replay-on-resume")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    suite = ElementTree.parse(junit).getroot()  # a standard parser reads it
    assert (suite.tag, suite.get("tests"), suite.get("failures")) == ("testsuite", "2", "1")
    failures = [case.get("name", "") for case in suite.iter("testcase") if case.find("failure") is not None]
    assert len(failures) == 1 and failures[0].startswith("ACP-RESUME-001 ")
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
    (profiles / "mine.toml").write_text(f'id = "mine"\ncommand = {json.dumps(agent(tmp_path))}\n'
                                        'env = { ACP_CHECK_PROBE = "1" }\n')
    by_profile = subprocess.run([*base, "--agent", "mine", "--agents-dir", str(profiles), "--only", "ACP-INIT-001"],
                                capture_output=True, text=True, timeout=120)
    assert by_profile.returncode == 0 and "1 passed" in by_profile.stdout, by_profile.stderr
    nope = subprocess.run([*base, "--agent", "nope"], capture_output=True, text=True, timeout=60)
    assert nope.returncode == 2 and "no agent profile 'nope'" in nope.stderr


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
