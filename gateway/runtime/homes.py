"""Agent homes: each owner's agents run with HOME (and the XDG directories) in a directory of that owner's under the
state directory, so credentials, the agents' own session stores and caches are never shared between owners.

`STATE_DIR/homes/<owner>/` by default; `STATE_DIR/homes/<owner>/<profile>/` for a profile with `home = "profile"`.
A profile's `home_seed` files (a config template) are copied into a home that does not have them yet; a seed
never comes from the homes directory (no owner's files reach another's home).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
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


def ensure_home(state_dir: Path, owner: str, profile: AgentProfile) -> Path:
    """The agent home for `owner` and `profile`, made (0700) and seeded if needed."""
    home = home_of(state_dir, owner, profile)
    homes = state_dir / HOMES
    homes.mkdir(mode=0o700, parents=True, exist_ok=True)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    for relative, source in profile.home_seed.items():
        target = home / relative
        if target.exists():
            continue
        real_source = Path(os.path.realpath(source))
        if homes.resolve() in real_source.parents:
            raise ValueError(f"profile {profile.id}: home_seed {relative!r} comes from an agent home ({source})")
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copyfile(real_source, target)
        os.chmod(target, 0o600)
    return home
