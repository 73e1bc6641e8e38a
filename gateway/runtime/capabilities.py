"""What each agent profile's agent supports, known before a session of it exists: what its last `initialize` here
said, else what a short-lived process of it says now (started, initialized, stopped). A start is checked against it
(MCP transports, additional directories) before the session is made."""

from __future__ import annotations

import asyncio
import logging
import time

from acp.client import AcpClient, ClientOptions
from acp.errors import AcpError
from acp.models import AgentCapabilities
from agents.profiles import AgentProfile

from .homes import PROBE_OWNER, ensure_home
from .settings import Settings
from .spawning import agent_argv

log = logging.getLogger(__name__)
QUIET = 60.0  # seconds an agent that could not be asked is not asked again


class CapabilityProbe:
    """Each profile's agent's capabilities: learned from every launch's `initialize`, or asked of it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.known: dict[str, AgentCapabilities] = {}  # profile id -> what its last `initialize` here said
        self._unreachable: dict[str, float] = {}  # profile id -> when it last could not be asked (monotonic)
        self._asking: dict[str, asyncio.Future[AgentCapabilities | None]] = {}

    def learned(self, profile_id: str, capabilities: AgentCapabilities) -> None:
        """What a launch's `initialize` said: the answer from now on, without asking."""
        self.known[profile_id] = capabilities

    async def ask(self, profile: AgentProfile, cwd: str, timeout: float = 30.0) -> AgentCapabilities | None:
        """What the profile's agent supports, as its last `initialize` here said, else as a short-lived process of
        it says now; None when it cannot be asked (the launch then decides). An agent that could not be asked is
        not asked again for a minute."""
        known = self.known.get(profile.id)
        if known is not None:
            return known
        if time.monotonic() - self._unreachable.get(profile.id, -1e9) < QUIET:
            return None
        asking = self._asking.get(profile.id)
        if asking is None:  # callers at once share one process
            asking = self._asking[profile.id] = asyncio.ensure_future(self._ask(profile, cwd, timeout))
            asking.add_done_callback(lambda _: self._asking.pop(profile.id, None))
        return await asyncio.shield(asking)

    async def _ask(self, profile: AgentProfile, cwd: str, timeout: float) -> AgentCapabilities | None:
        env = profile.launch_env(self.settings.environ, ensure_home(self.settings.state_dir, PROBE_OWNER, profile))
        argv = agent_argv(profile.argv(None, str(self.settings.state_dir)), env, self.settings.agents_die_with_gateway)
        try:
            # Started in /, not in the owner's workspace: the probe runs unconfined, and a workspace is the owner's
            # (`python -m` would put a package planted there first on the agent's import path).
            client = await AcpClient.launch(argv, cwd=cwd, env=env, process_cwd="/", options=ClientOptions(
                initialize_timeout=min(self.settings.initialize_timeout, timeout), stop_grace=self.settings.stop_grace))
        except AcpError as exc:
            log.info("agent %s could not be asked what it supports: %s", profile.id, exc)
            self._unreachable[profile.id] = time.monotonic()
            return None
        try:
            init = await client.initialize()
        except (AcpError, TimeoutError) as exc:
            log.info("agent %s could not be asked what it supports: %s", profile.id, exc)
            self._unreachable[profile.id] = time.monotonic()
            return None
        finally:
            await client.stop()
        self.known[profile.id] = init.agentCapabilities
        return init.agentCapabilities
