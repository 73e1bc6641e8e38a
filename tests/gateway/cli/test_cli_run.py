"""`acp-gateway run --json` end to end: a real CLI process driving the reference agent."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp.models import STATE_UPDATE_KINDS
from agents.catalog import load_profiles
from agents.profiles import ProfileError, load_profile


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "run", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, env=env)
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


def summary(lines: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def said(lines: list[str]) -> list[dict[str, Any]]:
    """The updates printed before the summary that are the conversation (not the agent's commands or usage)."""
    return [u for u in map(json.loads, lines[:-1]) if u["update"]["sessionUpdate"] not in STATE_UPDATE_KINDS]


@pytest.fixture
def agent_cmd(agent_state: Path) -> list[str]:
    return [sys.executable, "-m", "agents.reference", "--state-dir", str(agent_state)]


@pytest.fixture
def saved_token(workdir: Path, agent_cmd: list[str]) -> str:
    rc, lines, _ = run_cli("--json", "--cwd", str(workdir), "--prompt", "remember me", "--", *agent_cmd, cwd=workdir)
    assert rc == 0
    token: str = summary(lines)["session_id"]
    return token


def test_new(workdir: Path, agent_cmd: list[str]) -> None:
    rc, lines, _ = run_cli("--json", "--cwd", str(workdir), "--prompt", "hello", "--", *agent_cmd, cwd=workdir)
    out = summary(lines)
    assert rc == 0
    assert out["agent"] == "command" and out["protocol_version"] == 1 and out["stop_reason"] == "end_turn"
    assert out["updates"] == len(lines) - 1 and out["session_id"].startswith("ref-")
    assert out["restore"] == {"plan": "new", "attempts": [{"method": "session/new", "error": None}],
                              "outcome": "new", "failure_class": None}
    assert [u["update"]["content"]["text"] for u in said(lines)] == ["echo: hello"]
    kinds = [json.loads(line)["update"]["sessionUpdate"] for line in lines[:-1]]
    assert "available_commands_update" in kinds and "usage_update" in kinds  # every update, for machines


def test_restored_by_resume(workdir: Path, agent_cmd: list[str], saved_token: str) -> None:
    rc, lines, _ = run_cli("--json", "--cwd", str(workdir), "--resume-token", saved_token, "--prompt", "again",
                           "--", *agent_cmd, cwd=workdir)
    out = summary(lines)
    assert rc == 0 and out["session_id"] == saved_token and len(said(lines)) == 1
    assert out["restore"] == {"plan": "resume", "attempts": [{"method": "session/resume", "error": None}],
                              "outcome": "restored", "failure_class": None}


def test_restored_by_load_after_method_not_found(workdir: Path, agent_cmd: list[str], saved_token: str) -> None:
    rc, lines, _ = run_cli("--json", "--cwd", str(workdir), "--resume-token", saved_token, "--", *agent_cmd,
                           "--fault", "session/resume=unsupported", cwd=workdir)
    out = summary(lines)
    assert rc == 0 and out["restore"]["outcome"] == "restored"
    assert out["restore"]["attempts"] == [
        {"method": "session/resume", "error": {"code": -32601, "message": "Method not found"}},
        {"method": "session/load", "error": None},
    ]
    assert [u["replay"] for u in said(lines)] == [True, True]


def test_fallback_new(workdir: Path, agent_cmd: list[str]) -> None:
    rc, lines, err = run_cli("--json", "--cwd", str(workdir), "--resume-token", "ref-forgotten", "--", *agent_cmd,
                             cwd=workdir)
    out = summary(lines)
    assert rc == 0
    assert out["restore"]["outcome"] == "fallback_new" and out["restore"]["failure_class"] == "unknown_session"
    assert [a["method"] for a in out["restore"]["attempts"]] == ["session/resume", "session/new"]
    assert out["session_id"] != "ref-forgotten"
    assert "no longer knew session ref-forgotten" in err


def test_preserved_exits_3(workdir: Path, agent_cmd: list[str], saved_token: str) -> None:
    rc, lines, err = run_cli("--json", "--cwd", str(workdir), "--resume-token", saved_token, "--prompt", "x",
                             "--", *agent_cmd, "--fault", "session/resume=internal", cwd=workdir)
    out = summary(lines)
    assert rc == 3
    assert out["restore"]["outcome"] == "preserved" and out["restore"]["failure_class"] == "inconclusive"
    assert out["session_id"] is None and out["stop_reason"] is None
    assert "saved session id is kept" in err


CALLER_KEY = "ACME_API_KEY"  # not in the server's allowlist: only a caller's environment can give it
CALLER_KEY_VALUE = "dummy-acme-key-5f0c9e"


def test_run_and_record_give_the_agent_the_callers_environment(workdir: Path, agent_cmd: list[str]) -> None:
    """`run -- CMD` (here with `record -- CMD` as its agent, as an agent author records a session) is a local tool
    on the user's own behalf: the agent gets the caller's API key. The agent proves it by the key's digest, so the
    key itself is never said: neither the output nor the recording holds it."""
    recording = workdir.parent / "session.jsonl"
    env = {**os.environ, CALLER_KEY: CALLER_KEY_VALUE}
    rc, lines, err = run_cli("--cwd", str(workdir), "--prompt", f'/sh printf %s "${CALLER_KEY}" | sha256sum', "--",
                             sys.executable, "-m", "gateway", "record", "--out", str(recording), "--", *agent_cmd,
                             cwd=workdir, env=env)
    assert rc == 0, err
    digest = hashlib.sha256(CALLER_KEY_VALUE.encode()).hexdigest()
    assert any(line.startswith(digest) for line in lines), lines  # the agent had the caller's key, to the byte
    recorded = recording.read_text()
    assert digest in recorded  # the recording has the whole session: the agent's answer too
    assert CALLER_KEY_VALUE not in "\n".join(lines) + err + recorded


def test_agent_profile_by_id(workdir: Path, tmp_path: Path) -> None:
    rc, lines, _ = run_cli("--json", "--agent", "reference", "--cwd", str(workdir), "--prompt", "hi", cwd=workdir)
    assert rc == 0 and summary(lines)["agent"] == "reference"


@pytest.mark.parametrize(("args", "message"), [
    ((), "exactly one of --agent"),
    (("--agent", "nope"), "no agent profile 'nope'"),
    (("--", "/nonexistent/agent-binary"), "agent command not found"),
    (("--cwd", "/nonexistent/dir", "--", "true"), "does not exist"),
])
def test_usage_and_launch_errors_exit_2(workdir: Path, args: tuple[str, ...], message: str) -> None:
    rc, _, err = run_cli(*args, cwd=workdir)
    assert rc == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_launch_names_the_command_and_a_sign_in_the_variable_and_how_to_give_it(workdir: Path,
                                                                                   tmp_path: Path) -> None:
    """`run -- nosuchcmd` said "cannot launch agent 'command'"; an agent asking for a sign-in gave only
    `Authentication required (code -32000)`."""
    rc, _, err = run_cli("--", "nosuchcmd", "--flag", cwd=workdir)
    assert rc == 2 and "cannot launch agent `nosuchcmd --flag`" in err and "'command'" not in err, err
    agents = tmp_path / "profiles"
    agents.mkdir()
    command = [sys.executable, "-m", "agents.reference", "--state-dir", str(tmp_path / "locked-state"),
               "--require-auth", "--auth-env", "REF_TOKEN"]
    (agents / "locked.toml").write_text(f'id = "locked"\ncommand = {json.dumps(command)}\n'
                                        'sign_in_vars = ["REF_TOKEN"]\n')
    env = {k: v for k, v in os.environ.items() if k != "REF_TOKEN"}
    rc, _, err = run_cli("--agent", "locked", "--agents-dir", str(agents), "--prompt", "hi", cwd=workdir, env=env)
    assert rc == 2 and "(code -32000)" in err, err
    assert "the agent needs a sign-in: set REF_TOKEN; the profile locked passes only its own [env]" in err, err
    assert "REF_TOKEN=… acp-gateway run -- " in err


def test_shipped_profiles() -> None:
    profiles = load_profiles()
    assert set(profiles) >= {"codex", "claude", "gemini", "opencode", "copilot", "auggie", "amp", "reference"}
    native = {pid for pid, p in profiles.items() if p.native_session_resume}
    assert native == {"codex", "copilot", "auggie", "opencode", "claude", "reference"}
    assert profiles["claude"].argv("tok") == ["npx", "-y", "@agentclientprotocol/claude-agent-acp"]  # by ACP
    assert profiles["claude"].sign_in_vars == ["ANTHROPIC_API_KEY"]  # the key it reads: asked before a prompt
    assert profiles["reference"].argv()[0] == sys.executable
    assert "@zed-industries/codex-acp" in profiles["codex"].command


@pytest.mark.parametrize(("text", "message"), [
    ('name = "x"\ncommand = ["a"]\n', "key 'id' is required"),
    ('id = "x"\ncommand = []\n', "key 'command'"),
    ('id = "x"\ncommand = ["a"]\nnative_session_resume = "yes"\n', "key 'native_session_resume'"),
    ('id = "x"\ncommand = ["a"]\ncolour = 1\n', "key 'colour' is not a profile key"),
    ('id = "x"\ncommand = ["a"\n', "not valid TOML"),
    ('id = "x"\ncommand = ["a"]\n[[mcp_servers]]\nname = "m"\ncommand = "rel"\n', "key 'mcp_servers': "
     "Value error, MCP server mcp_servers.0.command: Value error, must be an absolute path"),
    ('id = "x"\ncommand = ["a"]\n[config]\nmodel = 3\n', "key 'config.model'"),
    ('id = "x"\ncommand = ["a"]\nadditional_directories = ["docs"]\n', "key 'additional_directories'"),
])
def test_bad_profile_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_agents_dir_overrides_shipped(tmp_path: Path) -> None:
    (tmp_path / "ref.toml").write_text('id = "reference"\ncommand = ["my-agent"]\n')
    assert load_profiles([tmp_path])["reference"].command == ["my-agent"]


def test_bad_profile_on_the_command_line(tmp_path: Path, workdir: Path) -> None:
    (tmp_path / "bad.toml").write_text('id = "bad"\n')
    rc, _, err = run_cli("--agents-dir", str(tmp_path), "--agent", "bad", cwd=workdir)
    assert rc == 2 and "bad.toml: key 'command' is required" in err and "Traceback" not in err
