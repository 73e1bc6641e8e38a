"""The web UI with a remote host (docs/remote-hosts.md) in headless Chromium: the start form offers the hosts the
owner may use, a session started there shows its host in the head, and its agent answers from that machine."""

from __future__ import annotations

import playwright.async_api as playwright_api

from tests.gateway.agenthost.test_remote_sessions import Remote, remote
from tests.gateway.ui.web_ui_support import expect, new_page, say, shot, ui_url

__all__ = ["remote"]  # the fixture, used by name


async def test_a_session_on_a_remote_host_from_the_start_form(remote: Remote,
                                                              browser: playwright_api.Browser) -> None:
    await remote.gateway.start()
    page, errors = await new_page(browser, width=1300)
    await page.goto(ui_url(remote.gateway))
    await expect(page.locator("#stream")).to_have_text("live")
    await expect(page.locator("#host")).to_be_visible()
    await page.select_option("#agent", "plain")
    await page.select_option("#host", "lab")
    await expect(page.locator("#cwd")).to_have_attribute("placeholder",
                                                         f"working directory on lab: inside {remote.work}")
    await expect(page.locator("#worktree")).to_be_disabled()  # a worktree is made on the gateway's machine
    await page.fill("#cwd", remote.work)
    await page.fill("#title", "far away")
    await page.click("#start")
    await expect(page.locator("#session-state")).to_have_attribute("data-state", "WAITING_FOR_INPUT")
    await expect(page.locator("#remote-host")).to_have_text("⇄ on lab")
    await say(page, "/write seen.txt from the page")
    await expect(page.locator(".msg.turn")).to_have_count(1)
    await expect(page.locator("#transcript")).to_contain_text("wrote seen.txt as uid")
    assert await remote.run(f"cat {remote.work}/seen.txt") == "from the page"
    await shot(page, "ui-remote-host")
    assert errors == []
