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

from gateway.clients.client import RpcCallError
from gateway.error_codes import WORKSPACE_MISSING
from tests.gateway.runtime.test_worktrees import git, make_repo, tree_files
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


async def test_what_bob_swaps_under_his_sessions_never_reaches_alice(tmp_path: Path) -> None:
    """The attacks of a hostile owner's trial, each now refused: a repository given through a link (kept resolved,
    and refused once the link is swapped), a worktree swapped for a link to another owner's repository, a `.git`
    file the agent points at a gitdir of its own; and deleting one worktree session breaks no other."""
    work = tmp_path / "work"
    gw = two_owner_gateway(tmp_path, config=f'sandbox = "bwrap"\nworkspace_roots = ["{work / "alice"}"]\n',
                           bob=f'workspace_roots = ["{work / "bob"}"]\n')
    (work / "alice").mkdir()
    alice_repo = make_repo(work / "alice" / "repo", {"secret.txt": "ALICE\n"})
    (work / "bob").mkdir()
    bob_repo = make_repo(work / "bob" / "real", {"x.txt": "x\n"})
    (work / "bob" / "link").symlink_to(bob_repo)
    async with running(gw):
        bob = await gw.client(BOB)
        linked = await start(bob, work / "bob", worktree={"repo": str(work / "bob" / "link")})
        assert linked["worktree"]["repo"] == str(bob_repo)  # kept resolved
        other = await start(bob, work / "bob", worktree={"repo": str(bob_repo)})
        plain = await start(bob, work / "bob")

        # Deleting one worktree session leaves the other's worktree registered and working.
        await bob.call("task.session.delete", {"session_id": linked["session_id"]})
        assert (await bob.call("task.session.diff", {"session_id": other["session_id"]}))["files"] == []

        # The repository swapped for a link to alice's: refused before any git run.
        async def bob_sh(command: str) -> str:
            return await agent_said(gw, BOB, plain["session_id"], f"/sh {command}")
        await bob_sh(f"mv {bob_repo} {work / 'bob' / 'moved'} && ln -s {alice_repo} {bob_repo} && echo swapped")
        for method in ("task.session.diff", "task.session.checkpoints"):
            with pytest.raises(RpcCallError) as refused:
                await bob.call(method, {"session_id": other["session_id"]})
            assert refused.value.code == WORKSPACE_MISSING and "no longer where it was" in refused.value.message
        await bob_sh(f"rm {bob_repo} && mv {work / 'bob' / 'moved'} {bob_repo} && echo back")
        assert (await bob.call("task.session.diff", {"session_id": other["session_id"]}))["files"] == []

        # The worktree swapped for a link to alice's repository (bob's session there can reach his worktrees).
        path = Path(other["cwd"])
        roots = await start(bob, path.parent)
        await agent_said(gw, BOB, roots["session_id"], f"/sh mv {path} {path}.bak && ln -s {alice_repo} {path}")
        with pytest.raises(RpcCallError) as swapped:
            await bob.call("task.session.rewind", {"session_id": other["session_id"], "checkpoint": 1})
        assert swapped.value.code == WORKSPACE_MISSING and "no longer exists" in swapped.value.message
        await agent_said(gw, BOB, roots["session_id"], f"/sh rm {path} && mv {path}.bak {path}")

        # Its agent points its worktree's .git at a gitdir of its own whose filter would plant a hook.
        said = await agent_said(gw, BOB, other["session_id"],
                                "/sh mkdir -p .fake && cp -r $(sed 's/gitdir: //' .git)/. .fake/ && "
                                "printf 'gitdir: %s/.fake\\n' $PWD > .git && echo pointed")
        assert "pointed" in said, said
        with pytest.raises(RpcCallError) as pointed:
            await bob.call("task.session.diff", {"session_id": other["session_id"]})
        assert pointed.value.code == WORKSPACE_MISSING and "no longer a checkout" in pointed.value.message

        # A file name that is no UTF-8: listed, escaped.
        third = await start(bob, work / "bob", worktree={"repo": str(bob_repo)})
        await agent_said(gw, BOB, third["session_id"], "/sh touch \"$(printf 'bad\\377name')\"")
        diff = await bob.call("task.session.diff", {"session_id": third["session_id"]})
        assert [f["path"] for f in diff["files"]] == ["bad\\xffname"]
        await bob.close()
    assert git(alice_repo, "for-each-ref", "refs/acp") == "" and tree_files(alice_repo) == {"secret.txt": "ALICE\n"}
    assert not (bob_repo / ".git" / "hooks" / "post-checkout").exists()
