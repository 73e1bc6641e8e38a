"""Every git command the gateway runs for a session (a worktree made or removed, a checkpoint, a diff, a rewind, a
merge): run as that session's agent runs — under bubblewrap as the owner's uid, seeing only the directories named,
when the agent is confined — with a fixed environment, from an absolute path, and with nothing of the repository's
own configuration that runs programs (hooks, fsmonitor, external diff and textconv drivers, signing, auto gc).

Why confined: a repository is the owner's, and its `.git/config` and `.gitattributes` can name programs git runs
(a `filter.X.clean` at every `git add`, a `core.fsmonitor` at every status). Run by the gateway as itself they would
run an owner's code outside any sandbox; run as the agent runs, they can do nothing the agent could not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import sandbox
from .homes import owner_dir_name
from .spawn_env import WRAPPER_PATH
from .spawning import BWRAP

GIT = shutil.which("git", path=WRAPPER_PATH)
# Settings given on git's command line beat the repository's own: nothing it names runs.
NEUTRAL_CONFIG = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "core.untrackedCache=false",
                  "core.attributesFile=/dev/null", "core.excludesFile=/dev/null", "core.quotePath=false",
                  "commit.gpgSign=false", "tag.gpgSign=false", "gc.auto=0", "maintenance.auto=false",
                  "core.pager=cat", "diff.external=", "core.sshCommand=false", "protocol.allow=never",
                  "advice.detachedHead=false", "init.defaultBranch=main")
TIMEOUT = 120.0
OUTPUT_LIMIT = 16 << 20  # bytes of a command's output read at most: past it the command is stopped


class GitFailed(RuntimeError):
    """A git command failed: `message` is git's own words (its last lines), for the user."""

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass(frozen=True)
class GitPlace:
    """What a confined git run sees — `writable` (the worktree, parts of the repository's `.git`), `readable` (the
    rest of `.git`, read-only) less `masked` (other worktrees' state) — and as whom it runs."""

    writable: tuple[str, ...]
    owner: str
    confined: bool
    readable: tuple[str, ...] = ()
    masked: tuple[str, ...] = ()


@dataclass(frozen=True)
class GitOutput:
    returncode: int
    out: bytes
    err: str
    truncated: bool  # the output passed its limit and the command was stopped


def git_env(home: str, index_file: str | None = None) -> dict[str, str]:
    env = {"PATH": WRAPPER_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home,
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
           "GIT_OPTIONAL_LOCKS": "0", "GIT_AUTHOR_NAME": "acp-gateway", "GIT_AUTHOR_EMAIL": "acp-gateway@localhost",
           "GIT_COMMITTER_NAME": "acp-gateway", "GIT_COMMITTER_EMAIL": "acp-gateway@localhost"}
    if index_file is not None:
        env["GIT_INDEX_FILE"] = index_file
    return env


class GitRunner:
    def __init__(self, state_dir: Path) -> None:
        # HOME for git: empty, one per owner (a confined run's sandbox binds it writable: what one owner's filter
        # writes there reaches no other owner's git), and the global settings are not read from it anyway.
        self.homes = state_dir / "run" / "git-homes"

    def home(self, owner: str) -> Path:
        return self.homes / owner_dir_name(owner)

    def available(self) -> str | None:
        """Why git cannot run here, or None."""
        return None if GIT else "git is not installed on the gateway's machine (apt-get install git)"

    def argv(self, place: GitPlace, cwd: str, args: Sequence[str]) -> list[str]:
        """The command line: git with the neutral settings, confined where the session's agent is; started in `/`
        either way (unconfined, git goes to `cwd` itself, `-C`; confined, bubblewrap's `--chdir` takes it there)."""
        assert GIT is not None
        command = [GIT, *(a for setting in NEUTRAL_CONFIG for a in ("-c", setting))]
        if not place.confined:
            return [*command, "-C", cwd, *args]
        command += args
        plan = sandbox.SandboxPlan(command=command, cwd=cwd, writable=list(dict.fromkeys(place.writable)),
                                   home=str(self.home(place.owner)), system=sandbox.system_directories(),
                                   readable=list(place.readable), masked_dirs=list(place.masked), network="none",
                                   uid=sandbox.owner_uid(place.owner))
        return sandbox.bwrap_argv(plan, BWRAP or "bwrap")

    async def run(self, place: GitPlace, cwd: str, *args: str, index_file: str | None = None,
                  stdin: bytes | None = None, limit: int = OUTPUT_LIMIT) -> GitOutput:
        why = self.available()
        if why is not None:
            raise GitFailed(why)
        home = self.home(place.owner)
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.argv(place, cwd, args), cwd="/",
                env=git_env(str(home), index_file), stdin=asyncio.subprocess.PIPE if stdin is not None else
                asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
        except OSError as exc:  # git (or bubblewrap) gone from the machine since the gateway started, say
            raise GitFailed(f"git {args[0]} could not start: {exc.strerror}") from None
        try:
            return await asyncio.wait_for(self._collect(proc, stdin, limit), TIMEOUT)
        except TimeoutError:
            raise GitFailed(f"git {args[0]} took longer than {TIMEOUT:g}s and was stopped") from None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                await proc.wait()

    @staticmethod
    async def _collect(proc: asyncio.subprocess.Process, stdin: bytes | None, limit: int) -> GitOutput:
        assert proc.stdout is not None and proc.stderr is not None
        if stdin is not None and proc.stdin is not None:
            proc.stdin.write(stdin)
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            proc.stdin.close()
        err_task = asyncio.ensure_future(proc.stderr.read(64 << 10))
        chunks: list[bytes] = []
        size, truncated = 0, False
        while chunk := await proc.stdout.read(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                truncated = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                break
        err = await err_task
        code = await proc.wait()
        out = b"".join(chunks)[:limit]
        return GitOutput(code, out, err.decode("utf-8", "replace"), truncated)

    async def ok(self, place: GitPlace, cwd: str, *args: str, index_file: str | None = None,
                 stdin: bytes | None = None, limit: int = OUTPUT_LIMIT) -> bytes:
        """The output of a git command that must succeed; GitFailed with git's words otherwise."""
        result = await self.run(place, cwd, *args, index_file=index_file, stdin=stdin, limit=limit)
        if result.returncode != 0 or result.truncated:
            said = " ".join(result.err.strip().splitlines()[-3:]) or f"exit status {result.returncode}"
            raise GitFailed(f"git {args[0]}: {said}", result.returncode)
        return result.out
