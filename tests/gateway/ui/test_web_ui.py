"""The web UI end to end in headless Chromium (Debian's, driven by Playwright), one behaviour per test, each state
it reaches saved as a screenshot in `.screenshots/` (look at them: a green test says nothing of a broken layout)."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import playwright.async_api as playwright_api
import pytest

from agents.reference.options import COMMANDS as REFERENCE_COMMANDS
from agents.registry.installer import platform_key
from tests.acp_wire import AcpWire, is_update
from tests.gateway_harness import GatewayProcess, free_port, reference_profile
from tests.support.paths import REPO

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = REPO / ".screenshots"
expect = playwright_api.expect


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
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")


async def crash_and_restart(page: playwright_api.Page, gateway: GatewayProcess) -> None:
    """`kill -9` the gateway, start it again, and wait until the page is live on it."""
    await gateway.kill9()
    await gateway.start()
    await expect(page.locator("#stream")).to_have_text("live", timeout=30_000)


async def say(page: playwright_api.Page, text: str) -> None:
    await page.fill("#prompt", text)
    await page.press("#prompt", "Enter")


async def test_start_prompt_markdown_and_cancel(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", title="first")
    assert "token" not in page.url  # the token leaves the address bar
    await say(page, "**bold** and `code`")
    await expect(page.locator(".msg.agent strong")).to_have_text("bold")  # markdown, rendered
    await expect(page.locator(".msg.agent code")).to_have_text("code")
    await expect(page.locator(".msg.user")).to_have_text("**bold** and `code`")  # what the user typed, as typed
    await expect(page.locator(".msg.turn").last).to_contain_text("turn ended: end_turn")  # every stop reason
    assert await page.locator(".msg[data-ts]").count() >= 3  # timestamps
    assert errors == [], "\n".join(errors)
    # An agent's message cannot run script: sanitised, and the policy forbids it anyway. (The browser reports the
    # sanitiser's parse of the handler as blocked, and the image `x` as missing: nothing else may go wrong.)
    await say(page, '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>')
    await expect(page.locator(".msg.turn")).to_have_count(2)
    assert await page.evaluate("window.__pwned") is None
    assert await page.locator(".msg.agent img[onerror], .msg.agent script").count() == 0
    assert all("Content Security Policy" in e or "404" in e for e in errors), errors
    await shot(page, "ui-markdown")
    asked: list[str] = []

    async def decline_then_accept(dialog: playwright_api.Dialog) -> None:
        asked.append(dialog.message)
        await (dialog.dismiss() if len(asked) == 1 else dialog.accept())
    page.on("dialog", decline_then_accept)
    await page.click("#cancel")  # asked first: declined, nothing happens
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    assert asked and "for good" in asked[0]
    await page.click("#cancel")
    await expect(page.locator("#session-state")).to_have_text("CANCELLED")
    await expect(page.locator("#prompt")).to_be_disabled()


async def test_a_fork_opens_with_the_conversation_so_far(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                          tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", title="original")
    await say(page, "before the fork")
    await expect(page.locator(".msg.turn")).to_have_count(1)
    await page.click("#fork")
    await expect(page.locator("#detail-head strong")).to_have_text("original (fork)")
    await expect(page.locator(".forked-from")).to_have_text("forked from original")
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    await expect(page.locator(".msg.user").first).to_have_text("before the fork")  # the conversation so far
    await say(page, "/recall")
    await expect(page.locator(".msg.agent").last).to_contain_text("recall: 2 prompts: before the fork | /recall")
    await shot(page, "ui-fork")
    await page.click(".forked-from")
    await expect(page.locator("#detail-head strong")).to_have_text("original")
    assert errors == [], "\n".join(errors)


async def test_a_restart_shows_needs_resume_and_reopening_resumes_once(gateway: GatewayProcess,
                                                                       browser: playwright_api.Browser,
                                                                       tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work")
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
    await shot(page, "ui-needs-resume")
    # Reopening the session resumes it, once, and says how.
    await page.locator("#sessions li").first.click()
    await expect(page.locator(".msg.notice").filter(has_text="restored by session/resume")).to_have_count(1)
    await expect(page.locator("#agent-running")).to_have_text("agent running")
    await expect(page.locator("#status-line")).to_be_hidden()
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


async def test_permission_inline_with_its_diff_and_answer(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                          tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work")
    await say(page, "/permission")
    card = page.locator(".card.permission")
    await expect(card).to_contain_text("Permission: Write notes.txt")
    await expect(card.locator(".kind")).to_have_text("edit")
    await expect(card).to_contain_text(str(tmp_path / "work" / "notes.txt"))
    await expect(card.locator(".diff .del")).to_have_text("- draft")
    await expect(card.locator(".diff .add")).to_have_text("+ final")
    await expect(page.locator("#sessions li").first).to_contain_text("1 waiting for your answer")
    await shot(page, "ui-permission")
    await card.locator("button[data-option-id='allow-once']").click()
    await expect(card.locator(".answered")).to_have_text("Answered: Allow once (by user)")
    await expect(page.locator(".msg.agent").last).to_contain_text('"optionId":"allow-once"')
    assert errors == []


async def test_a_remote_acp_clients_session_is_shared_with_the_page(gateway: GatewayProcess,
                                                                   browser: playwright_api.Browser,
                                                                   tmp_path: Path) -> None:
    """A session an ACP client made on /acp is an ordinary session on the page: listed, its conversation shown, the
    page's prompt seen by the client, and a permission the client's turn asked for answered on the page."""
    acp = await AcpWire.connect(gateway.port, str(gateway.token))
    sid = (await acp.call("session/new", {"cwd": str(tmp_path / "work"), "mcpServers": [],
                                          "_meta": {"acpGateway": {"title": "from an ACP client"}}}))["sessionId"]
    await acp.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hello from ACP"}]})
    page, errors = await new_page(browser)
    await page.goto(ui_url(gateway))
    await expect(page.locator("#stream")).to_have_text("live")
    await page.locator("#sessions li", has_text="from an ACP client").click()
    await expect(page.locator(".msg.user").first).to_have_text("hello from ACP")
    await expect(page.locator(".msg.agent").last).to_contain_text("echo: hello from ACP")
    mark, turns = len(acp.frames), await page.locator(".msg.turn").count()
    await say(page, "hello from the page")
    await acp.wait_for(is_update("agent_message_chunk", "echo: hello from the page"), start=mark)
    await expect(page.locator(".msg.turn")).to_have_count(turns + 1)  # the page's turn is over: the client may prompt
    assert acp.texts(start=mark) == [("user_message_chunk", "hello from the page"),
                                     ("agent_message_chunk", "echo: hello from the page")]
    acp.on_request = lambda request: None  # the client leaves the question to the page
    prompt = asyncio.ensure_future(acp.call("session/prompt", {"sessionId": sid,
                                                               "prompt": [{"type": "text", "text": "/permission"}]}))
    card = page.locator(".card.permission")
    await expect(card).to_contain_text("Permission: Write notes.txt")
    await shot(page, "ui-acp-client-session")
    await card.locator("button[data-option-id='allow-once']").click()
    withdrawn = await acp.wait_for(lambda f: f.get("method") == "$/cancel_request", start=mark)
    asked = next(f for f in acp.frames if f.get("method") == "session/request_permission")
    assert withdrawn["params"] == {"requestId": asked["id"]}
    assert await asyncio.wait_for(prompt, 15) == {"stopReason": "end_turn"}
    await expect(page.locator(".msg.agent").last).to_contain_text('"optionId":"allow-once"')
    await acp.close()
    assert errors == []


async def test_tool_calls_unknown_updates_and_the_raw_pane(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                           tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work")
    await say(page, "/tool ls README.md")
    tool = page.locator(".card.tool")
    await expect(tool).to_contain_text("⚙ ls")
    await expect(tool.locator(".status")).to_have_text("completed")
    # The turn ends a moment after its tool call completes: a prompt sent before that is refused (busy, -32010).
    await expect(page.locator(".msg.turn").last).to_contain_text("turn ended: end_turn")
    await say(page, "/unknown-update")
    raw = page.locator("details.raw-entry")
    await expect(raw.locator("summary")).to_have_text("[_reference_future_kind]")  # folded, not a box
    await raw.locator("summary").click()
    await expect(raw.locator("pre")).to_contain_text('"payload"')
    await page.click("#raw-toggle")
    await expect(page.locator("#raw-log")).to_contain_text('"type":"session_update"')
    await shot(page, "ui-tools-raw")
    # After a reload the transcript comes from the journal: the tool call looks the same.
    await page.reload()
    await expect(page.locator("#stream")).to_have_text("live")
    await expect(page.locator(".card.tool").first).to_contain_text("⚙ ls")
    await expect(page.locator(".card.tool .status").first).to_have_text("completed")
    assert errors == []


async def test_an_agents_terminal_in_its_tool_call_with_colours(gateway: GatewayProcess,
                                                                 browser: playwright_api.Browser,
                                                                 tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work")
    await say(page, "/term printf 'plain \\033[31mred\\033[0m <b>not bold</b>\\n'; exit 3")
    tool = page.locator(".card.tool")
    terminal = tool.locator(".terminal")
    await expect(terminal.locator(".terminal-head code")).to_contain_text("$ sh -c")
    await expect(terminal.locator(".terminal-head .status")).to_have_text("exit 3")
    output = terminal.locator(".terminal-output")
    await expect(output).to_contain_text("plain red <b>not bold</b>")  # the markup is text, escaped
    red = output.locator("span", has_text="red")
    await expect(red).to_have_count(1)
    await expect(red).to_have_class("ansi-red-fg")
    assert await red.evaluate("e => getComputedStyle(e).color") == "rgb(255, 123, 114)"  # app.css's red, applied
    assert await page.locator(".terminal-output b").count() == 0
    await expect(page.locator("#transcript > .terminal")).to_have_count(0)  # inside its tool call, not twice
    await shot(page, "ui-terminal")
    # Reloaded: the same, from the journal.
    await page.reload()
    await expect(page.locator(".card.tool .terminal .status")).to_have_text("exit 3")
    await expect(page.locator(".card.tool .terminal-output span", has_text="red")).to_have_count(1)
    assert errors == []


async def test_an_agents_question_as_a_form_refused_then_answered(gateway: GatewayProcess,
                                                                   browser: playwright_api.Browser,
                                                                   tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work")
    await page.fill("#prompt", "/elicit form")
    await page.press("#prompt", "Enter")
    card = page.locator(".card.elicitation")
    await expect(card).to_contain_text("Who is asking?")
    form = card.locator("form.elicitation-form")
    await expect(form.locator("label")).to_have_count(4)  # name, age, colour (a choice), subscribe (a checkbox)
    await form.locator("input[name=age]").fill("-3")
    await form.locator("input[name=name]").fill("Ada")
    await card.locator("button", has_text="Send").click()
    await expect(card.locator(".call-error")).to_contain_text("content.age")  # refused; the question stays open
    await shot(page, "ui-elicitation-refused")
    await form.locator("input[name=age]").fill("36")
    await form.locator("select[name=colour]").select_option("green")
    await card.locator("button", has_text="Send").click()
    await expect(card.locator(".answered")).to_have_text("Answered: accept (by user)")
    await expect(page.locator(".msg.agent").last).to_contain_text('"colour":"green"')
    await shot(page, "ui-elicitation-answered")
    assert errors == []


async def test_an_agent_asking_to_sign_in_is_signed_in_from_the_page(gateway: GatewayProcess,
                                                                       browser: playwright_api.Browser,
                                                                       tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", agent="locked")
    card = page.locator(".sign-in")
    await expect(card).to_contain_text("The agent asks you to sign in")
    await expect(card.locator("form.sign-in-method")).to_have_count(2)  # its agent method and its API-key method
    key = card.locator("form[data-method-id=reference-env] input[name=REF_TOKEN]")
    assert await key.get_attribute("type") == "password"
    await shot(page, "ui-sign-in")
    await key.fill("dummy-page-key-0123456789")
    await card.locator("form[data-method-id=reference-env] button").click()
    await expect(page.locator(".sign-in")).to_have_count(0)
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    await expect(page.locator("#agent-running")).to_have_text("agent running")
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


async def test_one_transcript_live_reopened_and_reloaded(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                        tmp_path: Path) -> None:
    """Every kind of entry — messages, a tool call, a plan, permission cards answered (with the diff and the answer),
    unanswered and still pending, the gateway's messages, a failed turn, turn markers, an update newer than the
    page — reads the same live, after opening another session and coming back, and after a reload (which keeps
    the selected session, as the URL does)."""
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", title="other")
    await start_in_page(page, gateway, tmp_path / "work", title="everything")
    await expect(page.locator("#detail-head strong")).to_have_text("everything")
    turns = page.locator(".msg.turn")
    for n, text in enumerate(["hello", "/tool ls README.md", "/plan look around; make the change", "/permission"], 1):
        await say(page, text)
        if text == "/permission":
            await page.locator(".card.permission button[data-option-id='allow-once']").click()
        await expect(turns).to_have_count(n)
    await say(page, "/permission")  # a request the turn's end leaves unanswered
    await expect(page.locator(".card.permission button")).to_have_count(2)
    await page.click("#stop-turn")
    await expect(page.locator(".card.permission .answered").last).to_contain_text("Answered: cancelled")
    await expect(turns).to_have_count(5)  # the cancelled turn has ended: a prompt before that is refused as busy
    await say(page, "/fail")
    await expect(turns.last).to_contain_text("turn failed")
    await say(page, "/unknown-update")
    await expect(turns).to_have_count(7)
    await crash_and_restart(page, gateway)  # the gateway's own message about how the agent came back
    await say(page, "after the restart")
    await expect(page.locator(".msg.notice").filter(has_text="restored by session/resume")).to_have_count(1)
    await expect(turns).to_have_count(8)
    await say(page, "/permission")  # pending while the transcript is compared
    await expect(page.locator(".card.permission button")).to_have_count(2)
    live = await page.locator("#transcript").inner_text()
    for kind in ("hello", "⚙ ls", "Plan", "make the change", "Answered: Allow once (by user)", "- draft", "+ final",
                 "turn failed", "[_reference_future_kind]", "restored by session/resume", "Starting the agent",
                 "turn ended: end_turn", "Allow once\nReject"):
        assert kind in live, (kind, live)
    await shot(page, "ui-transcript-live")
    await page.locator("#sessions li", has_text="other").click()
    await expect(page.locator("#detail-head strong")).to_have_text("other")
    await page.locator("#sessions li", has_text="everything").click()
    await expect(page.locator(".card.permission button")).to_have_count(2)
    assert await page.locator("#transcript").inner_text() == live
    await page.reload()
    await expect(page.locator("#stream")).to_have_text("live")
    await expect(page.locator("#detail-head strong")).to_have_text("everything")  # the URL kept it
    await expect(page.locator(".card.permission button")).to_have_count(2)
    assert await page.locator("#transcript").inner_text() == live
    await shot(page, "ui-transcript-reloaded")
    await page.go_back()  # the session selected before is shown again
    await expect(page.locator("#detail-head strong")).to_have_text("other")
    assert errors == [], errors


async def test_a_transcript_past_retention_is_shown_from_history(browser: playwright_api.Browser,
                                                                tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    config = tmp_path / "gw.toml"
    config.write_text("event_retention = 10\n")
    gw = GatewayProcess(tmp_path / "state", agents, "--default-agent", "ref", config=config)
    await gw.start()
    try:
        client = await gw.client()
        view = await client.call("task.session.start", {"cwd": str(tmp_path / "work"), "wait_ready": True})
        for n in range(6):
            await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": f"turn {n}"})
        await client.close()
        await gw.stop()  # the journal is pruned when the gateway opens it again
        await gw.start()
        page, errors = await new_page(browser)
        await page.goto(ui_url(gw) + f"#{view['session_id']}")
        await expect(page.locator(".msg.notice").first).to_contain_text("past the event journal's retention")
        await expect(page.locator(".msg.user")).to_have_count(6)
        await expect(page.locator(".msg.agent").last).to_have_text("echo: turn 5")
        await say(page, "and now")  # then live, as ever
        await expect(page.locator(".msg.agent").last).to_have_text("echo: and now", timeout=30_000)
        await shot(page, "ui-transcript-from-history")
        assert errors == [], errors
    finally:
        await gw.stop()


async def test_a_refused_start_says_why_by_the_form(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                    tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await page.goto(ui_url(gateway))
    await expect(page.locator("#stream")).to_have_text("live")
    root = str(gateway.state_dir.parent)
    await expect(page.locator("#cwd")).to_have_value(root)  # the owner's root is offered, and said
    assert root in (await page.locator("#cwd").get_attribute("placeholder") or "")
    await page.fill("#cwd", "/usr")
    await page.click("#start")
    await expect(page.locator("#start-error")).to_contain_text("outside this owner's workspace roots")
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
    script = f'#!/bin/sh\nexec {sys.executable} -m agents.reference --state-dir {tmp_path / "agent-state"} "$@"\n'
    archive = tmp_path / "ref-bin-1.2.3.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("ref-bin")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script.encode()))
    index = tmp_path / "index.json"
    index.write_bytes(orjson.dumps({"agents": [{
        "id": "ref-bin", "name": "Reference (from a registry)", "version": "1.2.3", "description": "reference",
        "distribution": {"binary": {platform_key(): {"archive": "https://downloads.example/ref-bin-1.2.3.tar.gz",
                                                       "cmd": "./ref-bin"}}}}]}))
    env = {**os.environ, "HOME": str(tmp_path)}
    for args in (["refresh", "--from", str(index)], ["add", "ref-bin", "--archive", str(archive),
                                                     "--trust-on-first-use"], ["doctor", "ref-bin"]):
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "gateway", "agents", *args,
                                                        "--state-dir", str(state)],
                                       capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
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
    await expect(second.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")  # not a stale RUNNING
    await expect(second.locator("#sessions li .badge").first).to_have_text("WAITING_FOR_INPUT")
    await say(second, "after the crash")  # a prompt resumes the agent lazily
    await expect(second.locator(".msg.agent").last).to_have_text("echo: after the crash", timeout=30_000)
    await shot(second, "ui-interrupted")


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
