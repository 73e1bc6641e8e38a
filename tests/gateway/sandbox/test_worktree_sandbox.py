"""A worktree session under bubblewrap (docs/worktrees.md, docs/security.md): its agent sees its worktree and what
git needs of the repository — the object store, refs and its own worktree's state writable, the rest of `.git`
read-only — and nothing of the repository's checkout or of the other sessions' worktrees. The gateway's own git runs
(the worktree made, checkpoints, diff, merge) run as that agent does, with the repository's hooks and filters
unable to reach anything outside: a hostile owner's hook and clean filter each try to write a marker only the host
could, which must stay absent."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.gateway.runtime.test_worktrees import git, make_repo
from tests.gateway_harness import BOB, agent_said, running, two_owner_gateway
from tests.support.world import start


@pytest.fixture(autouse=True)
def tools() -> None:
    assert shutil.which("bwrap") and shutil.which("git"), "make test installs bubblewrap and git"


async def test_a_worktree_agent_sees_its_worktree_and_the_git_store_only(tmp_path: Path) -> None:
    outside = tmp_path / "escaped"  # tmp_path is not shown to any sandbox: only the host can create this
    gw = two_owner_gateway(tmp_path, config='sandbox = "bwrap"\n')
    repo = make_repo(tmp_path / "work" / "repo", {"a.txt": "one\n", ".gitattributes": "*.txt filter=evil\n"})
    payload = f"#!/bin/sh\n: > {outside}\n"
    for hook in ("post-checkout", "pre-commit", "reference-transaction"):
        (repo / ".git" / "hooks" / hook).write_text(payload)
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    git(repo, "config", "filter.evil.clean", f"sh -c ': > {outside}; cat'")
    git(repo, "config", "core.fsmonitor", f"sh -c ': > {outside}'")
    async with running(gw):
        bob = await gw.client(BOB)
        mine = await start(bob, repo, worktree={"repo": str(repo)})
        other = await start(bob, repo, worktree={"repo": str(repo)})
        sid, path = mine["session_id"], mine["cwd"]

        async def sh(command: str) -> str:
            return await agent_said(gw, BOB, sid, f"/sh {command}")

        # Its own worktree, and a commit on its branch (objects and refs writable).
        safe = "git -c core.hooksPath=/dev/null -c filter.evil.clean=cat -c core.fsmonitor=false -c user.name=b " \
               "-c user.email=b@example.com"
        said = await sh(f"echo mine > m.txt && {safe} add m.txt && {safe} commit -qm mine && echo committed")
        assert "committed" in said, said
        assert "mine" in git(repo, "log", "--format=%s", "-1", mine["worktree"]["branch"])
        # Nothing of the repository's checkout, nor of the other session's worktree or its git state.
        listing = await sh(f"ls -A {repo}; ls {repo}/.git/worktrees; test -e {other['cwd']} && echo SEEN-OTHER")
        assert ".git" in listing and "a.txt" not in listing and "SEEN-OTHER" not in listing, listing
        assert Path(path).name in listing and Path(other["cwd"]).name not in listing, listing
        # The repository's configuration and hooks are read-only: no hook planted for the user's own git.
        refused = await sh(f"touch {repo}/.git/hooks/planted {repo}/.git/config; echo rc=$?")
        assert "rc=0" not in refused, refused
        # The gateway's own runs: checkpoints (git add through the hostile filter), a diff, a merge.
        await sh("echo changed > a.txt")
        diff = await bob.call("task.session.diff", {"session_id": sid})
        assert {f["path"] for f in diff["files"]} >= {"a.txt", "m.txt"}
        points = await bob.call("task.session.checkpoints", {"session_id": sid})
        assert len(points["checkpoints"]) >= 4
        await bob.call("task.session.worktree.merge", {"session_id": sid})
        await bob.close()
    assert not (repo / ".git" / "hooks" / "planted").exists()
    assert (repo / "a.txt").read_text() == "changed\n"  # the merge reached the checkout
    assert not outside.exists(), "a hook or filter of the repository ran outside the sandbox"
