"""Agent homes: each owner's agents run with HOME (and the XDG directories) in a directory of that owner's under the
state directory, so credentials, the agents' own session stores and caches are never shared between owners.

`STATE_DIR/homes/<owner>/` by default; `STATE_DIR/homes/<owner>/<profile>/` for a profile with `home = "profile"`.
A profile's `home_seed` files (a config template) are copied into a home that does not have them yet; a seed
never comes from the homes directory (no owner's files reach another's home).

An owner's agent writes in its home, so what lies there may be a symlink it planted: a profile's own home that is
one is refused (bound into the sandbox it would show the agent wherever it points), and a seed is written through
no symlink (each directory opened with `O_NOFOLLOW`, the file created `O_EXCL`): the gateway never writes elsewhere
for an agent.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from agents.profiles import AgentProfile

HOMES = "homes"
PROBE_OWNER = ".probe"  # the home of the capability probes (an initialize, no session): no owner's


def owner_dir_name(owner: str) -> str:
    """A directory name for an owner: readable, and distinct for distinct owners whatever characters they use."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", owner)[:40].lstrip(".") or "owner"
    return f"{readable}-{hashlib.sha256(owner.encode()).hexdigest()[:12]}"


def home_of(state_dir: Path, owner: str, profile: AgentProfile) -> Path:
    base = state_dir / HOMES / (PROBE_OWNER if owner == PROBE_OWNER else owner_dir_name(owner))
    return base / profile.id if profile.home == "profile" else base


class HomeRefused(ValueError):
    """An agent home the gateway will not use or write into: what is wrong and what to do."""


def ensure_home(state_dir: Path, owner: str, profile: AgentProfile) -> Path:
    """The agent home for `owner` and `profile`, made (0700) and seeded if needed."""
    home = home_of(state_dir, owner, profile)
    homes = state_dir / HOMES
    homes.mkdir(mode=0o700, parents=True, exist_ok=True)
    home.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the owner's: only the gateway writes beside it
    if home.is_symlink() or (home.exists() and not home.is_dir()):
        raise HomeRefused(f"the agent home {home} of profile {profile.id} is not a directory (something in the "
                          f"owner's home put a {'symlink' if home.is_symlink() else 'file'} there): remove it, then "
                          "start or resume the session again")
    home.mkdir(mode=0o700, exist_ok=True)
    for relative, source in profile.home_seed.items():
        real_source = Path(os.path.realpath(source))
        if homes.resolve() in real_source.parents:
            raise HomeRefused(f"profile {profile.id}: home_seed {relative!r} comes from an agent home ({source})")
        seed(home, relative, real_source)
    return home


def seed(home: Path, relative: str, source: Path) -> bool:
    """Copy `source` to `home`/`relative` unless something is there (True: copied). Each directory on the way is
    opened without following a symlink and the file created exclusively: a planted link is left alone (False)."""
    *directories, name = Path(relative).parts
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in directories:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:  # a symlink (ELOOP) or a file (ENOTDIR) where a directory should be
                return False
            os.close(fd)
            fd = inner
        try:
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=fd)
        except FileExistsError:  # there already (a symlink included): the agent's own
            return False
        with os.fdopen(out, "wb") as target, source.open("rb") as data:
            while chunk := data.read(1 << 20):
                target.write(chunk)
        return True
    finally:
        os.close(fd)
