"""Agents added from the ACP registry snapshot, installed for real from npm and PyPI, pinned: an npx agent
(claude-agent-acp, whose version `make interop` already has in npm's cache) and a uvx agent (minion-code), each
started by a real gateway with dummy keys (their model calls would fail; their sessions start), the gateway killed
with -9 and restarted, each session restored by the very install it started with. Then an update beside the old
version (pi-acp), which sessions started before it do not see; an install changed after it was made, found by
`agents doctor` and refused at launch; and the protocol matrix in its three formats."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.registry import installer
from agents.registry.index import SNAPSHOT
from tests.gateway_harness import GatewayProcess, running
from tests.support.paths import REPO

ROOT = REPO
# Dummy keys: model calls fail (a closed local port answers at once), sessions start. Kept in each agent's
# settings.toml, which survives updates.
SETTINGS = {
    "claude-acp": 'env = { ANTHROPIC_API_KEY = "sk-ant-dummy-registry-key", ANTHROPIC_BASE_URL = "http://127.0.0.1:9",'
                  ' IS_SANDBOX = "1" }\n',
    "minion-code": 'env = { OPENAI_API_KEY = "sk-dummy-registry-key", OPENAI_BASE_URL = "http://127.0.0.1:9" }\n',
}


def gateway_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def agents_cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gateway_cli("agents", *args, "--state-dir", str(state))


def processes_running(path_part: str) -> list[str]:
    """The command lines of the processes running something under `path_part`."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if path_part in cmdline:
                found.append(cmdline)
    return found


def gateway_in(state: Path, tmp_path: Path) -> tuple[GatewayProcess, Path]:
    """A gateway (not started) on the registry installs' state directory, and a working directory for sessions."""
    agents_dir, work = tmp_path / "agents", tmp_path / "work"
    agents_dir.mkdir()
    work.mkdir()
    return GatewayProcess(state, agents_dir, "--workspace-root", str(tmp_path)), work


@pytest.fixture(scope="module")
def state() -> Path:
    """One state directory for the module, its first installs made in the background from the start of the run
    (tests/registry_prefetch.py: a 700 MB venv among them)."""
    from tests import registry_prefetch

    return registry_prefetch.state_dir()


@pytest.fixture(scope="module")
def installed(state: Path) -> dict[str, Any]:
    """claude-acp (npx) and minion-code (uvx) added from the shipped snapshot (`agents add ID@VERSION --no-probe`),
    at versions this machine's registries carry (the snapshot's own may be missing from a mirror)."""
    from tests import registry_prefetch

    results = registry_prefetch.wait()
    records = {}
    for spec in registry_prefetch.SPECS:
        added = results[spec]
        assert added["returncode"] == 0, added["output"]
        agent_id, version = spec.split("@")
        records[agent_id] = orjson.loads((state / "agents" / "installs" / agent_id / version / "install.json")
                                         .read_bytes())
        (state / "agents" / "installs" / agent_id / "settings.toml").write_text(SETTINGS[agent_id])
    return records


def test_adds_are_pinned_by_version_and_hashes_and_never_run_a_package_runner(state: Path,
                                                                                installed: dict[str, Any]) -> None:
    claude = state / "agents" / "installs" / "claude-acp" / "0.101.0"
    lock = orjson.loads((claude / "package-lock.json").read_bytes())
    package = lock["packages"]["node_modules/@agentclientprotocol/claude-agent-acp"]
    assert package["version"] == "0.101.0" and package["integrity"].startswith("sha512-")
    assert all("integrity" in p for name, p in lock["packages"].items() if name and not p.get("link"))
    minion = state / "agents" / "installs" / "minion-code" / "0.1.45"
    pins = installer.requirement_pins((minion / "requirements.txt").read_text())  # as `uv pip compile` wrote it
    assert pins["minion-code"][0] == "0.1.45"
    assert all(len(digest) == 64 for _, hashes in pins.values() for digest in hashes)
    assert all(hashes for _, hashes in pins.values()) and len(pins) > 10
    listing = agents_cli(state, "list", "--json")
    rows = {r["id"]: r for r in orjson.loads(listing.stdout)}
    assert rows["claude-acp"]["version"] == "0.101.0" and rows["minion-code"]["version"] == "0.1.45"
    for agent_id, row in (("claude-acp", rows["claude-acp"]), ("minion-code", rows["minion-code"])):
        command = row["command"].split()
        assert command[0].startswith(str(state / "agents" / "installs" / agent_id)), command
        assert not {"npx", "uvx", "@latest"} & set(command)
    assert "[installed: 0.101.0]" in agents_cli(state, "search", "claude").stdout


async def test_sessions_of_registry_agents_survive_kill9_on_the_same_install(state: Path, installed: dict[str, Any],
                                                                            tmp_path: Path) -> None:
    gw, work = gateway_in(state, tmp_path)
    sessions = {}
    async with running(gw):
        client = await gw.client()
        for agent_id, version in (("claude-acp", "0.101.0"), ("minion-code", "0.1.45")):
            view = await client.call("task.session.start", {"agent": agent_id, "cwd": str(work), "wait_ready": True},
                                     timeout=180)
            assert view["state"] == "WAITING_FOR_INPUT", view
            assert view["agent_version"] == version and view["is_agent_running"]
            sessions[agent_id] = view["session_id"]
            assert processes_running(f"/installs/{agent_id}/{version}/tree/")
        info = await client.call("gateway.info")
        shown = {a["id"]: a for a in info["agents"]}
        assert shown["claude-acp"]["version"] == "0.101.0"
        assert shown["minion-code"]["installed_versions"] == ["0.1.45"]
        await client.close()
        await gw.kill9()
        await gw.start()
        client = await gw.client()
        for agent_id, version in (("claude-acp", "0.101.0"), ("minion-code", "0.1.45")):
            view = await client.call("task.session.resume", {"session_id": sessions[agent_id]}, timeout=180)
            assert view["is_agent_running"] and view["agent_version"] == version, view
            assert processes_running(f"/installs/{agent_id}/{version}/tree/")
        await client.close()
    log = "".join(gw.stderr_lines)
    assert "sk-ant-dummy-registry-key" not in log and "sk-dummy-registry-key" not in log


def _registry_with(state: Path, tmp_path: Path, agent_id: str, version: str) -> None:
    """The shipped snapshot with `agent_id` at `version`, given to `agents refresh` as a newer index."""
    index = orjson.loads(SNAPSHOT.read_bytes())
    for entry in index["agents"]:
        if entry["id"] == agent_id:
            entry["version"] = version
            entry["distribution"]["npx"]["package"] = f"{agent_id}@{version}"
    newer = tmp_path / "registry.json"
    newer.write_bytes(orjson.dumps(index))
    refreshed = agents_cli(state, "refresh", "--from", str(newer))
    assert refreshed.returncode == 0, refreshed.stderr


async def test_update_installs_beside_and_a_session_keeps_its_version_until_a_fresh_restart(
        state: Path, tmp_path: Path) -> None:
    _registry_with(state, tmp_path, "pi-acp", "0.0.23")
    added = await asyncio.to_thread(agents_cli, state, "add", "pi-acp")
    assert added.returncode == 0, added.stderr
    assert "initialize: ok" in added.stdout and "session/new: auth required" in added.stdout
    assert "next: sign in with" in added.stdout  # pi-acp asks for a sign-in (a terminal login): said, with the way
    gw, work = gateway_in(state, tmp_path)
    async with running(gw):
        client = await gw.client()
        view = await client.call("task.session.start", {"agent": "pi-acp", "cwd": str(work), "wait_ready": True},
                                 timeout=120)
        assert view["agent_version"] == "0.0.23"
        session = view["session_id"]
        _registry_with(state, tmp_path, "pi-acp", "0.0.24")
        updated = await asyncio.to_thread(agents_cli, state, "update", "pi-acp")
        assert updated.returncode == 0 and "0.0.23 -> 0.0.24" in updated.stdout, updated.stderr
        listed = await asyncio.to_thread(agents_cli, state, "list", "--json")
        listing = {r["id"]: r for r in orjson.loads(listed.stdout)}
        assert listing["pi-acp"]["version"] == "0.0.24"
        assert listing["pi-acp"]["installed_versions"] == ["0.0.23", "0.0.24"]
        # Relaunched (it asks for a sign-in again): by the version it started with, as the agent itself says
        resumed = await client.call("task.session.resume", {"session_id": session}, timeout=120)
        assert resumed["agent_version"] == "0.0.23"
        assert resumed["config"]["agent_info"]["version"] == "0.0.23", resumed["config"]
        fresh = await client.call("task.session.recover", {"session_id": session, "action": "fresh_start"},
                                  timeout=120)
        assert fresh["agent_version"] == "0.0.24", fresh
        assert fresh["config"]["agent_info"]["version"] == "0.0.24"
        new = await client.call("task.session.start", {"agent": "pi-acp", "cwd": str(work)}, timeout=120)
        assert new["agent_version"] == "0.0.24"
        await client.close()


async def test_a_changed_install_is_found_by_doctor_and_refused_at_launch(state: Path, tmp_path: Path) -> None:
    if not (state / "agents" / "installs" / "pi-acp" / "0.0.24").is_dir():
        _registry_with(state, tmp_path, "pi-acp", "0.0.24")
        assert (await asyncio.to_thread(agents_cli, state, "add", "pi-acp", "--no-probe")).returncode == 0
    tree = state / "agents" / "installs" / "pi-acp" / "0.0.24" / "tree"
    target = tree / "node_modules" / "pi-acp" / "package.json"
    assert (await asyncio.to_thread(agents_cli, state, "doctor", "pi-acp", "--no-check")).returncode == 0
    target.chmod(0o644)
    target.write_text(target.read_text().replace('"name"', '"name" ', 1))  # one byte more: a changed file
    doctor = await asyncio.to_thread(agents_cli, state, "doctor", "pi-acp", "--no-check")
    assert doctor.returncode == 1
    assert "CHANGED since it was installed" in doctor.stdout and "node_modules/pi-acp/package.json" in doctor.stdout
    assert "agents add pi-acp@0.0.24 --force" in doctor.stdout
    gw, work = gateway_in(state, tmp_path)
    async with running(gw):
        client = await gw.client()
        view = await client.call("task.session.start", {"agent": "pi-acp", "cwd": str(work), "wait_ready": True},
                                 timeout=120)
        assert view["state"] == "FAILED" and not view["is_agent_running"], view
        assert "changed after it was installed" in view["error_message"]
        assert "acp-gateway agents doctor pi-acp" in view["error_message"]
        await client.close()
    assert not processes_running("/installs/pi-acp/0.0.24/tree/")
    check = await asyncio.to_thread(gateway_cli, "check", "--agent", "pi-acp", "--state-dir", str(state))
    assert check.returncode == 2 and "changed after it was installed" in check.stderr
    repaired = await asyncio.to_thread(agents_cli, state, "add", "pi-acp@0.0.24", "--force", "--no-probe")
    assert repaired.returncode == 0, repaired.stderr
    assert (await asyncio.to_thread(agents_cli, state, "doctor", "pi-acp", "--no-check")).returncode == 0


def test_the_matrix_writes_text_json_and_junit(state: Path, installed: dict[str, Any], tmp_path: Path) -> None:
    out_json, out_junit = tmp_path / "matrix.json", tmp_path / "matrix.xml"
    matrix = agents_cli(state, "matrix", "--only", "ACP-INIT-001", "ACP-SESSION-001", "--json", str(out_json),
                        "--junit", str(out_junit))
    assert matrix.returncode == 0, matrix.stderr
    lines = {line.split()[0]: line.split()[1:] for line in matrix.stdout.splitlines() if line.strip()}
    assert {"claude-acp", "minion-code"} <= set(lines["agent"])
    assert set(lines["ACP-INIT-001"]) == {"pass"}
    data = orjson.loads(out_json.read_bytes())
    by_id = {a["id"]: a for a in data["agents"]}
    assert by_id["claude-acp"]["initialize"]["status"] == "ok"
    assert [c["id"] for c in by_id["minion-code"]["checks"]] == ["ACP-INIT-001", "ACP-SESSION-001"]
    suites = ET.fromstring(out_junit.read_bytes())
    assert suites.tag == "testsuites"
    names = {s.get("name") for s in suites.findall("testsuite")}
    assert {"claude-acp@0.101.0", "minion-code@0.1.45"} <= names
    for suite in suites.findall("testsuite"):
        assert int(suite.get("tests", "0")) == len(suite.findall("testcase"))
    shown = {r["id"]: r for r in orjson.loads(agents_cli(state, "list", "--json").stdout)}
    assert shown["claude-acp"]["last_check"]["verdict"] in ("conformant", "not_shown", "not_conformant")
    written = [out_json, out_junit, *(state / "agents").glob("installs/*/*/*.json")]
    for path in written:  # the keys in settings.toml reach the agents, never what is written of them
        text = path.read_text(errors="replace")
        assert "sk-ant-dummy-registry-key" not in text and "sk-dummy-registry-key" not in text, path
    assert "sk-ant-dummy-registry-key" not in matrix.stdout + matrix.stderr
