"""A session's checkpoints, diff and rewind (docs/worktrees.md), in git's own objects: a checkpoint is the working
tree as it was (its files, not what git ignores) written as a commit on `refs/acp/checkpoints/<session>/<n>` (CK-1)
through an index of the gateway's own, so the branch, the index and the stash the user and the agent see never
move; a diff compares two such trees; a rewind moves the files from the one to the other as `git checkout` would
(git refuses to write through a symlink planted in the tree)."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass
from typing import Any

from .git_rules import CHECKPOINTS, FileChange, checkpoint_number, checkpoint_ref, parse_changes
from .git_runner import GitFailed, GitPlace, GitRunner

PATCH_LIMIT = 2 << 20  # bytes of a diff's patch returned; the file list is always whole
LISTED = 500  # checkpoints a listing shows at most (the newest)
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
PROMPT_SHOWN = 120  # characters of a turn's prompt kept with its checkpoint


class NoCheckpoint(GitFailed):
    """No checkpoint is there yet, or not the one asked for: the message says which and what to do."""


@dataclass(frozen=True)
class GitSite:
    """Where a session's files are in git: `top`, the directory git runs in (its worktree, or the top of the
    repository its cwd is in); `index`, the checkpoints' own index file; `base_commit`, a worktree's base."""

    session_id: str
    top: str
    index: str
    place: GitPlace
    base_commit: str | None
    real_index: str = ""  # git's own index there: a first snapshot starts from a copy (its stat data saves hashing)


@dataclass(frozen=True)
class Checkpoint:
    number: int
    commit: str
    turn: int | None  # the turn_started event it was taken before (None: before a rewind)
    at: float
    kind: str  # "turn": at the start of a turn; "rewind": the files as they were before a rewind
    prompt: str  # the start of the turn's prompt

    def view(self, files_changed: int | None) -> dict[str, Any]:
        return {"checkpoint": self.number, "turn": self.turn, "at": self.at, "kind": self.kind,
                "prompt": self.prompt, "files_changed": files_changed}


def _subject(turn: int | None, kind: str) -> str:
    return f"acp checkpoint kind={kind} turn={turn if turn is not None else '-'} at={time.time():.3f}"


def _parse(ref: str, commit: str, subject: str, session_id: str, body: str = "") -> Checkpoint | None:
    number = checkpoint_number(ref, session_id)
    if number is None:
        return None
    fields = dict(part.split("=", 1) for part in subject.split() if "=" in part)
    turn = fields.get("turn", "-")
    try:
        at = float(fields.get("at", "0"))
    except ValueError:
        at = 0.0
    return Checkpoint(number, commit, int(turn) if turn.isdigit() else None, at, fields.get("kind", "turn"),
                      body.strip()[:PROMPT_SHOWN])


INDEX_LIMIT = 256 << 20  # bytes: a larger index is not copied (the first snapshot then hashes every file)


def copy_index(source: str, target: str) -> bool:
    """git's own index copied as the checkpoints' first one, through no symlink and into no existing file (what
    lies in a `.git` the agent may write, it may have planted); False when it cannot be, and nothing was written."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        facts = os.fstat(fd)
        if not stat.S_ISREG(facts.st_mode) or facts.st_nlink != 1 or facts.st_size > INDEX_LIMIT:
            return False
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            while chunk := os.read(fd, 1 << 20):
                os.write(out, chunk)
        except OSError:
            os.unlink(target)  # half a copy is no index
            raise
        finally:
            os.close(out)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def changes_view(changes: list[FileChange]) -> list[dict[str, Any]]:
    return [{"path": c.path, "status": c.status, "added": c.added, "deleted": c.deleted} for c in changes]


class Checkpoints:
    def __init__(self, runner: GitRunner) -> None:
        self.runner = runner

    async def snapshot(self, site: GitSite) -> str:
        """The tree of the files as they are now (git's ignore rules hold), through the checkpoints' own index:
        the stat data it keeps makes the next snapshot hash only what changed."""
        run = self.runner.ok
        fresh = not os.path.lexists(site.index)
        if fresh and not copy_index(site.real_index, site.index):
            await self._from_head(site)
        try:
            await run(site.place, site.top, "add", "--all", "--", ":/", index_file=site.index)
        except GitFailed:
            if fresh and not os.path.lexists(site.index):
                raise
            # An index git cannot read (a copy of another git's, one the agent spoiled): made again from HEAD, once.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(site.index)
            await self._from_head(site)
            await run(site.place, site.top, "add", "--all", "--", ":/", index_file=site.index)
        return (await run(site.place, site.top, "write-tree", index_file=site.index)).decode().strip()

    async def _from_head(self, site: GitSite) -> None:
        """The checkpoints' index as HEAD's tree, where there is one (the first `add` then hashes every file)."""
        head = await self.runner.run(site.place, site.top, "rev-parse", "--verify", "--quiet", "HEAD^{tree}")
        if head.returncode == 0:
            await self.runner.ok(site.place, site.top, "read-tree", "HEAD", index_file=site.index)

    async def all(self, site: GitSite) -> list[Checkpoint]:
        out = await self.runner.ok(site.place, site.top, "for-each-ref", "--sort=refname",
                                   "--format=%(refname)%00%(objectname)%00%(contents:subject)%00%(contents:body)%01",
                                   f"{CHECKPOINTS}/{site.session_id}/")
        found = []
        for record in out.decode("utf-8", "replace").split("\1"):
            parts = record.lstrip("\n").split("\0")
            if len(parts) == 4 and (point := _parse(parts[0], parts[1], parts[2], site.session_id,
                                                    parts[3])) is not None:
                found.append(point)
        return sorted(found, key=lambda c: c.number)

    async def take(self, site: GitSite, turn: int | None, kind: str = "turn", prompt: str = "") -> Checkpoint:
        """CK-1: a checkpoint of the files now."""
        tree = await self.snapshot(site)
        earlier = await self.all(site)
        parent = earlier[-1].commit if earlier else None
        if parent is None:
            head = await self.runner.run(site.place, site.top, "rev-parse", "--verify", "--quiet", "HEAD")
            parent = head.out.decode().strip() if head.returncode == 0 else None
        number = earlier[-1].number + 1 if earlier else 1
        subject = _subject(turn, kind)
        shown = " ".join(prompt.split())[:PROMPT_SHOWN]
        commit = (await self.runner.ok(site.place, site.top, "commit-tree", tree, *(["-p", parent] if parent else []),
                                       "-m", subject, *(["-m", shown] if shown else []))).decode().strip()
        await self.runner.ok(site.place, site.top, "update-ref", checkpoint_ref(site.session_id, number), commit, "")
        parsed = _parse(checkpoint_ref(site.session_id, number), commit, subject, site.session_id, shown)
        assert parsed is not None
        return parsed

    async def listing(self, site: GitSite) -> list[dict[str, Any]]:
        """Each checkpoint with the files its turn changed (to the next checkpoint, or to the files now)."""
        points = (await self.all(site))[-LISTED:]
        if not points:
            return []
        trees = [f"{p.commit}^{{tree}}" for p in points] + [await self.snapshot(site)]
        shown = []
        for index, point in enumerate(points):
            names = await self.runner.ok(site.place, site.top, "diff-tree", "-r", "-z", "--no-renames", "--name-only",
                                         trees[index], trees[index + 1])
            shown.append(point.view(len([n for n in names.split(b"\0") if n])))
        return shown

    async def resolve(self, site: GitSite, against: int | str | None) -> tuple[dict[str, Any], str]:
        """What a diff compares with: a checkpoint (by number), `base` (a worktree's base; else the first
        checkpoint), or `head` (the commit checked out)."""
        if isinstance(against, int):
            point = next((p for p in await self.all(site) if p.number == against), None)
            if point is None:
                raise NoCheckpoint(f"session {site.session_id} has no checkpoint {against}: acp-gateway checkpoints "
                                f"{site.session_id} lists them")
            return {"checkpoint": against}, f"{point.commit}^{{tree}}"
        if against == "head":
            head = await self.runner.run(site.place, site.top, "rev-parse", "--verify", "--quiet", "HEAD^{tree}")
            return {"head": True}, head.out.decode().strip() if head.returncode == 0 else EMPTY_TREE
        if site.base_commit is not None:
            return {"base": site.base_commit}, f"{site.base_commit}^{{tree}}"
        points = await self.all(site)
        if not points:
            raise NoCheckpoint(f"session {site.session_id} has no checkpoint yet (one is taken at the start of each "
                            "turn): nothing to compare with")
        return {"checkpoint": points[0].number}, f"{points[0].commit}^{{tree}}"

    async def changes(self, site: GitSite, old: str, new: str) -> list[FileChange]:
        args = ("diff-tree", "-r", "-z", "--no-renames")
        names = await self.runner.ok(site.place, site.top, *args, "--name-status", old, new)
        counts = await self.runner.ok(site.place, site.top, *args, "--numstat", old, new)
        return parse_changes(names, counts)

    async def diff(self, site: GitSite, against: int | str | None) -> dict[str, Any]:
        """The files changed since `against` and their unified patch (cut at PATCH_LIMIT bytes)."""
        target, old = await self.resolve(site, against)
        new = await self.snapshot(site)
        changes = await self.changes(site, old, new)
        patch = await self.runner.run(site.place, site.top, "diff-tree", "-r", "-p", "--no-renames", "--no-color",
                                      "--no-ext-diff", "--no-textconv", "--full-index", old, new, limit=PATCH_LIMIT)
        if patch.returncode != 0 and not patch.truncated:
            raise GitFailed(f"git diff-tree: {patch.err.strip()}")
        return {"against": target, "files": changes_view(changes),
                "patch": patch.out.decode("utf-8", "replace"), "truncated": patch.truncated}

    async def rewind(self, site: GitSite, number: int) -> dict[str, Any]:
        """The files put back as they were at checkpoint `number`; the files as they were just before are kept as
        a checkpoint of kind `rewind` first, so a rewind can itself be undone."""
        point = next((p for p in await self.all(site) if p.number == number), None)
        if point is None:
            raise NoCheckpoint(f"session {site.session_id} has no checkpoint {number}: acp-gateway checkpoints "
                            f"{site.session_id} lists them")
        before = await self.take(site, None, "rewind")  # its snapshot leaves the checkpoints' index at the files now
        old, new = f"{before.commit}^{{tree}}", f"{point.commit}^{{tree}}"
        changes = await self.changes(site, old, new)
        await self.runner.ok(site.place, site.top, "read-tree", "-m", "-u", old, new, index_file=site.index)
        return {"checkpoint": number, "turn": point.turn, "files": changes_view(changes),
                "undo_checkpoint": before.number}
