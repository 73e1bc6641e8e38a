"""A git worktree per session, checkpoints, diff, rewind and merge (docs/worktrees.md) through a real gateway, real
git and the reference agent changing files with its own shell: two sessions on one repository each see only their
own changes and leave the repository's checkout alone; a rewind brings back exactly the files of a checkpoint and
the agent hears of it; a merge moves the base branch and its clean checkout, or names the conflicting files; a
removed worktree makes a resume fail naming it, a fresh recover makes it again; a delete leaves no worktree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway.clients.client import RpcCallError
from gateway.error_codes import GIT_REFUSED, INVALID_PARAMS, WORKSPACE_MISSING
from tests.gateway_harness import agent_log
from tests.support.world import Spec, World, WorldFactory, start

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "PATH": os.environ["PATH"]}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], env=GIT_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def make_repo(at: Path, files: dict[str, str]) -> Path:
    at.mkdir()
    git(at, "init", "-q", "-b", "main")
    for name, text in files.items():
        (at / name).write_text(text)
    git(at, "add", "-A")
    git(at, "commit", "-q", "-m", "first")
    return at


def tree_files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


async def sh(client: Any, sid: str, command: str) -> None:
    answer = await client.call("task.session.prompt", {"session_id": sid, "prompt": f"/sh {command}"})
    assert answer["stop_reason"] == "end_turn"


async def test_two_sessions_on_one_repository_each_change_their_own_worktree(gateway_world: WorldFactory) -> None:
    world = await gateway_world(Spec())
    client = await world.client()
    repo = make_repo(world.work / "repo", {"a.txt": "one\n", "keep.txt": "kept\n"})
    first = await start(client, repo, worktree={"repo": str(repo)}, name="wt-first")
    second = await start(client, repo, worktree={"repo": str(repo), "branch": "feature/second"})
    one, two = first["session_id"], second["session_id"]
    assert first["worktree"]["branch"] == "acp/wt-first" and second["worktree"]["branch"] == "feature/second"
    assert first["worktree"]["base"] == "main" and first["worktree"]["repo"] == str(repo)
    assert first["cwd"] == first["worktree"]["path"] != second["cwd"]
    assert Path(first["cwd"]).is_dir() and not Path(first["cwd"]).is_relative_to(repo)

    await sh(client, one, "echo s1 > a.txt && echo new > s1.txt")
    await sh(client, two, "echo s2 > b.txt")
    mine = await client.call("task.session.diff", {"session_id": one})
    theirs = await client.call("task.session.diff", {"session_id": two})
    assert [(f["path"], f["status"]) for f in mine["files"]] == [("a.txt", "M"), ("s1.txt", "A")]
    assert [(f["path"], f["status"], f["added"]) for f in theirs["files"]] == [("b.txt", "A", 1)]
    assert "+s1" in mine["patch"] and "b.txt" not in mine["patch"] and not mine["truncated"]
    # The repository's checkout is untouched, and its branch, index and stash never moved.
    assert tree_files(repo) == {"a.txt": "one\n", "keep.txt": "kept\n"}
    assert git(repo, "status", "--porcelain") == "" and git(repo, "stash", "list") == ""
    assert git(repo, "rev-parse", "main") == git(repo, "rev-parse", "acp/wt-first")

    # A second turn, a checkpoint before each; rewinding to the one before the second brings back exactly those
    # files, and the rewind itself can be undone.
    await sh(client, one, "echo later > a.txt && rm s1.txt && mkdir -p d && echo 3 > d/c.txt")
    points = (await client.call("task.session.checkpoints", {"session_id": one}))["checkpoints"]
    assert [(p["checkpoint"], p["kind"]) for p in points] == [(1, "turn"), (2, "turn")]
    assert points[1]["prompt"].startswith("/sh echo later") and points[1]["files_changed"] == 3
    worktree = Path(first["cwd"])
    rewound = await client.call("task.session.rewind", {"session_id": one, "checkpoint": 2})
    assert tree_files(worktree) == {"a.txt": "s1\n", "keep.txt": "kept\n", "s1.txt": "new\n"}
    assert {f["path"] for f in rewound["files"]} == {"a.txt", "s1.txt", "d/c.txt"}
    await client.call("task.session.rewind", {"session_id": one, "checkpoint": rewound["undo_checkpoint"]})
    assert tree_files(worktree) == {"a.txt": "later\n", "keep.txt": "kept\n", "d/c.txt": "3\n"}
    await client.call("task.session.rewind", {"session_id": one, "checkpoint": 1})
    assert tree_files(worktree) == {"a.txt": "one\n", "keep.txt": "kept\n"}
    history = await client.call("task.session.history", {"session_id": one})
    assert [e["name"] for e in history["entries"] if e["kind"] == "rewind"] == ["2", "3", "1"]
    # The agent hears of it with its next plain prompt, after the prompt's own words, naming the files that differ
    # from how it left them; a slash command goes as typed.
    await sh(client, one, "true")
    await client.call("task.session.prompt", {"session_id": one, "prompt": "hello"})

    def prompts() -> list[list[dict[str, Any]]]:
        return [m["params"]["prompt"] for m in agent_log(world.layout.log)
                if m.get("method") == "session/prompt" and m["params"]["sessionId"] == first["acp_session_id"]]
    said = prompts()
    assert said[-2] == [{"type": "text", "text": "/sh true"}]
    assert said[-1][0]["text"] == "hello" and "rewound the files of this workspace to checkpoint 1" in \
        said[-1][1]["text"] and "Files that differ from how you left them: a.txt, d/c.txt." in said[-1][1]["text"]
    assert not any("rewound" in b.get("text", "") for p in said[:-1] for b in p)
    # A rewind undone before the next prompt tells the agent nothing: its files are as it left them.
    undo = (await client.call("task.session.rewind", {"session_id": one, "checkpoint": 2}))["undo_checkpoint"]
    await client.call("task.session.rewind", {"session_id": one, "checkpoint": undo})
    await client.call("task.session.prompt", {"session_id": one, "prompt": "again"})
    assert prompts()[-1] == [{"type": "text", "text": "again"}]

    # Merging the second's branch moves main and its clean checkout; a merge that would conflict names the files.
    merged = await client.call("task.session.worktree.merge", {"session_id": two})
    assert merged["merged"] and merged["base"] == "main" and merged["checkout"] == str(repo)
    again = await client.call("task.session.worktree.merge", {"session_id": two})  # nothing new: no empty commit
    assert not again["merged"] and again["commit"] == merged["commit"] == git(repo, "rev-parse", "main").strip()
    assert tree_files(repo) == {"a.txt": "one\n", "b.txt": "s2\n", "keep.txt": "kept\n"}
    assert git(repo, "status", "--porcelain") == ""
    third = await start(client, repo, worktree={"repo": str(repo), "base": merged["commit"][:12]})
    await sh(client, third["session_id"], "echo s3 > b.txt")
    # A base that is a commit, not a branch: nothing to merge into.
    with pytest.raises(RpcCallError) as refused:
        await client.call("task.session.worktree.merge", {"session_id": third["session_id"]})
    assert refused.value.code == GIT_REFUSED and "not a branch" in refused.value.message
    await sh(client, one, "echo s1-b > b.txt")
    with pytest.raises(RpcCallError) as conflict:
        await client.call("task.session.worktree.merge", {"session_id": one})
    assert conflict.value.code == GIT_REFUSED and conflict.value.data["files"] == ["b.txt"]
    assert "b.txt" in conflict.value.message and tree_files(repo)["b.txt"] == "s2\n"

    # A worktree removed under a stopped session: its resume names it; a fresh recover makes it again.
    await client.call("task.session.cancel_turn", {"session_id": one})
    await world.gateway.kill9()
    shutil.rmtree(first["cwd"])
    await world.gateway.start()
    client = await world.client()
    with pytest.raises(RpcCallError) as missing:
        await client.call("task.session.resume", {"session_id": one})
    assert missing.value.code == WORKSPACE_MISSING and first["cwd"] in missing.value.message
    assert "recover" in missing.value.message and missing.value.data["rule"] == "worktree"
    for method in ("task.session.diff", "task.session.checkpoints", "task.session.prompt"):
        with pytest.raises(RpcCallError) as gone:
            await client.call(method, {"session_id": one, **({"prompt": "x"} if method.endswith("prompt") else {})})
        assert gone.value.code == WORKSPACE_MISSING and gone.value.data["rule"] == "worktree", method
    await client.call("task.session.recover", {"session_id": one, "action": "fresh_start"})
    assert tree_files(worktree) == {"a.txt": "one\n", "keep.txt": "kept\n"}  # its branch: what was committed

    # Delete removes the worktree and keeps the branch, with what the agent left uncommitted committed on it; with
    # discard, the branch goes too.
    await sh(client, two, "echo left > uncommitted.txt")
    await client.call("task.session.delete", {"session_id": two})
    assert not Path(second["cwd"]).exists() and "feature/second" in git(repo, "branch", "--list")
    assert git(repo, "show", "feature/second:uncommitted.txt") == "left\n"
    await client.call("task.session.delete", {"session_id": one, "discard": True})
    assert not worktree.exists() and "acp/wt-first" not in git(repo, "branch", "--list")
    assert "refs/acp/checkpoints/" + one not in git(repo, "for-each-ref")
    assert git(repo, "worktree", "list").count("\n") == 2  # the checkout and the third session's


async def test_what_a_worktree_start_cannot_do_is_refused_and_leaves_nothing(world: World) -> None:
    client = await world.client()
    repo = make_repo(world.work / "r2", {"x": "x\n"})
    plain = world.work / "plain"
    plain.mkdir()
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"repo": str(plain)}, INVALID_PARAMS, "not the top of a git repository"),
        ({"repo": str(repo / "sub")}, WORKSPACE_MISSING, "does not exist"),
        ({"repo": str(repo), "base": "--upload-pack=touch /tmp/x"}, INVALID_PARAMS, "base"),
        ({"repo": str(repo), "base": "no-such-ref"}, INVALID_PARAMS, "not a commit"),
        ({"repo": str(repo), "branch": "main"}, INVALID_PARAMS, "already exists"),
        ({"repo": str(repo), "branch": "../x"}, INVALID_PARAMS, "branch"),
        ({"repo": "/etc"}, WORKSPACE_MISSING, "outside"),
    ]
    for spec, code, words in cases:
        with pytest.raises(RpcCallError) as refused:
            await client.call("task.session.start", {"agent": "ref", "worktree": spec})
        assert refused.value.code == code and words in refused.value.message, (spec, refused.value.message)
    assert git(repo, "worktree", "list").count("\n") == 1 and git(repo, "branch", "--list") == "* main\n"
    assert (await client.call("task.session.list", {}))["sessions"] == []
    # A session outside any repository has no checkpoints: said, not an internal error.
    view = await start(client, plain)
    with pytest.raises(RpcCallError) as none:
        await client.call("task.session.diff", {"session_id": view["session_id"]})
    assert none.value.code == GIT_REFUSED and "in no git repository" in none.value.message


async def test_a_fork_works_in_a_worktree_of_its_own_with_the_originals_files(world: World) -> None:
    client = await world.client()
    repo = make_repo(world.work / "r3", {"x": "x\n"})
    original = await start(client, repo, worktree={"repo": str(repo)})
    await sh(client, original["session_id"], "echo mine > y")
    fork = await client.call("task.session.fork", {"session_id": original["session_id"], "name": "other-way"})
    assert fork["worktree"]["branch"] == "acp/other-way" and fork["worktree"]["base"] == "main"
    assert fork["cwd"] == fork["worktree"]["path"] != original["cwd"]
    assert tree_files(Path(fork["cwd"])) == {"x": "x\n", "y": "mine\n"}  # the original's files, uncommitted too
    # The fork's agent works there: what it changes the original does not see.
    await sh(client, fork["session_id"], "echo theirs > y && pwd")
    assert tree_files(Path(original["cwd"])) == {"x": "x\n", "y": "mine\n"}
    assert tree_files(Path(fork["cwd"])) == {"x": "x\n", "y": "theirs\n"}
    diff = await client.call("task.session.diff", {"session_id": fork["session_id"]})
    assert [(f["path"], f["status"]) for f in diff["files"]] == [("y", "A")]
    await client.call("task.session.delete", {"session_id": original["session_id"], "discard": True})
    assert Path(fork["cwd"]).is_dir() and not Path(original["cwd"]).exists()
    await client.call("task.session.delete", {"session_id": fork["session_id"], "discard": True})
    assert not Path(fork["cwd"]).exists() and "acp/" not in git(repo, "branch", "--list")
