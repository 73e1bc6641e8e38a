"""`acp-gateway check` against a real third-party agent, pinned by `make interop` and run offline: pi-acp 0.0.24.
Its findings are the ACP conformance kit's too — a terminal sign-in advertised to a client that did not offer
terminal auth (kit ACP-AUTH-002) — and one only ours has: `-32602` for `session/load` of an unknown session where
`-32002` is what a client can act on. With no model to reach, every check that needs a session or a turn is
BLOCKED, never FAILed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acp.conformance import Result, Tier
from acp.conformance_options import CheckOptions
from acp.conformance_run import run_checks
from tests.third_party import INTEROP, interop_node


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
