"""The web UI's start form, agents page and session settings in headless Chromium: a refused start says why, the
agents page and agents added while it is open, a sign-in from the page, the session's options and command palette;
and the page itself: its token, a narrow screen, its strict content policy."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import playwright.async_api as playwright_api

from agents.reference.options import COMMANDS as REFERENCE_COMMANDS
from agents.registry.installer import platform_key
from gateway.clients.client import GatewayClient
from tests.gateway.ui.web_ui_support import crash_and_restart, expect, new_page, say, shot, start_in_page, ui_url
from tests.gateway_harness import GatewayProcess, free_port, reference_profile
from tests.support.paths import REPO


async def test_an_agent_asking_to_sign_in_is_signed_in_from_the_page(gateway: GatewayProcess,
                                                                       browser: playwright_api.Browser,
                                                                       tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", agent="locked")
    card = page.locator(".sign-in")
    await expect(card).to_contain_text("The agent asks you to sign in")
    await expect(card.locator("form.sign-in-method")).to_have_count(2)  # its agent method and its API-key method
    await expect(card.locator(".sign-in-vars")).to_have_text("It needs REF_TOKEN: type it below.")  # named
    key = card.locator("form[data-method-id=reference-env] input[name=REF_TOKEN]")
    assert await key.get_attribute("type") == "password"
    # Until it is signed in, the session says so, and no prompt can start an agent that would refuse it.
    await expect(page.locator("#session-state")).to_have_text("needs sign-in")
    await expect(page.locator("#session-state")).to_have_class("badge tone-needs-sign-in")
    await expect(page.locator("#sessions li .badge")).to_have_text("needs sign-in")
    await expect(page.locator("#prompt")).to_be_disabled()
    await expect(page.locator("#send")).to_be_disabled()
    await expect(page.locator("#prompt")).to_have_attribute("placeholder", "Sign in first (the card above): the agent "
                                                            "starts once you are signed in")
    await shot(page, "ui-sign-in")
    await key.fill("dummy-page-key-0123456789")
    await card.locator("form[data-method-id=reference-env] button").click()
    await expect(page.locator(".sign-in")).to_have_count(0)
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    await expect(page.locator("#sessions li .badge")).to_have_text("WAITING_FOR_INPUT")
    await expect(page.locator("#agent-running")).to_have_text("agent running")
    await expect(page.locator("#prompt")).to_be_enabled()
    await say(page, "signed in")
    await expect(page.locator(".msg.agent")).to_have_text("echo: signed in")
    assert "dummy-page-key" not in await page.content()
    assert errors == []


async def test_options_usage_the_command_palette_and_what_was_not_reapplied(gateway: GatewayProcess,
                                                                              browser: playwright_api.Browser,
                                                                              tmp_path: Path) -> None:
    """A picker for each of the agent's options (select and boolean), the mode among them; the agent's usage in the
    header; its slash commands on `/`; and, after a restart where the agent refuses a chosen value, the notice."""
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", title="configured")
    model, mode = page.locator('#config-bar select[data-option-id="model"]'), page.locator(
        '#config-bar select[data-option-id="mode"]')
    await expect(model).to_have_value("ref-small")
    await model.select_option("ref-large")
    await mode.select_option("plan")
    await page.locator('#config-bar input[data-option-id="verbose"]').check()
    await expect(page.locator("#config-bar label.chosen")).to_have_count(3)  # kept across restarts, and marked so
    # The palette: the agent's own commands, filtered as the user types; the chosen one runs as the prompt.
    await page.fill("#prompt", "/")
    await expect(page.locator("#palette li")).to_have_count(len(REFERENCE_COMMANDS))
    await page.fill("#prompt", "/con")
    await expect(page.locator("#palette li")).to_have_count(1)
    await expect(page.locator("#palette li .what")).to_have_text(
        "Say the session's current mode, model, effort and verbosity")
    await shot(page, "ui-command-palette")
    await page.locator('#palette li[data-command="config"]').click()
    await expect(page.locator("#prompt")).to_have_value("/config ")
    await expect(page.locator("#palette")).to_be_hidden()
    await page.press("#prompt", "Enter")
    # The agent itself says what it runs with.
    await expect(page.locator(".msg.agent").last).to_have_text(
        "config: mode=plan model=ref-large effort=medium verbose=true")
    await expect(page.locator("#usage")).to_contain_text("context")
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")  # that turn is over
    # The agent changes its own mode: the picker follows, and the conversation says so.
    await say(page, "/mode ask")
    await expect(mode).to_have_value("ask")
    await expect(page.locator(".msg.notice").filter(has_text="The agent changed Mode: Ask")).to_have_count(1)
    await shot(page, "ui-config")
    # After a crash the agent forgets its configuration and refuses the chosen model: the rest is re-applied, and the
    # page says what could not be.
    reference_profile(gateway.agents_dir, tmp_path / "agent-state", "ref", "--forget-config", "--refuse-value",
                      "model=ref-large")
    await crash_and_restart(page, gateway)
    await page.locator("#sessions li", has_text="configured").click()  # auto-resume
    await expect(page.locator("#config-notice")).to_contain_text("Not applied: the agent refused model",
                                                                 timeout=30_000)
    await expect(mode).to_have_value("ask")
    await expect(model).to_have_value("ref-small")
    await shot(page, "ui-config-not-reapplied")
    await page.locator('#config-notice button[data-option-id="model"]').click()  # given up: said no more
    await expect(page.locator("#config-notice")).to_be_hidden()
    assert errors == []


async def test_claude_agent_acps_boolean_options_are_checkboxes(browser: playwright_api.Browser,
                                                                 tmp_path: Path) -> None:
    """claude-agent-acp's recorded session/new (replayed) offers "Fast mode" and "Ultracode" as `type: "boolean"`
    options of category `model_config`: each is a checkbox beside the selects."""
    agents, work = tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    recording = REPO / "fixtures" / "agents" / "claude-agent-acp@0.101.0" / "new.jsonl"
    command = [sys.executable, "-m", "agents.replay", "--pace", "0", str(recording)]
    (agents / "claude-replay.toml").write_text(f'id = "claude-replay"\ncommand = {orjson.dumps(command).decode()}\n')
    gw = GatewayProcess(tmp_path / "state", agents, "--default-agent", "claude-replay", port=free_port())
    await gw.start()
    try:
        page, errors = await new_page(browser)
        await start_in_page(page, gw, work, agent="claude-replay")
        for option, name in (("fast", "Fast mode"), ("ultracode", "Ultracode")):
            box = page.locator(f'#config-bar input[type=checkbox][data-option-id="{option}"]')
            await expect(box).to_be_visible()
            await expect(box).not_to_be_checked()
            await expect(page.locator(f'#config-bar label:has(input[data-option-id="{option}"])')).to_have_text(name)
        await shot(page, "ui-boolean-options")
        assert errors == [], errors
    finally:
        await gw.stop()


async def test_a_refused_start_says_why_by_the_form(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                    tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await page.goto(ui_url(gateway))
    await expect(page.locator("#stream")).to_have_text("live")
    root = str(gateway.state_dir.parent)
    # Nothing started yet: the field is empty, its hint says where: the root itself too (the workspace rules take
    # it unless it holds the gateway's state, which the page cannot see).
    await expect(page.locator("#cwd")).to_have_value("")
    await expect(page.locator("#cwd")).to_have_attribute("placeholder", f"working directory: {root} or a directory "
                                                         "inside it")
    await page.fill("#cwd", root)
    await page.click("#start")
    await expect(page.locator("#start-error")).to_contain_text("contains the gateway's own files")
    # This root holds the gateway's state: from now on the hint offers only directories inside it.
    await expect(page.locator("#cwd")).to_have_attribute("placeholder", f"working directory: a project directory "
                                                         f"inside {root}")
    await expect(page.locator("#start-error")).to_contain_text(f"Type a project's own directory instead, one that "
                                                               f"does not hold the gateway's state: {root}/my-project")
    await shot(page, "ui-start-refused-root")
    await page.fill("#cwd", "/usr")
    await page.click("#start")
    await expect(page.locator("#start-error")).to_contain_text("outside this owner's workspace roots")
    await expect(page.locator("#start-error")).to_contain_text(f"Type a project directory inside {root}.")
    await shot(page, "ui-start-refused")
    # An agent whose session/new fails: the session is FAILED, with the agent's own words from its stderr.
    await page.select_option("#agent", "no-key")
    await page.fill("#cwd", str(tmp_path / "work"))
    await page.click("#start")
    await expect(page.locator("#session-state")).to_have_text("FAILED")
    await expect(page.locator("#status-line")).to_contain_text("REF_API_KEY is not set")
    await expect(page.locator("#start-error")).to_contain_text("REF_API_KEY is not set")
    await expect(page.locator(".msg.notice.level-error")).to_contain_text("could not create a session")
    await shot(page, "ui-start-failed")
    # The gateway took that directory: after a reload the field offers it, not the root.
    await page.reload()
    await expect(page.locator("#stream")).to_have_text("live")
    await expect(page.locator("#cwd")).to_have_value(str(tmp_path / "work"))
    assert errors == [], errors


async def test_the_agents_page_shows_installs_and_starts_a_session_with_one(browser: playwright_api.Browser,
                                                                           tmp_path: Path) -> None:
    """An agent added from a registry index (a binary distribution: an archive whose command runs the reference
    agent), probed and checked by `agents doctor`: the page lists it with its version, sign-in and last check, and
    starts a session with it, whose head names the version."""
    state, agents, work = tmp_path / "state", tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    await add_from_registry(tmp_path, state, "ref-bin", "doctor")
    gw = GatewayProcess(state, agents, "--default-agent", "ref", port=free_port())
    await gw.start()
    try:
        page, errors = await new_page(browser)
        await page.goto(ui_url(gw))
        await expect(page.locator("#stream")).to_have_text("live")
        await page.fill("#cwd", str(work))
        await page.click("#agents-open")
        row = page.locator('#agents-table tr[data-agent="ref-bin"]')
        await expect(row.locator(".agent-version")).to_have_text("1.2.3")
        await expect(row.locator(".agent-auth")).to_have_text("signed in")
        await expect(row.locator(".agent-check")).to_contain_text("pass")
        await expect(page.locator('#agents-table tr[data-agent="ref"] .agent-version')).to_have_text("—")
        await shot(page, "ui-agents-page")
        await row.get_by_role("button", name="Start session").click()
        await expect(page.locator("#agents-page")).to_be_hidden()
        await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
        await expect(page.locator("#detail-head")).to_contain_text("ref-bin 1.2.3")
        await shot(page, "ui-agents-started")
        assert errors == [], errors
    finally:
        await gw.stop()


async def test_an_agent_added_while_the_page_is_open_is_offered_first_with_what_it_needs(
        browser: playwright_api.Browser, tmp_path: Path) -> None:
    """`agents add` while the page is open: focusing the start form lists the new agent without a reload, registry
    agents first; one that needs a sign-in says so (naming its variable) in the form and on the agents page."""
    state, agents, work = tmp_path / "state", tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    gw = GatewayProcess(state, agents, "--default-agent", "ref", port=free_port())
    await gw.start()
    try:
        page, errors = await new_page(browser)
        await page.goto(ui_url(gw))
        await expect(page.locator("#stream")).to_have_text("live")
        await expect(page.locator("#agent")).to_have_value("ref")
        await add_from_registry(tmp_path, state, "ref-locked", "--require-auth", "--auth-env", "REF_TOKEN")
        client = await gw.client()
        try:  # the gateway lists it (it looks at its installs at most every few seconds)
            added = await eventually(lambda: listed(client, "ref-locked"))
        finally:
            await client.close()
        vars_named = added.get("sign_in_vars") or []  # an older gateway names none: the state alone is said then
        needs = "needs sign-in" + (f": set {' or '.join(vars_named)}" if vars_named else "")
        await page.focus("#title")  # the start form, focused: the list is asked for again
        first = page.locator("#agent option").first
        await expect(first).to_have_attribute("value", "ref-locked")  # registry agents first
        await expect(first).to_have_text(f"Reference (from a registry) 1.2.3 ({needs})")
        await expect(page.locator("#agent")).to_have_value("ref")  # the person's pick stays
        await page.select_option("#agent", "ref-locked")
        await expect(page.locator("#agent-note")).to_have_text(f"Reference (from a registry) {needs}")
        await shot(page, "ui-agent-added")
        await page.click("#agents-open")
        await expect(page.locator('#agents-table tr[data-agent="ref-locked"] .agent-auth')).to_have_text(needs)
        await expect(page.locator("#agents-table tbody tr").first).to_have_attribute("data-agent", "ref-locked")
        await shot(page, "ui-agents-needs-sign-in")
        assert errors == [], errors
    finally:
        await gw.stop()


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    """What `check` returns once it returns something, asked again every quarter second until `timeout`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (found := await check()) is None:
        assert asyncio.get_running_loop().time() < deadline, "not seen in time"
        await asyncio.sleep(0.25)  # the gateway's own pace of looking at its installs: nothing to wait on instead
    return found


async def listed(client: GatewayClient, agent_id: str) -> dict[str, Any] | None:
    info = await client.call("gateway.info", {})
    return next((a for a in info["agents"] if a["id"] == agent_id), None)


async def add_from_registry(tmp_path: Path, state: Path, agent_id: str, *flags: str) -> None:
    """`agents refresh` from an index of one binary agent (an archive whose command runs the reference agent with
    `flags`, but "doctor" as the last, which runs `agents doctor` after the add), then `agents add` it."""
    doctor = flags[-1:] == ("doctor",)
    flags = flags[:-1] if doctor else flags
    script = (f'#!/bin/sh\nexec {sys.executable} -m agents.reference --state-dir {tmp_path / "agent-state"} '
              f'{" ".join(flags)} "$@"\n')
    archive = tmp_path / f"{agent_id}-1.2.3.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(agent_id)
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script.encode()))
    index = tmp_path / f"index-{agent_id}.json"
    index.write_bytes(orjson.dumps({"agents": [{
        "id": agent_id, "name": "Reference (from a registry)", "version": "1.2.3", "description": "reference",
        "distribution": {"binary": {platform_key(): {"archive": f"https://downloads.example/{archive.name}",
                                                       "cmd": f"./{agent_id}"}}}}]}))
    env = {**os.environ, "HOME": str(tmp_path)}
    steps = [["refresh", "--from", str(index)], ["add", agent_id, "--archive", str(archive), "--trust-on-first-use"]]
    for args in steps + ([["doctor", agent_id]] if doctor else []):
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "gateway", "agents", *args,
                                                        "--state-dir", str(state)],
                                       capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stdout + done.stderr


async def test_usable_at_400_pixels(gateway: GatewayProcess, browser: playwright_api.Browser, tmp_path: Path) -> None:
    page, errors = await new_page(browser, width=400)
    await start_in_page(page, gateway, tmp_path / "work", title="a long title that must not push the page sideways")
    await say(page, "a message on a phone")
    await expect(page.locator(".msg.agent")).to_have_text("echo: a message on a phone")
    assert await page.evaluate("document.documentElement.scrollWidth") <= 400
    for control in ("#prompt", "#send", "#resume", "#cancel"):
        box = await page.locator(control).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 400, (control, box)
    await shot(page, "ui-400px")
    assert errors == []


async def test_a_missing_or_wrong_token_asks_for_one(gateway: GatewayProcess, browser: playwright_api.Browser) -> None:
    page, _ = await new_page(browser)
    await page.goto(f"http://127.0.0.1:{gateway.port}/")
    await expect(page.locator("#login")).to_be_visible()
    await expect(page.locator("#login-reason")).to_have_text("This page needs the gateway's token.")
    await page.fill("#token", "not-the-token-at-all")
    await page.click("#connect")
    await expect(page.locator("#login-reason")).to_contain_text("refused this token")
    await shot(page, "ui-token-refused")
    await page.fill("#token", gateway.token or "")
    await page.click("#connect")
    await expect(page.locator("#stream")).to_have_text("live")
    await expect(page.locator("#login")).to_be_hidden()


async def test_ui_is_served_with_a_strict_policy(gateway: GatewayProcess) -> None:
    for path, kind in (("/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css"),
                       ("/ui/vendor/marked.min.js", "text/javascript")):
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode().lower()
        writer.close()
        assert head.startswith("http/1.1 200") and kind in head, (path, head)
        assert "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'" in head
        assert "unsafe-inline" not in head
