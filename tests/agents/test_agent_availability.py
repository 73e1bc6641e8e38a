"""Whether an agent is there: `found` only when its own command is, a package runner's agent "downloads on first
start", and a failed download is named from what the runner said on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.profiles import AgentProfile, download_failed


def executable(directory: Path, name: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)


@pytest.mark.parametrize(("command", "on_path", "expected", "words"), [
    (["my-agent", "--acp"], ["my-agent"], "installed", "found"),
    (["npx", "-y", "@scope/agent"], ["npx"], "downloads_on_first_start", "downloads on first start (npx)"),
    (["uvx", "some-agent"], ["uvx"], "downloads_on_first_start", "downloads on first start (uvx)"),
    (["npx", "-y", "@scope/agent"], [], "not_found", "not found"),
    (["my-agent"], [], "not_found", "not found"),
])
def test_availability_says_found_only_for_the_agent_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           command: list[str], on_path: list[str], expected: str,
                                                           words: str) -> None:
    for name in on_path:
        executable(tmp_path, name)
    monkeypatch.setenv("PATH", str(tmp_path))
    profile = AgentProfile(id="a", command=command)
    assert profile.availability() == expected
    assert profile.availability_words() == words
    assert profile.command_found() is (expected == "installed")


# what a package runner printed -> whether it is a failed download
DOWNLOADS: list[tuple[list[str], list[str], bool]] = [
    (["npx", "-y", "@scope/agent"], ["npm error code ENOTFOUND", "npm error network request to https://…"], True),
    (["npx", "-y", "@scope/agent"], ["npm ERR! code EAI_AGAIN"], True),
    (["uvx", "agent"], ["error: Failed to fetch: `https://pypi.org/simple/agent/`"], True),
    (["npx", "-y", "@scope/agent"], ["Error: ANTHROPIC_API_KEY is not set"], False),  # the agent ran: its own words
    (["my-agent"], ["npm error code ENOTFOUND"], False),  # not a runner: not a download
]


@pytest.mark.parametrize(("argv", "stderr", "failed"), DOWNLOADS)
def test_a_failed_download_is_named(argv: list[str], stderr: list[str], failed: bool) -> None:
    said = download_failed(argv, stderr)
    assert (said is not None) is failed
    if said is not None:
        assert said.startswith(f"{argv[0]} could not download {argv[-1]}") and "network" in said


def test_the_agents_command_says_what_is_there(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir, "npx")
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "viarunner.toml").write_text('id = "viarunner"\ncommand = ["npx", "-y", "@scope/agent"]\n')
    (agents / "missing.toml").write_text('id = "missing"\ncommand = ["no-such-agent-here"]\n')
    run = subprocess.run([sys.executable, "-m", "gateway", "agents", "--agents-dir", str(agents)],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}"})
    lines = {line.split()[0]: line for line in run.stdout.splitlines()}
    assert run.returncode == 0
    assert "downloads on first start (npx)" in lines["viarunner"]
    assert " not found " in lines["missing"]
    assert " found " not in lines["claude"]  # a shipped npx profile is never "found" because npx is
