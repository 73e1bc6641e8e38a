"""`acp-gateway check` against real third-party agents, pinned by `make interop` and run offline.

pi-acp 0.0.24: a terminal sign-in advertised to a client that did not offer terminal auth (the conformance kit's
ACP-AUTH-002 finding too), and `-32602` for `session/load` of an unknown session where `-32002` is what a client can
act on. qwen-code 0.15.10, signed in with a dummy key (its model unreachable): the kit's two findings — a model
option whose current value is not among its values, `-32603` for an unknown method — and `session/resume` advertised
but answered `-32601`, `session/load` of an unknown session answered as if it existed, a config value it does not
offer accepted. With no model to reach, every check that needs a turn is BLOCKED, never FAILed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acp.check import Result, Tier
from acp.check.options import CheckOptions
from acp.check.run import run_checks
from tests.third_party import INTEROP, interop_node

TURN_CHECKS = {"ACP-PROMPT-001", "ACP-UPDATE-001", "ACP-CANCEL-001", "ACP-LOAD-001", "ACP-CLIENTCAP-001",
               "ACP-PROMPT-003", "ACP-META-001"}


async def test_pi_acp_findings_are_reported_and_nothing_else_fails(tmp_path: Path) -> None:
    node = interop_node()
    pi_acp = INTEROP / "pi-acp" / "dist" / "index.js"
    if not pi_acp.exists():
        pytest.fail("pi-acp is not installed: `make interop` (part of `make test`) installs it")
    (tmp_path / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PATH": f"{node.parent}:{os.environ.get('PATH', '')}"}
    results = await run_checks([str(node), str(pi_acp)], env=env,
                               options=CheckOptions(agent_cwd=str(tmp_path), setup_timeout=30.0))
    by_id = {r.check.id: r for r in results}
    failed = {r.check.id for r in results if r.result is Result.FAIL}
    assert failed == {"ACP-AUTH-002", "ACP-UNKNOWN-001"}, {i: by_id[i].evidence for i in failed}
    assert "pi_terminal_login" in by_id["ACP-AUTH-002"].evidence
    assert by_id["ACP-AUTH-002"].transcript  # the initialize that says so
    assert "-32602" in by_id["ACP-UNKNOWN-001"].evidence
    # Offline it cannot make a session (auth_required): what needs one is blocked, saying how to unblock it.
    blocked = [r for r in results if r.result is Result.BLOCKED]
    assert by_id["ACP-PROMPT-001"].result is Result.BLOCKED
    assert all("run again" in r.evidence for r in blocked)
    assert by_id["ACP-INFO-001"].evidence.startswith("pi-acp 0.0.24")
    # The kit's ids stand beside ours in the report.
    assert by_id["ACP-AUTH-002"].check.tck == ("ACP-AUTH-002",) and by_id["ACP-AUTH-002"].check.tier is Tier.MANDATORY


async def test_qwen_code_findings_are_reported_and_turns_are_blocked(tmp_path: Path) -> None:
    node = interop_node()
    qwen = INTEROP / "@qwen-code" / "qwen-code" / "cli.js"
    if not qwen.exists():
        pytest.fail("qwen-code is not installed: `make interop` (part of `make test`) installs it")
    (tmp_path / "home").mkdir()
    # Signed in with a key that opens nothing (its model unreachable offline): sessions, no turns.
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PATH": f"{node.parent}:{os.environ.get('PATH', '')}",
           "OPENAI_API_KEY": "dummy-qwen-key"}
    results = await run_checks([str(node), str(qwen), "--acp", "--auth-type", "openai"], env=env,
                               options=CheckOptions(agent_cwd=str(tmp_path), setup_timeout=30.0))
    by_id = {r.check.id: r for r in results}
    failed = {r.check.id for r in results if r.result is Result.FAIL}
    # The kit's two findings on it: a model option whose current value is not among its values, and -32603 for an
    # unknown method (sent without params, it reads them first); and ours: resume advertised but -32601, load of an
    # unknown session answered as if it existed, a value not offered accepted.
    kit = {"ACP-CONFIG-001", "ACP-JSONRPC-004"}
    ours = {"ACP-CAPS-001", "ACP-UNKNOWN-001", "ACP-UNKNOWN-002", "ACP-CONFIG-004"}
    assert kit | ours <= failed, {r.check.id: (r.result, r.evidence) for r in results}
    assert failed <= kit | ours | {"ACP-SCHEMA-001"}  # (and a schema slip in one answer, which may come and go)
    assert '"model"' in by_id["ACP-CONFIG-001"].evidence and "-32603" in by_id["ACP-JSONRPC-004"].evidence
    assert "session/resume" in by_id["ACP-CAPS-001"].evidence
    assert all(by_id[c].result is Result.BLOCKED for c in TURN_CHECKS), {c: by_id[c].evidence for c in TURN_CHECKS}
