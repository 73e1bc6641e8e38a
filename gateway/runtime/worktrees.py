"""A session's own git worktree (docs/worktrees.md): made at its start on a branch of its own, checked before its
agent starts again (WT-4), made again from its branch by a fresh recover, merged into its base (WT-5), removed at
its delete. Every git command runs through `GitRunner`, as the session's agent runs."""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .git_rules import (
    MergeFacts,
    WorktreeFacts,
    admin_dir,
    branch_refusal,
    merge_refusal,
    ref_refusal,
    worktree_branch,
    worktree_problem,
)
from .git_runner import GitFailed, GitPlace, GitRunner
from .homes import owner_dir_name


class WorktreeRefused(ValueError):
    """A worktree that cannot be made, checked or merged: `field` names the param, the message what to do."""

    def __init__(self, field: str, message: str, files: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.files = files  # a merge's conflicting files


@dataclass(frozen=True)
class Worktree:
    repo: str  # the repository's top (it holds `.git`)
    path: str  # the worktree: the session's cwd
    branch: str
    base: str  # as given (a ref), or the commit when none was
    base_commit: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Worktree:
        return Worktree(str(data["repo"]), str(data["path"]), str(data["branch"]), str(data["base"]),
                        str(data["base_commit"]))

    @property
    def admin(self) -> Path:
        return admin_dir(self.repo, Path(self.path).name)


def sandbox_binds(tree: Worktree | None) -> tuple[list[str], list[str], list[str]]:
    """(read-only, writable, masked) of a worktree's repository for its session's agent and the session's git runs:
    the repository's `.git` read-only but for its object store, refs and logs and its own worktree's git state; the
    other worktrees' git state masked. Its config and hooks stay read-only: nothing planted runs for the user's git."""
    if tree is None:
        return [], [], []
    git = Path(tree.repo) / ".git"
    writable = [str(p) for p in (git / "objects", git / "refs", git / "logs", tree.admin) if p.is_dir()]
    return [str(git)], writable, [str(git / "worktrees")]


def remove_tree(path: Path, parent: Path) -> None:
    """`path`, a directory right in `parent`, removed with what it holds — never through a link (shutil.rmtree walks
    by descriptors here, and refuses a link at the top); nothing when it is not there or not such a directory."""
    if path.parent != parent or path.is_symlink() or not path.is_dir():
        return
    shutil.rmtree(path, ignore_errors=True)


def read_small(path: Path, limit: int = 4096) -> str | None:
    """A small file of an owner's (a `.git` file, a HEAD), read through no symlink; None when it is not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not os.path.isfile(f"/proc/self/fd/{fd}"):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    finally:
        os.close(fd)


class Worktrees:
    def __init__(self, root: Path, runner: GitRunner) -> None:
        self.root = root
        self.runner = runner

    def owner_dir(self, owner: str) -> Path:
        return self.root / owner_dir_name(owner)

    def place(self, worktree: Worktree, owner: str, confined: bool, *more: str) -> GitPlace:
        """What a git run that changes the repository itself may write (a merge, a branch deleted): the worktree and
        the repository's whole `.git` (and `more`: its checkout, for a merge)."""
        return GitPlace((worktree.path, str(Path(worktree.repo) / ".git"), *more), owner, confined)

    def session_place(self, worktree: Worktree, owner: str, confined: bool) -> GitPlace:
        """What a git run for the session's files (a checkpoint, a diff, a rewind) sees: what its agent sees
        (`sandbox_binds`) — a filter of the repository's that runs there can plant no hook and no setting."""
        readable, writable, masked = sandbox_binds(worktree)
        return GitPlace((worktree.path, *writable), owner, confined, tuple(readable), tuple(masked))

    async def create(self, owner: str, session_id: str, repo: str, base: str | None, branch: str,
                     confined: bool) -> Worktree:
        """WT-1…3: a fresh worktree for the session, on `branch` from `base` (default: the repository's HEAD)."""
        why = branch_refusal(branch)
        if why is not None:
            raise WorktreeRefused("worktree.branch", f"branch {branch!r}: {why}")
        if base is not None and (why := ref_refusal(base)) is not None:
            raise WorktreeRefused("worktree.base", f"base {base!r}: {why}")
        git_dir = Path(repo) / ".git"
        if git_dir.is_symlink() or not git_dir.is_dir():
            top = next((str(p) for p in Path(repo).parents if (p / ".git").is_dir()), None)
            raise WorktreeRefused("worktree.repo", f"{repo} is not the top of a git repository (it has no .git "
                                  "directory): give the repository's top directory"
                                  + (f" ({top})" if top else ""))
        place = GitPlace((str(git_dir),), owner, confined)
        try:
            commit = (await self.runner.ok(place, repo, "rev-parse", "--verify", "--quiet", "--end-of-options",
                                           f"{base or 'HEAD'}^{{commit}}")).decode().strip()
        except GitFailed:
            raise WorktreeRefused("worktree.base", f"base {base or 'HEAD'} is not a commit of {repo}" + (
                "" if base else " (a repository with no commit yet: commit something first)")) from None
        if base is None:  # the branch checked out there, when it is one: what a merge goes into
            head = await self.runner.run(place, repo, "symbolic-ref", "--quiet", "--short", "HEAD")
            named = head.out.decode().strip()
            base = named if head.returncode == 0 and named and ref_refusal(named) is None else None
        exists = await self.runner.run(place, repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
        if exists.returncode == 0:
            raise WorktreeRefused("worktree.branch", f"branch {branch} already exists in {repo}: choose another "
                                  "branch name, or delete that branch")
        owner_dir = self.owner_dir(owner)
        owner_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = owner_dir / session_id
        path.mkdir(mode=0o700)
        try:
            await self.runner.ok(GitPlace((str(git_dir), str(path)), owner, confined), repo, "worktree", "add",
                                 "--quiet", "--no-track", "-b", branch, "--", str(path), commit)
        except GitFailed as failed:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise WorktreeRefused("worktree", f"git could not make the worktree: {failed}") from None
        return Worktree(repo, str(path), branch, base or commit, commit)

    async def fill(self, owner: str, worktree: Worktree, tree: str, index: str, confined: bool) -> None:
        """A fresh worktree's files made those of `tree` (another session's snapshot), through the checkpoints' own
        index (`index`): its branch, HEAD and git's index stay where they were made."""
        place = self.session_place(worktree, owner, confined)
        await self.runner.ok(place, worktree.path, "read-tree", "HEAD", index_file=index)
        await self.runner.ok(place, worktree.path, "read-tree", "-m", "-u", "HEAD", tree, index_file=index)

    def facts(self, worktree: Worktree) -> WorktreeFacts:
        path = Path(worktree.path)
        if path.is_symlink() or not path.is_dir():
            return WorktreeFacts(False, False, None)
        pointer = read_small(path / ".git") or ""
        admin = worktree.admin
        of_repository = pointer.strip() == f"gitdir: {admin}"
        head = read_small(admin / "HEAD") if of_repository else None
        return WorktreeFacts(True, of_repository, worktree_branch(head) if head else None)

    def problem(self, session_id: str, worktree: Worktree) -> str | None:
        """WT-4, read from disk now."""
        return worktree_problem(session_id, worktree.path, worktree.branch, self.facts(worktree))

    async def recreate(self, owner: str, worktree: Worktree, confined: bool) -> None:
        """A fresh recover: the worktree made again from its branch (its stale state in `.git/worktrees` dropped
        first: never by `git worktree prune`, which would drop every worktree a sandbox does not show)."""
        repo_git = str(Path(worktree.repo) / ".git")
        remove_tree(worktree.admin, Path(repo_git) / "worktrees")
        path = Path(worktree.path)
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            raise WorktreeRefused("session_id", f"{path} is not a directory: remove it, then recover again")
        if path.is_dir() and any(path.iterdir()):
            raise WorktreeRefused("session_id", f"{path} is there but is not the session's worktree on "
                                  f"{worktree.branch}: move it away, then recover again")
        self.owner_dir(owner).mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        try:
            await self.runner.ok(GitPlace((repo_git, str(path)), owner, confined), worktree.repo, "worktree", "add",
                                 "--quiet", "--", str(path), worktree.branch)
        except GitFailed as failed:
            raise WorktreeRefused("session_id", f"the worktree could not be made again from branch "
                                  f"{worktree.branch}: {failed}") from None

    async def remove(self, owner: str, worktree: Worktree, confined: bool, discard: bool,
                     repository_sound: bool = True) -> None:
        """The worktree removed (its files, and its state in the repository's `.git/worktrees`), by the gateway itself
        and through no link; its branch too when `discard` (by git, where the repository is still where it was).
        Never `git worktree prune`: run where a sandbox shows one worktree, it drops every other one."""
        remove_tree(Path(worktree.path), self.owner_dir(owner))
        if repository_sound:
            remove_tree(worktree.admin, Path(worktree.repo) / ".git" / "worktrees")
            if discard:
                await self.runner.run(GitPlace((str(Path(worktree.repo) / ".git"),), owner, confined), worktree.repo,
                                      "branch", "-D", "--", worktree.branch)

    async def commit_files(self, owner: str, session_id: str, worktree: Worktree, tree: str, confined: bool,
                           why: str) -> str | None:
        """The worktree's files as they are (`tree`, its snapshot) committed on its branch when they differ from its
        HEAD, the index left alone: the new commit, or None when there was nothing to commit."""
        place = self.session_place(worktree, owner, confined)
        head, commit = await self._files_commit(place, worktree, tree, f"{why} (session {session_id})")
        if commit == head:
            return None
        await self.runner.ok(place, worktree.path, "update-ref", f"refs/heads/{worktree.branch}", commit, head)
        return commit

    async def _files_commit(self, place: GitPlace, worktree: Worktree, tree: str, message: str) -> tuple[str, str]:
        """(the branch's head, a commit of the files `tree` on it — made only when they differ, else the head):
        no ref moves here."""
        head = (await self.runner.ok(place, worktree.path, "rev-parse", "HEAD")).decode().strip()
        head_tree = (await self.runner.ok(place, worktree.path, "rev-parse", "HEAD^{tree}")).decode().strip()
        if head_tree == tree:
            return head, head
        return head, (await self.runner.ok(place, worktree.path, "commit-tree", tree, "-p", head, "-m",
                                           message)).decode().strip()

    async def merge(self, owner: str, session_id: str, worktree: Worktree, tree: str, confined: bool) -> dict[str, Any]:
        """WT-5: the worktree's files as they are now (`tree`, its snapshot) committed on its branch, and the branch
        merged into its base: the base branch moves (its checkout, when clean, moves with it)."""
        repo = worktree.repo
        place = self.place(worktree, owner, confined, repo)
        base_ref = f"refs/heads/{worktree.base}"
        base_is_branch = (await self.runner.run(place, repo, "rev-parse", "--verify", "--quiet",
                                                base_ref)).returncode == 0
        # What the agent left uncommitted goes on its branch — its ref moved only once the merge can be made.
        head, branch_head = await self._files_commit(place, worktree, tree, f"Changes of session {session_id}")
        checkout: str | None = None
        dirty = False
        conflicts: tuple[str, ...] = ()
        if base_is_branch:
            checkout = await self._checked_out(place, repo, base_ref)
            if checkout is not None:
                status = await self.runner.run(place, checkout, "status", "--porcelain", "--untracked-files=no")
                dirty = bool(status.out.strip()) or status.returncode != 0
            merged = await self.runner.run(place, repo, "merge-tree", "--write-tree", "--name-only", "-z",
                                           base_ref, branch_head)
            if merged.returncode == 1:
                names = merged.out.split(b"\0\0", 1)[0].split(b"\0")[1:]
                conflicts = tuple(dict.fromkeys(n.decode("utf-8", "replace") for n in names if n))
            elif merged.returncode != 0:
                raise WorktreeRefused("session_id", f"git merge-tree: {merged.err.strip()}")
        why = merge_refusal(session_id, worktree.branch, worktree.base, MergeFacts(base_is_branch, conflicts,
                                                                                   checkout, dirty))
        if why is not None:
            raise WorktreeRefused("session_id", why, conflicts)
        base_head = (await self.runner.ok(place, repo, "rev-parse", base_ref)).decode().strip()
        contained = await self.runner.run(place, repo, "merge-base", "--is-ancestor", branch_head, base_head)
        if contained.returncode == 0:  # nothing of the branch is new to its base: no empty merge commit
            return {"merged": False, "commit": base_head, "branch": worktree.branch, "base": worktree.base,
                    "checkout": checkout}
        if branch_head != head:
            await self.runner.ok(place, worktree.path, "update-ref", f"refs/heads/{worktree.branch}", branch_head,
                                 head)
            await self.runner.ok(place, worktree.path, "read-tree", branch_head)  # its index agrees with its HEAD
        merged_tree = merged.out.split(b"\0", 1)[0].decode().strip()
        commit = (await self.runner.ok(place, repo, "commit-tree", merged_tree, "-p", base_head, "-p", branch_head,
                                       "-m", f"Merge branch {worktree.branch} (session {session_id})")).decode().strip()
        if checkout is not None:
            await self.runner.ok(place, checkout, "merge", "--ff-only", "--quiet", commit)
        else:
            await self.runner.ok(place, repo, "update-ref", base_ref, commit, base_head)
        return {"merged": True, "commit": commit, "branch": worktree.branch, "base": worktree.base,
                "checkout": checkout}

    async def _checked_out(self, place: GitPlace, repo: str, ref: str) -> str | None:
        listing = await self.runner.ok(place, repo, "worktree", "list", "--porcelain", "-z")
        path = None
        for field in listing.split(b"\0"):
            if field.startswith(b"worktree "):
                path = field[len(b"worktree "):].decode("utf-8", "surrogateescape")
            elif field == b"branch " + ref.encode():
                return path
        return None
