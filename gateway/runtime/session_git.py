"""What the runtime does with git for a session (docs/worktrees.md): which worktree or repository its files are in
(`site`), a checkpoint before each turn with what the agent must hear of a rewind (`before_prompt`), the worktree
checked before its agent starts again (WT-4), and what its sandbox binds of the repository. The git work itself is
`worktrees` and `checkpoints`; this decides, for a session row, where."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import GatewayError, git_refused, invalid_params, workspace_refused
from ..store import SessionRow, StoreBase
from . import workspace
from .checkpoints import Checkpoints, GitSite, NoCheckpoint, changes_view
from .git_rules import default_branch
from .git_runner import GitFailed, GitPlace, GitRunner
from .settings import Settings
from .worktrees import Worktree, WorktreeRefused, Worktrees, sandbox_binds

log = logging.getLogger(__name__)
T = TypeVar("T")
INDEX = "acp-checkpoints.index"


def repository_top(settings: Settings, owner: str, cwd: str) -> str | None:
    """The top of the git repository `cwd` lies in, when it (and so its `.git`) is a directory the owner may use;
    None otherwise (no repository, or one whose top lies outside the owner's workspace roots)."""
    here = Path(os.path.realpath(cwd))
    for directory in (here, *here.parents):
        if workspace.unfit(settings, owner, str(directory)) is not None:
            return None
        git = directory / ".git"
        if git.is_symlink() or git.exists():
            return str(directory) if git.is_dir() and not git.is_symlink() else None
    return None


def rewind_note(number: int, turn: int | None, files: list[dict[str, Any]]) -> str:
    """What the agent is told with its next prompt: its files moved under it since it last worked on them."""
    names = ", ".join(f["path"] for f in files[:30]) + (f" and {len(files) - 30} more" if len(files) > 30 else "")
    return (f"[Note from the ACP gateway: since your last turn the user rewound the files of this workspace to "
            f"checkpoint {number}" + (f", as they were before turn {turn}" if turn is not None else "")
            + f". Files that differ from how you left them: {names}. What you did to them since is undone.]")


def pending_rewind(note: str | None) -> dict[str, Any] | None:
    """The rewinds since the agent's last prompt, as stored: `from`, the checkpoint of the files as the agent left
    them (before the first rewind); `to` and `turn`, the last rewind's target."""
    try:
        value = json.loads(note) if note else None
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("from"), int) else None


class SessionGit:
    def __init__(self, settings: Settings, store: StoreBase, confined: Callable[[SessionRow], bool]) -> None:
        self.settings = settings
        self.store = store
        self.confined = confined
        self.runner = GitRunner(settings.state_dir)
        self.worktrees = Worktrees(settings.worktrees, self.runner)
        self.checkpoints = Checkpoints(self.runner)
        self.known: dict[str, Worktree | None] = {}  # session id -> its worktree, as its row carried it
        self.locks: dict[str, asyncio.Lock] = {}  # one git change of a session's files at a time

    def lock(self, session_id: str) -> asyncio.Lock:
        return self.locks.setdefault(session_id, asyncio.Lock())

    def worktree(self, row: SessionRow) -> Worktree | None:
        """The session's worktree, as its row carries it (read with the session: no query of its own); remembered
        for what its sandbox binds (`binds`), which has only the session's id."""
        if row.id not in self.known:
            self.known[row.id] = Worktree.from_json(row.worktree) if row.worktree else None
        return self.known[row.id]

    def forget(self, session_id: str) -> None:
        self.known.pop(session_id, None)
        self.locks.pop(session_id, None)

    async def site(self, row: SessionRow) -> GitSite | None:
        """Where the session's files are in git; None when they are in no repository it may use."""
        confined = self.confined(row)
        tree = self.worktree(row)
        if tree is not None:
            return GitSite(row.id, tree.path, str(tree.admin / INDEX),
                           self.worktrees.session_place(tree, row.owner, confined), tree.base_commit,
                           str(tree.admin / "index"))
        if row.host is not None:  # its files are on a remote host: nothing of this machine's is its repository
            return None
        top = repository_top(self.settings, row.owner, row.cwd)
        if top is None:
            return None
        return GitSite(row.id, top, str(Path(top) / ".git" / f"acp-checkpoints-{row.id}.index"),
                       GitPlace((top,), row.owner, confined), None, str(Path(top) / ".git" / "index"))

    async def check(self, row: SessionRow) -> None:
        """WT-4: -32011 when the session's worktree, or its repository, is not there as it was made. Checked before
        its agent starts and before every git run for it: a directory swapped for a link since (its own session can
        reach its worktrees directory) or a `.git` file pointing elsewhere is never followed."""
        tree = self.worktree(row)
        if tree is None:
            return
        why = self.repository_problem(row, tree) or self.worktrees.problem(row.id, tree)
        if why is not None:
            raise workspace_refused(row.id, tree.path, "worktree", why)

    def repository_problem(self, row: SessionRow, tree: Worktree) -> str | None:
        """The repository a worktree was made from, as it was made: the same real directory (no link on its way),
        with its `.git` directory, inside the owner's workspace roots."""
        repo, git = Path(tree.repo), Path(tree.repo) / ".git"
        if os.path.realpath(repo) != str(repo) or not repo.is_dir() or git.is_symlink() or not git.is_dir():
            return (f"the repository of session {row.id} ({tree.repo}) is no longer where it was (moved, removed, or "
                    "a link now): put it back, or delete the session")
        refused = workspace.unfit(self.settings, row.owner, str(repo))
        return None if refused is None else f"the repository of session {row.id}: {refused.message}"

    async def before_prompt(self, row: SessionRow, turn: int | None, prompt: str = "") -> list[dict[str, Any]]:
        """A checkpoint of the files before the turn (a failure is logged, never fatal to the turn), and the text
        blocks the agent gets after the prompt's own: what a rewind changed since its last prompt."""
        site = await self.site(row)
        if site is None or self.runner.available() is not None:
            return []
        note: str | None = None
        try:
            await self.check(row)
            async with self.lock(row.id):
                taken = await self.checkpoints.take(site, turn, prompt=prompt)
                # A slash command goes to the agent as it was typed: the note waits for the next plain prompt.
                note = None if prompt.lstrip().startswith("/") else await self.store.workspaces.take_note(row.id)
                pending = pending_rewind(note)
                if pending is None:
                    return []
                # What differs from how the agent left the files (a rewind and its undo: nothing to say).
                start = next((p for p in await self.checkpoints.all(site) if p.number == pending["from"]), None)
                if start is None:
                    return []
                files = changes_view(await self.checkpoints.changes(site, f"{start.commit}^{{tree}}",
                                                                    f"{taken.commit}^{{tree}}"))
        except (GitFailed, OSError, GatewayError) as failed:
            log.warning("session %s: no checkpoint before this turn: %s", row.id, failed,
                        extra={"session_id": row.id})
            if note is not None:  # taken, not told: it waits for the next prompt
                with contextlib.suppress(Exception):
                    await self.store.workspaces.set_note(row.id, note)
            return []
        return [{"type": "text", "text": rewind_note(pending["to"], pending.get("turn"), files)}] if files else []

    def binds(self, session_id: str) -> tuple[list[str], list[str], list[str]]:
        """`sandbox_binds` of the session's worktree as known (read before its agent or a terminal starts)."""
        return sandbox_binds(self.known.get(session_id))

    # -- what the API asks ---------------------------------------------------------------------------------------
    async def make_worktree(self, owner: str, session_id: str, confined: bool, repo: str, base: str | None,
                            branch: str) -> Worktree:
        try:
            return await self.worktrees.create(owner, session_id, repo, base, branch, confined)
        except WorktreeRefused as refused:
            raise invalid_params(refused.field, str(refused)) from None
        except GitFailed as failed:
            raise invalid_params("worktree", f"no worktree could be made in {repo}: {failed}") from None

    async def fork_worktree(self, row: SessionRow, session_id: str, name: str | None) -> Worktree | None:
        """A fork's own worktree: on a new branch from the original's, with the original's files as they are now
        (committed or not), and the original's base to merge into; None for a session without a worktree."""
        tree = self.worktree(row)
        if tree is None:
            return None
        site = await self._site(row)
        confined = self.confined(row)
        async with self.lock(row.id):
            snapshot = await self._git(row, self.checkpoints.snapshot(site))
        made = await self.make_worktree(row.owner, session_id, confined, tree.repo, tree.branch,
                                        default_branch(name, session_id))
        fork = Worktree(made.repo, made.path, made.branch, tree.base, tree.base_commit)
        try:
            await self.worktrees.fill(row.owner, fork, snapshot, str(fork.admin / INDEX), confined)
        except GitFailed as failed:
            await self.worktrees.remove(row.owner, fork, confined, True)
            raise git_refused(row.id, f"session {row.id}: its files could not be given to the fork: {failed}") from None
        return fork

    async def _site(self, row: SessionRow) -> GitSite:
        await self.check(row)  # a worktree that is gone: said as such (-32011), with what to do
        site = await self.site(row)
        if site is None and row.host is not None:
            raise git_refused(row.id, f"session {row.id} runs on remote host {row.host}: its files are on that "
                              "machine, and checkpoints, diffs and rewinds are taken only for sessions on the "
                              "gateway's machine (use git there)", reason="no_repository")
        if site is None:
            raise git_refused(row.id, f"session {row.id} runs in {row.cwd}, which is in no git repository inside "
                              "your workspace roots: sessions started with a worktree (acp-gateway start "
                              "--worktree), or in a repository, have checkpoints and diffs", reason="no_repository")
        why = self.runner.available()
        if why is not None:
            raise git_refused(row.id, why)
        return site

    async def diff(self, row: SessionRow, against: int | str | None) -> dict[str, Any]:
        site = await self._site(row)
        async with self.lock(row.id):
            return await self._git(row, self.checkpoints.diff(site, against))

    async def listing(self, row: SessionRow) -> dict[str, Any]:
        site = await self._site(row)
        async with self.lock(row.id):
            return {"checkpoints": await self._git(row, self.checkpoints.listing(site))}

    async def rewind(self, row: SessionRow, number: int) -> dict[str, Any]:
        """The files put back as at checkpoint `number`; the agent hears of it at its next prompt."""
        site = await self._site(row)
        async with self.lock(row.id):
            done = await self._git(row, self.checkpoints.rewind(site, number))
            earlier = pending_rewind(await self.store.workspaces.take_note(row.id))
            start = earlier["from"] if earlier else done["undo_checkpoint"]  # how the agent left the files
            await self.store.workspaces.set_note(row.id, json.dumps({"from": start, "to": number,
                                                                     "turn": done["turn"]}))
        return done

    async def merge(self, row: SessionRow) -> dict[str, Any]:
        tree = self.worktree(row)
        if tree is None:
            raise git_refused(row.id, f"session {row.id} has no worktree of its own: only a worktree's branch is "
                              "merged (start sessions with a worktree to merge them)", reason="merge_refused")
        site = await self._site(row)
        async with self.lock(row.id):
            snapshot = await self._git(row, self.checkpoints.snapshot(site))
            try:
                return await self._git(row, self.worktrees.merge(row.owner, row.id, tree, snapshot,
                                                                 self.confined(row)))
            except WorktreeRefused as refused:
                raise git_refused(row.id, str(refused), list(refused.files), reason="merge_refused") from None

    async def remove(self, row: SessionRow, discard: bool) -> None:
        """A deleted session's worktree removed (its branch too when `discard`); its checkpoints' refs dropped. Git
        runs only where the repository and the worktree are as they were made (WT-4); the files go regardless."""
        tree = self.worktree(row)
        sound = tree is None or self.repository_problem(row, tree) is None
        intact = tree is not None and sound and self.worktrees.problem(row.id, tree) is None
        site = await self.site(row) if (tree is None or intact) else None
        if site is not None and self.runner.available() is None:
            refs = await self.runner.run(site.place, site.top, "for-each-ref", "--format=delete %(refname)",
                                         f"refs/acp/checkpoints/{row.id}/")
            if refs.returncode == 0 and refs.out:
                await self.runner.run(site.place, site.top, "update-ref", "--stdin", stdin=refs.out)
            if tree is None:
                with contextlib.suppress(OSError):
                    os.unlink(site.index)
        if tree is not None:
            sharing = [r for r, _ in await self.store.sessions.list(row.owner, states=None, before_seq=None, limit=2,
                                                                   cwd=tree.path) if r.id != row.id]
            if sharing:  # another session works there too (one started in this directory): its files stay
                log.info("session %s: its worktree %s stays, session %s works in it", row.id, tree.path,
                         sharing[0].id, extra={"session_id": row.id})
            else:
                if not discard and site is not None and intact:
                    # The branch stays with what the agent left uncommitted: nothing of its work goes with the
                    # worktree.
                    await self.worktrees.commit_files(row.owner, row.id, tree, await self.checkpoints.snapshot(site),
                                                      self.confined(row), "Uncommitted changes kept at the delete")
                await self.worktrees.remove(row.owner, tree, self.confined(row), discard, sound)
        self.forget(row.id)

    async def recreate(self, row: SessionRow) -> None:
        """A fresh recover of a session whose worktree is gone: made again from its branch."""
        tree = self.worktree(row)
        if tree is None or self.worktrees.problem(row.id, tree) is None:
            return
        why = self.repository_problem(row, tree)
        if why is not None:
            raise workspace_refused(row.id, tree.path, "worktree", why)
        try:
            await self.worktrees.recreate(row.owner, tree, self.confined(row))
        except WorktreeRefused as refused:
            raise workspace_refused(row.id, tree.path, "worktree", str(refused)) from None

    @staticmethod
    async def _git(row: SessionRow, work: Awaitable[T]) -> T:
        try:
            return await work
        except GitFailed as failed:
            said = str(failed)
            raise git_refused(row.id, said if said.startswith("session ") else f"session {row.id}: {said}",
                              reason="no_checkpoint" if isinstance(failed, NoCheckpoint) else "git") from None
        except GatewayError:
            raise
