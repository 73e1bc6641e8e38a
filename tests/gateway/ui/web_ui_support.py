"""What the web UI's browser tests share: Debian's Chromium and how it is launched, a page that collects its errors,
screenshots in `.screenshots/` (look at them: a green test says nothing of a broken layout), and the steps every test
takes (open the UI, start a session, say something, crash and restart the gateway)."""

from __future__ import annotations

import shutil
from pathlib import Path

import playwright.async_api as playwright_api

from tests.gateway_harness import GatewayProcess
from tests.support.paths import REPO

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = REPO / ".screenshots"
expect = playwright_api.expect


async def new_page(browser: playwright_api.Browser, width: int = 1200) -> tuple[playwright_api.Page, list[str]]:
    page = await browser.new_page(viewport={"width": width, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # A gateway that is down (the restart tests kill it) is the browser's complaint, not the page's.
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type in ("error", "warning") and "ERR_CONNECTION_REFUSED" not in msg.text else None)
    return page, errors


async def shot(page: playwright_api.Page, name: str) -> None:
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0


def ui_url(gateway: GatewayProcess) -> str:
    return f"http://127.0.0.1:{gateway.port}/?token={gateway.token}"


async def start_in_page(page: playwright_api.Page, gateway: GatewayProcess, cwd: Path, agent: str = "ref",
                        title: str = "") -> None:
    await page.goto(ui_url(gateway))
    await expect(page.locator("#stream")).to_have_text("live")
    await page.select_option("#agent", agent)
    await page.fill("#cwd", str(cwd))
    await page.fill("#title", title)
    await page.click("#start")
    # The state itself (its badge may say what must come first: a sign-in, say).
    await expect(page.locator("#session-state")).to_have_attribute("data-state", "WAITING_FOR_INPUT")


async def crash_and_restart(page: playwright_api.Page, gateway: GatewayProcess) -> None:
    """`kill -9` the gateway, start it again, and wait until the page is live on it."""
    await gateway.kill9()
    await gateway.start()
    await expect(page.locator("#stream")).to_have_text("live", timeout=30_000)


async def say(page: playwright_api.Page, text: str) -> None:
    await page.fill("#prompt", text)
    await page.press("#prompt", "Enter")
