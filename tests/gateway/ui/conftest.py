"""The web UI tests' fixtures: a gateway of reference agents (one profile per behaviour the pages show: restores,
auto-resume off, a sign-in, a start that fails), started for each test, and headless Chromium."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import playwright.async_api as playwright_api
import pytest

from tests.gateway.ui.web_ui_support import CHROMIUM, CHROMIUM_ARGS
from tests.gateway_harness import GatewayProcess, free_port, reference_profile


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    reference_profile(agents, tmp_path / "agent-state", "ref-once-internal", "--fault-once", "session/resume=internal")
    reference_profile(agents, tmp_path / "agent-state", "paid", extra="auto_resume = false\n")
    reference_profile(agents, tmp_path / "agent-state", "locked", "--require-auth", "--auth-env", "REF_TOKEN")
    reference_profile(agents, tmp_path / "agent-state", "no-key", "--fault", "session/new=internal",
                      "--fault-reason", "reference agent: REF_API_KEY is not set (export it, or add it to the profile)")
    gw = GatewayProcess(tmp_path / "state", agents, "--default-agent", "ref", port=free_port())
    await gw.start()
    yield gw
    await gw.stop()


@pytest.fixture
async def browser() -> AsyncIterator[playwright_api.Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: `make test` installs it (apt-get install chromium)")
    async with playwright_api.async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()
