"""Where the gateway's own git and ssh runs start (docs/security.md, spawn sites): from `/`, an absolute program, a
fixed environment. A `git`, `sh` and `ssh` planted in an owner's repository — in the directory git works in, and on
a PATH that directory would name — never run, confined or not; neither do the repository's hooks; ssh gets nothing
of the gateway's environment but PATH, HOME and the SSH agent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.agenthost.ssh import SSH, SshOptions, SshTarget, ssh_env
from gateway.runtime.checkpoints import Checkpoints, GitSite
from gateway.runtime.git_runner import GIT, GitPlace, GitRunner
from tests.gateway.runtime.test_worktrees import make_repo


@pytest.mark.parametrize("confined", [False, True])
async def test_git_runs_no_program_planted_in_the_repository(tmp_path: Path, confined: bool) -> None:
    marker = tmp_path / "planted-ran"
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    payload = f"#!/bin/sh\n: > {marker}\n"
    for planted in (repo / "git", repo / "sh", repo / "bin" / "git", repo / ".git" / "hooks" / "pre-commit",
                    repo / ".git" / "hooks" / "reference-transaction"):
        planted.parent.mkdir(exist_ok=True)
        planted.write_text(payload)
        planted.chmod(0o755)
    (repo / "a.txt").write_text("changed\n")
    runner = GitRunner(tmp_path / "state")
    place = GitPlace((str(repo),), "owner", confined)
    assert GIT is not None and os.path.isabs(GIT)
    argv = runner.argv(place, str(repo), ["status"])
    assert os.path.isabs(argv[0]) and (argv[0] == GIT) is (not confined)
    site = GitSite("s-launch", str(repo), str(repo / ".git" / "acp-checkpoints-launch.index"), place, None,
                   str(repo / ".git" / "index"))
    checkpoints = Checkpoints(runner)
    await checkpoints.take(site, None)
    # The planted programs are files like any other to git: listed, never run.
    assert [f["path"] for f in (await checkpoints.diff(site, "head"))["files"]] == ["a.txt", "bin/git", "git", "sh"]
    assert not marker.exists(), "a program planted in the repository ran"


def test_ssh_starts_absolute_with_a_fixed_environment() -> None:
    assert os.path.isabs(SSH)
    argv = SshTarget("dev", "h", 22).argv(SshOptions("/k", "/kh"), "true")
    assert argv[0] == SSH
    leaky = {"PATH": "/planted/bin:/usr/bin", "HOME": "/home/op", "LD_PRELOAD": "/planted/x.so",
             "PYTHONPATH": "/planted", "SSH_AUTH_SOCK": "/run/agent.sock", "GIT_DIR": "/planted"}
    assert ssh_env(leaky) == {"PATH": "/usr/bin:/bin", "HOME": "/home/op", "SSH_AUTH_SOCK": "/run/agent.sock"}
