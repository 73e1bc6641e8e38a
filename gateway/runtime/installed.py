"""The agents installed from the registry while the gateway serves (`acp-gateway agents add` or `update`): their
current versions taken up without a restart, and what `gateway.info` shows of each install."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.profiles import SHIPPED_DIR, AgentProfile
from agents.registry import installs
from agents.registry.credentials import offered_vars


class InstalledAgents:
    """Keeps the gateway's profiles (`profiles`, shared with the runtime) up to date with the installs."""

    def __init__(self, state_dir: Path, profiles: Mapping[str, AgentProfile]) -> None:
        self.state_dir = state_dir
        self.profiles = profiles
        self._seen: tuple[tuple[str, int], ...] | None = None  # what `refresh` last read

    def refresh(self) -> None:
        """Agents added or updated with `acp-gateway agents add` while serving: their current versions, without a
        restart (their profiles read again only when an agent's current version changed: one stat per agent). A
        profile of `--agents-dir` with the same id keeps winning over an install, as at start; an install wins over
        the shipped profile."""
        seen = installs.currents_signature(self.state_dir)
        if seen == self._seen:
            return
        self._seen = seen
        for agent_id, profile in installs.installed_profiles(self.state_dir).items():
            current = self.profiles.get(agent_id)
            if current is None or current.install is not None or Path(current.source).parent == SHIPPED_DIR:
                self.profiles[agent_id] = profile  # type: ignore[index]


def installed_facts(profile: AgentProfile) -> dict[str, Any]:
    """An agent installed from the registry as `gateway.info` shows it: its versions, sign-in state (as its probe
    found it: the owner's own is worked out per call), last check, and the variables of the env_var methods its
    probe was offered (the methods themselves are named per session)."""
    found = installs.facts(profile)
    shown = {k: v for k, v in found.items() if k != "auth_methods"}
    if found:
        shown["sign_in_vars"] = offered_vars(found.get("auth_methods") or [])
    return shown
