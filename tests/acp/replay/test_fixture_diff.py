"""`acp-gateway fixtures diff` (acp/replay/diff.py): what changed between two recordings of an agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from acp.replay.diff import Change, diff, summarize, timing_class
from acp.replay.script import AGENT, CLIENT, Entry, Script
from tests.support.paths import REPO

ROOT = REPO


def recording(caps: dict[str, Any], unknown_answer: dict[str, Any], updates: list[str], load_after: float,
              version: str) -> list[Script]:
    frames = [
        (0.0, CLIENT, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}),
        (0.01, AGENT, {"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": 1, "agentCapabilities": caps, "agentInfo": {"name": "a", "version": version},
            "authMethods": [{"id": "key", "name": "Key"}]}}),
        (0.02, CLIENT, {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "<cwd>"}}),
        *[(0.03, AGENT, {"jsonrpc": "2.0", "method": "session/update", "params": {
            "sessionId": "s", "update": {"sessionUpdate": kind}}}) for kind in updates],
        (0.04, AGENT, {"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s", "modes": {
            "currentModeId": "a", "availableModes": [{"id": "a", "name": "A"}]}}}),
        (1.0, CLIENT, {"jsonrpc": "2.0", "id": 2, "method": "session/load", "params": {"sessionId": "probe"}}),
        (1.0 + load_after, AGENT, {"jsonrpc": "2.0", "id": 2, **unknown_answer}),
    ]
    return [Script("restore", tuple(Entry(d, m, t) for t, d, m in frames))]


OLD = recording({"loadSession": True, "sessionCapabilities": {"resume": {}}},
                {"error": {"code": -32603, "message": "internal"}}, ["available_commands_update"], 0.05, "1.0")
NEW = recording({"loadSession": True, "sessionCapabilities": {"close": {}}},
                {"error": {"code": -32002, "message": "not found"}}, ["available_commands_update", "usage_update"],
                2.5, "2.0")


def test_a_recording_diffed_with_itself_says_nothing_changed() -> None:
    assert diff(summarize(OLD), summarize(OLD)) == []


def test_changes_between_two_versions() -> None:
    changes = diff(summarize(OLD), summarize(NEW))
    assert Change("agent", "version", "1.0", "2.0") in changes
    assert Change("capability", "sessionCapabilities.resume", "{}", None) in changes  # lost
    assert Change("capability", "sessionCapabilities.close", None, "{}") in changes  # gained
    assert Change("answer", "restore: session/load #1", "error -32603", "error -32002") in changes
    assert Change("update_kind", "usage_update", None, "used") in changes
    assert Change("timing", "restore: session/load #1", "instant", "slow") in changes
    words = [c.words() for c in changes]
    assert "capability sessionCapabilities.resume: gone (was {})" in words
    assert "answer restore: session/load #1: error -32603 -> error -32002" in words


def test_timing_classes() -> None:
    assert [timing_class(s) for s in (0.0, 0.09, 0.5, 3.0, 30.0)] == ["instant", "instant", "fast", "slow",
                                                                      "very slow"]


def test_an_upgrade_of_a_real_agent_names_its_capability_and_error_code_changes() -> None:
    """qwen-code 0.15.10 (the corpus) against 0.24.4 (recorded the same way into fixtures/drift/)."""
    old, new = ROOT / "fixtures/agents/qwen-code@0.15.10", ROOT / "fixtures/drift/qwen-code@0.24.4"
    said = subprocess.run([sys.executable, "-m", "gateway.cli", "fixtures", "diff", str(old), str(new)],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert said.startswith("qwen-code@0.15.10 -> qwen-code@0.24.4:")
    assert "agent version: 0.15.10 -> 0.24.4" in said
    assert "capability _meta.imageCapability.maxImagesPerTurn: new (4)" in said
    # 0.15.10 advertised resume and answered -32601; 0.24.4 resumes. Its load of an unknown session no longer
    # answers as if it existed: -32002.
    assert "answer restore_known: session/resume #1: error -32601 -> result {configOptions, models, modes}" in said
    assert "answer restore_unknown: session/load #1: result {configOptions, models, modes} -> error -32002" in said
    as_json = orjson.loads(subprocess.run([sys.executable, "-m", "gateway.cli", "fixtures", "diff", "--json", str(old),
                                           str(new)], capture_output=True, timeout=60, check=True).stdout)
    areas = {c["area"] for c in as_json["changes"]}
    assert {"agent", "capability", "answer", "auth", "offer"} <= areas
    assert {"area": "answer", "subject": "restore_unknown: session/resume #1", "old": "error -32601",
            "new": "error -32002"} in as_json["changes"]


def test_a_missing_recording_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "fixtures", "diff", str(tmp_path), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no recording (*.jsonl) in this directory" in done.stderr
