"""Every agent profile a gateway knows, in the order that decides which wins: shipped, installed from the registry,
then the operator's directories. Above `profiles` (one profile) and `registry.installs` (what is installed)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from agents.profiles import SHIPPED_DIR, AgentProfile, load_dir
from agents.registry.installs import installed_profiles


def load_profiles(extra_dirs: Iterable[Path] = (), state_dir: Path | None = None) -> dict[str, AgentProfile]:
    """Shipped profiles, then the agents installed from the ACP registry into `state_dir` (their current versions),
    then each extra directory in order; a later profile with the same id wins."""
    profiles: dict[str, AgentProfile] = {}
    load_dir(SHIPPED_DIR, profiles)
    if state_dir is not None:
        profiles.update(installed_profiles(state_dir))
    for directory in extra_dirs:
        load_dir(Path(directory), profiles)
    return profiles
