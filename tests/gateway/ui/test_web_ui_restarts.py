"""The web UI across gateway restarts and crashes, in headless Chromium: a session that needs a resume says so and
is resumed once, auto-resume off waits for a click, a failed restore offers recover, and a turn cut by a closed tab
or a crash leaves its outcome on screen."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import playwright.async_api as playwright_api

from tests.gateway.agenthost.test_gateway_restart import host_pids
from tests.gateway.ui.web_ui_support import crash_and_restart, expect, new_page, say, shot, start_in_page, ui_url
from tests.gateway_harness import GatewayProcess, free_port, reference_profile


async def test_a_restart_shows_needs_resume_and_reopening_resumes_once(gateway: GatewayProcess,
                                                                       browser: playwright_api.Browser,
                                                                       tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", title="other")  # one the page does not show at the crash
    await start_in_page(page, gateway, tmp_path / "work", title="shown")
    await say(page, "before")
    await expect(page.locator(".msg.agent")).to_have_text("echo: before")
    await expect(page.locator("#agent-running")).to_have_text("agent running")
    await gateway.kill9()
    await expect(page.locator("#status-line")).to_contain_text("Connection lost")  # no stale "agent running" alone
    await gateway.start()
    # Within seconds of the reconnect: the state the gateway reports, with the reason and an enabled Resume.
    await expect(page.locator("#stream")).to_have_text("live", timeout=30_000)
    await expect(page.locator("#agent-running")).to_have_text("agent stopped")
    await expect(page.locator("#status-line")).to_contain_text("Needs resume: the agent is not running")
    await expect(page.locator("#resume")).to_be_enabled()
    # Its badge, and every listed session's whose agent the crash took, says so: not a green WAITING_FOR_INPUT.
    await expect(page.locator("#session-state")).to_have_text("needs resume")
    await expect(page.locator("#session-state")).to_have_class("badge tone-needs-resume")
    for title in ("shown", "other"):
        await expect(page.locator("#sessions li", has_text=title).locator(".badge")).to_have_text("needs resume")
    await shot(page, "ui-needs-resume")
    # Reopening the session resumes it, once, and says how.
    await page.locator("#sessions li", has_text="shown").click()
    await expect(page.locator(".msg.notice").filter(has_text="restored by session/resume")).to_have_count(1)
    await expect(page.locator("#agent-running")).to_have_text("agent running")
    await expect(page.locator("#status-line")).to_be_hidden()
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    await expect(page.locator("#sessions li", has_text="shown").locator(".badge")).to_have_text("WAITING_FOR_INPUT")
    await expect(page.locator("#sessions li", has_text="other").locator(".badge")).to_have_text("needs resume")
    await say(page, "after")
    await expect(page.locator(".msg.agent").last).to_have_text("echo: after")
    await shot(page, "ui-resumed")
    assert errors == []


async def test_auto_resume_off_waits_for_a_click(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                 tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", agent="paid")
    await crash_and_restart(page, gateway)
    await page.locator("#sessions li").first.click()
    await expect(page.locator("#status-line")).to_contain_text("auto-resume is off for this agent: press Resume")
    await expect(page.locator("#agent-running")).to_have_text("agent stopped")
    await shot(page, "ui-auto-resume-off")
    await page.click("#resume")
    await expect(page.locator(".msg.notice").filter(has_text="restored by session/resume")).to_have_count(1)
    await expect(page.locator("#agent-running")).to_have_text("agent running")
    assert errors == []


async def test_a_failed_restore_offers_recover(gateway: GatewayProcess, browser: playwright_api.Browser,
                                               tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", agent="ref-once-internal")
    await crash_and_restart(page, gateway)
    await page.locator("#sessions li").first.click()  # auto-resume: the agent fails it once (-32603)
    await expect(page.locator("#status-line")).to_contain_text("Restore failed", timeout=30_000)
    await expect(page.locator("#recover-retry")).to_be_enabled()
    await shot(page, "ui-error-recovery")
    await page.click("#recover-retry")
    await expect(page.locator(".msg.notice").filter(has_text="restored by session/resume")).to_have_count(1)
    await expect(page.locator("#status-line")).to_be_hidden()
    assert errors == []


async def test_a_tab_closed_mid_turn_and_a_crash_leave_an_outcome_on_screen(gateway: GatewayProcess,
                                                                             browser: playwright_api.Browser,
                                                                             tmp_path: Path) -> None:
    first, _ = await new_page(browser)
    await start_in_page(first, gateway, tmp_path / "work")
    # A turn that ends by itself, and the tab that asked for it is closed meanwhile.
    await say(first, "/sleep 0.5")
    await expect(first.locator("#session-state")).to_have_text("RUNNING")
    await first.close()
    second, _ = await new_page(browser)
    await second.goto(ui_url(gateway))
    await expect(second.locator("#stream")).to_have_text("live")
    await second.locator("#sessions li").first.click()
    await expect(second.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    # A turn that never ends by itself, cut by a gateway crash: after the restart it shows as interrupted.
    await say(second, "/hang")
    await expect(second.locator("#session-state")).to_have_text("RUNNING")
    await crash_and_restart(second, gateway)
    await expect(second.locator(".msg.turn").last).to_contain_text("turn interrupted", timeout=30_000)
    # Not a stale RUNNING, nor a WAITING_FOR_INPUT promising an agent that waits: the crash took it.
    await expect(second.locator("#session-state")).to_have_text("needs resume")
    await expect(second.locator("#session-state")).to_have_attribute("data-state", "WAITING_FOR_INPUT")
    await expect(second.locator("#sessions li .badge").first).to_have_text("needs resume")
    await say(second, "after the crash")  # a prompt resumes the agent lazily
    await expect(second.locator(".msg.agent").last).to_have_text("echo: after the crash", timeout=30_000)
    await expect(second.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    await shot(second, "ui-interrupted")


async def test_a_turn_its_agent_host_kept_running_goes_on_on_screen_after_a_crash(
        tmp_path: Path, browser: playwright_api.Browser) -> None:
    """With agent hosts, a gateway `kill -9` mid-turn: the open page reconnects, the rest of the turn shows once and in
    order after a note of where the gateway went, the head says the agent kept running, and the page's "connection
    lost" error goes once the turn's outcome is on screen."""
    agents = tmp_path / "agents"
    agents.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    config = tmp_path / "gateway.toml"
    config.write_text("host_linger = 60\n")
    gateway = GatewayProcess(tmp_path / "state", agents, "--default-agent", "ref", port=free_port(), config=config)
    await gateway.start()
    try:
        page, errors = await new_page(browser)
        await start_in_page(page, gateway, work, title="kept")
        gate = work / "gate"
        await say(page, f"/gate {gate} 40")
        await expect(page.locator(".msg.agent").last).to_contain_text("chunk 19 ")
        await gateway.kill9()
        await expect(page.locator("#prompt-error")).to_contain_text("Connection lost while the turn ran")
        gate.touch()  # the rest of the turn is said while no gateway runs: it waits in the host's spool
        await gateway.start()  # the same port: the open page finds it again
        await expect(page.locator("#stream")).to_have_text("live", timeout=30_000)
        await expect(page.locator("#kept-running")).to_have_text("kept running while the gateway restarted")
        await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT", timeout=30_000)
        await expect(page.locator("#prompt-error")).to_be_hidden()
        said = " ".join(await page.locator(".msg.agent").all_inner_texts())
        assert [w for w in said.split() if w.isdigit()] == [str(i) for i in range(40)], said  # once, in order
        # The note sits where the gateway went: after chunk 19, before chunk 20.
        order = await page.locator("#transcript .msg").evaluate_all(
            "nodes => nodes.map(n => n.classList.contains('notice') ? 'NOTE:' + n.textContent : n.textContent)")
        note = next(i for i, text in enumerate(order) if "kept running while the gateway restarted" in text)
        assert "chunk 19 " in " ".join(order[:note]) and "chunk 20 " in " ".join(order[note:]), order
        await shot(page, "ui-kept-running")
        await say(page, "after")  # the next turn: the head's note has said what it had to
        await expect(page.locator(".msg.agent").last).to_have_text("echo: after")
        await expect(page.locator("#kept-running")).to_have_count(0)
        assert errors == []
    finally:
        await gateway.stop()
        for pid in host_pids(gateway.state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
