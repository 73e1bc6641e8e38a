"""The web UI end to end in headless Chromium (Debian's, driven by Playwright): start, echo, cancel, recover."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import playwright.async_api as playwright_api
import pytest

from tests.gateway_harness import GatewayProcess, free_port, reference_profile

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    gw = GatewayProcess(tmp_path / "state", agents, "--default-agent", "ref", port=free_port())
    await gw.start()
    yield gw
    await gw.stop()


def ui_url(gateway: GatewayProcess) -> str:
    return f"http://127.0.0.1:{gateway.port}/?token={gateway.token}"


async def start_in_page(page: playwright_api.Page, gateway: GatewayProcess, cwd: Path) -> None:
    """Open the UI, wait for the live stream, start a session in `cwd` and wait until it waits for input."""
    expect = playwright_api.expect
    await page.goto(ui_url(gateway))
    await expect(page.locator("#stream")).to_have_text("live")
    await page.fill("#cwd", str(cwd))
    await page.click("#start")
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")


async def test_browser_start_echo_cancel_and_recover(gateway: GatewayProcess, tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: .ci/run installs it (apt-get install chromium)")
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(ui_url(gateway))
        expect = playwright_api.expect
        await expect(page.locator("#stream")).to_have_text("live")
        assert "token" not in page.url  # the token leaves the address bar

        # Start a session, see the echo.
        await page.fill("#cwd", str(tmp_path / "work"))
        await page.fill("#title", "first")
        await page.click("#start")
        await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
        await page.fill("#prompt", "hello browser")
        await page.press("#prompt", "Enter")
        await expect(page.locator(".msg.agent")).to_have_text("echo: hello browser")
        await expect(page.locator(".msg.user")).to_have_text("hello browser")

        # Cancel it.
        await page.click("#cancel")
        await expect(page.locator("#session-state")).to_have_text("CANCELLED")
        await expect(page.locator("#prompt")).to_be_disabled()

        # A second session, still active, viewed while the gateway restarts.
        await page.fill("#title", "second")
        await page.click("#start")
        await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
        await expect(page.locator("#agent-running")).to_have_text("agent running")
        await gateway.kill9()
        await expect(page.locator("#stream")).to_have_text("reconnecting…")
        await gateway.start()
        # By itself: reconnect, reconcile, resubscribe, and auto-resume the viewed session (once).
        await expect(page.locator("#stream")).to_have_text("live", timeout=30_000)
        await expect(page.locator("#agent-running")).to_have_text("agent running", timeout=30_000)
        await page.fill("#prompt", "after restart")
        await page.press("#prompt", "Enter")
        await expect(page.locator(".msg.agent").last).to_have_text("echo: after restart")
        await expect(page.locator("#sessions li")).to_have_count(2)
        shot = tmp_path / "web-ui.png"
        await page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 0
        assert errors == []
        await browser.close()


async def test_permission_dialog(gateway: GatewayProcess, tmp_path: Path) -> None:
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = await browser.new_page()
        await start_in_page(page, gateway, tmp_path / "work")
        expect = playwright_api.expect
        await page.fill("#prompt", "/permission")
        await page.press("#prompt", "Enter")
        await expect(page.locator("#permission")).to_be_visible()
        await page.click("#permission-options button[data-option-id='allow-once']")
        await expect(page.locator(".msg.agent").last).to_contain_text('"optionId":"allow-once"')
        await expect(page.locator("#permission")).to_be_hidden()
        await browser.close()


async def test_a_tab_closed_mid_turn_and_a_crash_leave_an_outcome_on_screen(gateway: GatewayProcess,
                                                                             tmp_path: Path) -> None:
    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        expect = playwright_api.expect
        first = await browser.new_page()
        await start_in_page(first, gateway, tmp_path / "work")
        # A turn that ends by itself, and the tab that asked for it is closed meanwhile.
        await first.fill("#prompt", "/sleep 0.5")
        await first.press("#prompt", "Enter")
        await expect(first.locator("#session-state")).to_have_text("RUNNING")
        await first.close()
        second = await browser.new_page()
        await second.goto(ui_url(gateway))
        await second.locator("#sessions li").first.click()
        await expect(second.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
        # A turn that never ends by itself, cut by a gateway crash: after the restart it shows as interrupted.
        await second.fill("#prompt", "/hang")
        await second.press("#prompt", "Enter")
        await expect(second.locator("#session-state")).to_have_text("RUNNING")
        await gateway.kill9()
        await gateway.start()
        await expect(second.locator("#stream")).to_have_text("live", timeout=30_000)
        await expect(second.locator(".msg.notice").last).to_contain_text("turn interrupted", timeout=30_000)
        await expect(second.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
        await second.fill("#prompt", "after the crash")
        await second.press("#prompt", "Enter")
        await expect(second.locator(".msg.agent").last).to_have_text("echo: after the crash", timeout=30_000)
        shot = tmp_path / "web-ui-interrupted.png"
        await second.screenshot(path=str(shot), full_page=True)
        await browser.close()


async def test_ui_is_served_with_a_strict_policy(gateway: GatewayProcess) -> None:
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode().lower()
    assert head.startswith("http/1.1 200") and "content-security-policy: default-src 'none'" in head
    assert "text/html" in head
    writer.close()
