"""Checkpoints and rewind against a model (hypothesis stateful testing), with real git: files written, removed,
replaced by directories or links, made executable, ignored ones among them, checkpoints taken and rewinds to any of
them in any order. After every step: a rewind brings back exactly the files the checkpoint saw (what git ignores left
as it is), the diff against any checkpoint names exactly the files that differ, and the checkpoints only grow."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.runtime.checkpoints import Checkpoints, GitSite
from gateway.runtime.git_runner import GitPlace, GitRunner

GIT_ENV = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
NAMES = st.sampled_from(["a", "b", "d/a", "d/b", "d/e/f", "x.log", "d/y.log", "sp ace", "é"])
TEXTS = st.sampled_from(["", "one\n", "two\n", "no newline", "a\x00binary"])
# What a file is, as the model keeps it: ("file", text, executable) or ("link", target).
Entry = tuple[str, str, bool] | tuple[str, str]


def read_tree(root: Path) -> dict[str, Entry]:
    """The files and links under `root` (not `.git`), as the model keeps them."""
    found: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) == root and d == ".git")]
        for name in [*filenames, *(d for d in dirnames if os.path.islink(os.path.join(dirpath, d)))]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            else:
                found[rel] = ("file", path.read_bytes().decode("utf-8", "replace"), os.access(path, os.X_OK))
    return found


def tracked(files: dict[str, Entry]) -> dict[str, Entry]:
    return {k: v for k, v in files.items() if not k.endswith(".log")}


class CheckpointsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = Path(tempfile.mkdtemp(prefix="ckpt-model-"))
        self.repo = self.tmp / "repo"
        self.repo.mkdir()
        for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "base"]):
            subprocess.run(["git", "-C", str(self.repo), *args], env=GIT_ENV, check=True)
        (self.repo / ".gitignore").write_text("*.log\n")
        runner = GitRunner(self.tmp / "state")
        self.checkpoints = Checkpoints(runner)
        self.site = GitSite("s-model", str(self.repo), str(self.repo / ".git" / "acp-checkpoints-model.index"),
                            GitPlace((str(self.repo),), "owner", False), None, str(self.repo / ".git" / "index"))
        self.saw: dict[int, dict[str, Entry]] = {}  # checkpoint -> the files it saw (tracked ones)

    def run(self, work):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(work)

    def teardown(self) -> None:
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _clear_way(self, name: str) -> Path:
        """Room for a file at `name`: a file or link where one of its directories goes, or a directory where it
        goes, removed."""
        path = self.repo / name
        for parent in reversed(path.relative_to(self.repo).parents[:-1]):
            at = self.repo / parent
            if at.is_symlink() or at.is_file():
                at.unlink()
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    @rule(name=NAMES, text=TEXTS, executable=st.booleans())
    def write(self, name: str, text: str, executable: bool) -> None:
        path = self._clear_way(name)
        path.write_bytes(text.encode())
        path.chmod(0o755 if executable else 0o644)

    @rule(name=NAMES, pointing=st.sampled_from(["a", "../outside", "d"]))
    def link(self, name: str, pointing: str) -> None:
        self._clear_way(name).symlink_to(pointing)

    @rule(name=NAMES)
    def remove(self, name: str) -> None:
        path = self.repo / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)

    @rule()
    def checkpoint(self) -> None:
        taken = self.run(self.checkpoints.take(self.site, None))
        self.saw[taken.number] = tracked(read_tree(self.repo))

    @precondition(lambda self: bool(self.saw))
    @rule(data=st.data())
    def rewind(self, data: st.DataObject) -> None:
        number = data.draw(st.sampled_from(sorted(self.saw)))
        ignored = {k: v for k, v in read_tree(self.repo).items() if k not in tracked(read_tree(self.repo))}
        before = tracked(read_tree(self.repo))
        done = self.run(self.checkpoints.rewind(self.site, number))
        self.saw[done["undo_checkpoint"]] = before
        after = read_tree(self.repo)
        assert tracked(after) == self.saw[number], (number, tracked(after), self.saw[number])
        # What git ignores is left as it was (unless a rewound file needed its place).
        assert {k: v for k, v in after.items() if k in ignored} == {
            k: v for k, v in ignored.items() if k in after}
        changed = {f["path"] for f in done["files"]}
        assert changed == {k for k in before.keys() | self.saw[number].keys()
                           if before.get(k) != self.saw[number].get(k)}

    @invariant()
    def diff_names_what_differs(self) -> None:
        if not self.saw:
            return
        number = max(self.saw)
        if number not in self.saw:
            return
        diff = self.run(self.checkpoints.diff(self.site, number))
        now = tracked(read_tree(self.repo))
        assert {f["path"] for f in diff["files"]} == {
            k for k in now.keys() | self.saw[number].keys() if now.get(k) != self.saw[number].get(k)}

    @invariant()
    def checkpoints_only_grow(self) -> None:
        listed = [p.number for p in self.run(self.checkpoints.all(self.site))]
        assert listed == sorted(self.saw)


CheckpointsModel.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None,
                                              suppress_health_check=[HealthCheck.too_slow])
test_checkpoints_follow_the_model = CheckpointsModel.TestCase
