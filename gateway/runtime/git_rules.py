"""Where a session's agent works in git, decided as pure functions of data (rule ids WT-n and CK-n, shared by
`worktrees.py`, docs/worktrees.md and tests/gateway/runtime/test_git_rules.py): the names a worktree gets, which
refs and branch names a user may give, what a resume checks of a worktree, what a merge refuses, and how git's
output reads. No process runs here.

- WT-1 a worktree is made for a repository whose top holds a `.git` directory (not a file: a repository that is
  itself a worktree or a submodule is given by its own top), inside the owner's workspace roots.
- WT-2 a branch is `acp/<name or session id>` unless given; a given one is a plain branch name (letters, digits,
  `._/-`, no `..`, no leading `-` or `/`, no `.lock` or `/` at the end, no `//`, not `refs/…` nor `…HEAD`) and does
  not exist yet.
- WT-3 a base is a ref or commit a user could type (no leading `-`, no whitespace or control characters); it is
  resolved to a commit once, at the start, and kept.
- WT-4 a resume runs the agent in its worktree, and any git runs for it, only if the directory is there (no link),
  is a checkout of its repository (its `.git` file points there), and is on its branch, and the repository is the
  real directory it was made from; else -32011 names what is wrong and how to get it back.
- WT-5 a merge goes into a base that is a branch; with conflicts it refuses, naming the files; where that branch
  is checked out with uncommitted changes it refuses, naming the checkout.
- CK-1 a checkpoint is a commit on `refs/acp/checkpoints/<session>/<n>`: never a branch, the index or the stash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

BRANCH_PREFIX = "acp/"
CHECKPOINTS = "refs/acp/checkpoints"
_BRANCH = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")
_REF = re.compile(r"^[A-Za-z0-9._/~^@{}:+-]{1,200}$")


def default_branch(name: str | None, session_id: str) -> str:
    """WT-2: the branch a session's worktree is on when the start names none."""
    return BRANCH_PREFIX + (name or session_id)


def branch_refusal(branch: str) -> str | None:
    """WT-2: why `branch` may not be a worktree's branch, or None."""
    if not _BRANCH.fullmatch(branch):
        return "a branch name has letters, digits and . _ / - only (at most 200)"
    if branch.startswith(("-", "/", ".")) or branch.endswith(("/", ".lock", ".")) or ".." in branch \
            or "//" in branch or "/." in branch or "@{" in branch:
        return "not a branch name git takes (no leading - / or ., no .., //, /., trailing / . or .lock)"
    if branch.startswith("refs/") or branch.endswith("HEAD"):
        return "a branch name neither starts with refs/ nor ends with HEAD (git would read it as another ref)"
    return None


def ref_refusal(ref: str) -> str | None:
    """WT-3: why `ref` may not be given as a base, or None. Anything past this is resolved by git, never run."""
    if not _REF.fullmatch(ref) or ref.startswith("-"):
        return "a base is a branch, tag or commit (letters, digits and ._/~^@{}:+-, not starting with -)"
    return None


def checkpoint_ref(session_id: str, number: int) -> str:
    """CK-1."""
    return f"{CHECKPOINTS}/{session_id}/{number:06d}"


def checkpoint_number(ref: str, session_id: str) -> int | None:
    prefix = f"{CHECKPOINTS}/{session_id}/"
    tail = ref[len(prefix):] if ref.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


@dataclass(frozen=True)
class WorktreeFacts:
    """What is found of a session's worktree on disk before its agent starts there."""

    exists: bool
    of_repository: bool  # its `.git` file points into its repository's `.git/worktrees/`
    branch: str | None  # the branch checked out there (None: detached, or not read)


def worktree_problem(session_id: str, path: str, branch: str, facts: WorktreeFacts) -> str | None:
    """WT-4: what is wrong with the worktree a session's agent is to run in, as the user reads it, or None."""
    fix = (f"`acp-gateway recover {session_id} --fresh` makes it again from branch {branch} (what was not "
           "committed or checkpointed there is gone)")
    if not facts.exists:
        return f"the worktree of session {session_id} ({path}) no longer exists: {fix}"
    if not facts.of_repository:
        return f"{path}, the worktree of session {session_id}, is no longer a checkout of its repository: {fix}"
    if facts.branch != branch:
        now = f"branch {facts.branch}" if facts.branch else "no branch (a detached HEAD)"
        return (f"the worktree of session {session_id} ({path}) is on {now}, not {branch}: check out {branch} "
                "there (git switch), then resume")
    return None


@dataclass(frozen=True)
class MergeFacts:
    base_is_branch: bool
    conflicts: tuple[str, ...]  # files the merge could not combine
    checkout: str | None  # where the base branch is checked out, if anywhere
    checkout_dirty: bool


def merge_refusal(session_id: str, branch: str, base: str, facts: MergeFacts) -> str | None:
    """WT-5: why session `session_id`'s branch cannot be merged into `base` now, or None."""
    if not facts.base_is_branch:
        return (f"the base of session {session_id} ({base}) is not a branch: merge branch {branch} yourself "
                f"(git merge {branch})")
    if facts.conflicts:
        shown = ", ".join(facts.conflicts[:20]) + (f" and {len(facts.conflicts) - 20} more"
                                                   if len(facts.conflicts) > 20 else "")
        return (f"branch {branch} of session {session_id} conflicts with {base} in {shown}: resolve them in the "
                f"session (ask its agent to merge {base} in), then merge again")
    if facts.checkout is not None and facts.checkout_dirty:
        return (f"{base} is checked out at {facts.checkout} with uncommitted changes: commit or stash them, then "
                "merge again")
    return None


@dataclass(frozen=True)
class FileChange:
    path: str
    status: str  # A added, M modified, D deleted, T type changed
    added: int | None  # lines; None for a binary file
    deleted: int | None


def shown_path(raw: bytes) -> str:
    """A file name as git wrote it, for JSON: bytes that are no UTF-8 shown as \\xNN (a name is data, not a path the
    gateway opens)."""
    return raw.decode("utf-8", "backslashreplace")


def parse_changes(name_status: bytes, numstat: bytes) -> list[FileChange]:
    """`git diff-tree -r -z --no-renames --name-status` and `--numstat` of the same two trees, as one list."""
    statuses: dict[str, str] = {}
    parts = name_status.split(b"\0")
    for status, path in zip(parts[0::2], parts[1::2], strict=False):
        if status:
            statuses[shown_path(path)] = status.decode()[:1]
    counts: dict[str, tuple[int | None, int | None]] = {}
    for record in numstat.split(b"\0"):
        fields = record.split(b"\t", 2)
        if len(fields) == 3:
            added, deleted, path = fields
            counts[shown_path(path)] = (
                int(added) if added.isdigit() else None, int(deleted) if deleted.isdigit() else None)
    return [FileChange(path, status, *counts.get(path, (None, None))) for path, status in sorted(statuses.items())]


def worktree_branch(head_file: str) -> str | None:
    """The branch a worktree's HEAD names (`ref: refs/heads/X`), or None when detached."""
    line = head_file.strip()
    return line[len("ref: refs/heads/"):] if line.startswith("ref: refs/heads/") else None


def admin_dir(repository: str, session_id: str) -> Path:
    """Where git keeps a session's worktree's own state in its repository (its HEAD and index)."""
    return Path(repository) / ".git" / "worktrees" / session_id
