"""Whether another agent of an owner may start, and what a new session starts with — checked before anything of it
exists: its name, the owner's live agents against `max_live_sessions_per_owner` (with the starts under way), and its
configuration, MCP servers and additional directories (against what its agent supports). A refusal changes
nothing."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from acp import mcp
from agents.profiles import AgentProfile

from ..errors import invalid_params, limit_exceeded, workspace_refused
from ..store import StoreBase
from .capabilities import CapabilityProbe
from .config import starting_choices
from .launcher import Launch
from .live import LiveSession
from .settings import Settings
from .workspace import unfit

SESSION_ID_FORM = re.compile(r"^s-[0-9a-f]{32}$")  # what `sessions.create` makes: a name never looks like one


class Admission:
    """The checks of a start (a new session, a fork, a resume), and the owners' start slots: a start takes its slot
    (`admit`) before its first await and gives it back (`started`) once its session exists or could not be made, so
    that concurrent starts cannot all pass the same limit check."""

    def __init__(self, store: StoreBase, settings: Settings, probe: CapabilityProbe, live: Mapping[str, LiveSession],
                 launches: Mapping[str, Launch]) -> None:
        self.store = store
        self.settings = settings
        self.probe = probe
        self.live = live  # the runtime's live sessions and launches in progress, as they change
        self.launches = launches
        self.starting: dict[str, int] = {}  # owner -> starts between their limit check and their launch

    async def check_name(self, owner: str, name: str) -> None:
        if SESSION_ID_FORM.match(name):
            raise invalid_params("name", f"name {name!r} has the form of a session id: choose another")
        holder = await self.store.sessions.named(owner, name)
        if holder is not None:
            row = await self.store.sessions.get(holder, owner)
            raise invalid_params("name", f"name {name!r} is taken by session {holder}"
                                 + (f" ({row.state})" if row else "") + ": choose another, or delete that session "
                                 f"(acp-gateway delete {name})")

    def check_live_limit(self, owner: str) -> None:
        """The owner's own agents only: live, launching, or being started. Synchronous, and each caller takes
        its slot before its next await, so concurrent calls cannot all pass the same check."""
        live = (sum(1 for s in self.live.values() if s.owner == owner)
                + sum(1 for sid, launch in self.launches.items() if launch.owner == owner and sid not in self.live)
                + self.starting.get(owner, 0))
        limit = self.settings.max_live_sessions_per_owner
        if live >= limit:
            raise limit_exceeded(limit, f"{live} live sessions already (limit {limit}, max_live_sessions_per_owner): "
                                 "end one you no longer need (`acp-gateway sessions`, then `acp-gateway cancel ID`), "
                                 "or ask the operator to raise the limit", "max_live_sessions_per_owner")

    def admit(self, owner: str) -> None:
        """A new session's start: the limit checked and the owner's slot taken, with no await between."""
        self.check_live_limit(owner)
        self.starting[owner] = self.starting.get(owner, 0) + 1

    def started(self, owner: str) -> None:
        """The slot `admit` took, given back: the session exists now (and counts as launching), or never will."""
        self.starting[owner] -= 1

    async def setup(self, owner: str, profile: AgentProfile, cwd: str, config: Mapping[str, Any],
                    servers: Sequence[Any], directories: Sequence[str], probe: bool = True) -> dict[str, Any]:
        """What a session starts with (the profile's defaults, then the start's own), checked before it exists: a
        refused server or directory changes nothing. The agent's capabilities are those its last `initialize` here
        said, or asked of it now, where the start needs them (`probe`; not for a remote host's session: its launch
        leaves out what its agent does not take, saying so)."""
        try:
            given = mcp.parse([*servers])
            mcp.check_servers(given, stdio_allowed=self.settings.stdio_mcp_allowed(owner), transports=None,
                              agent=profile.id)
        except mcp.McpRefusal as refused:
            raise invalid_params(refused.field, refused.message) from None
        wanted = [*dict.fromkeys(directories)]
        for index, directory in enumerate(wanted):
            if not os.path.isabs(directory):
                raise invalid_params(f"additional_directories.{index}", "each additional directory must be an "
                                     f"absolute path, not {directory!r}")
            why = unfit(self.settings, owner, directory)
            if why is not None:
                raise workspace_refused(None, directory, "additional_directory",
                                        f"additional directory {directory}: {why.message}")
        if probe and (wanted or any(s.type != "stdio" for s in given)):
            caps = await self.probe.ask(profile, cwd)
            if caps is not None:
                try:
                    mcp.check_servers(given, stdio_allowed=True, transports=caps.mcp_transports, agent=profile.id)
                except mcp.McpRefusal as refused:
                    raise invalid_params(refused.field, refused.message) from None
                if wanted and not caps.takes_additional_directories:
                    raise invalid_params("additional_directories", f"agent {profile.id!r} does not take additional "
                                         "directories (its initialize does not advertise sessionCapabilities."
                                         "additionalDirectories): start without them, or use another agent")
        chosen = {**starting_choices(profile.config, "profile"), **starting_choices(config, "user")}
        return {"chosen": {k: c.to_json() for k, c in chosen.items()},
                "mcp_servers": [mcp.wire(s) for s in mcp.merged(profile.servers(), given)],
                "additional_directories": [*dict.fromkeys([*profile.additional_directories, *wanted])]}
