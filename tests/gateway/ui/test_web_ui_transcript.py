"""The web UI's transcript end to end in headless Chromium: a prompt and its markdown, tool calls, an agent's
terminal, permissions and questions answered inline, a session an ACP client shares, a fork, a cancel, and one
transcript that reads the same live, reopened, reloaded and past the journal's retention."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import playwright.async_api as playwright_api

from tests.acp_wire import AcpWire, is_update
from tests.gateway.ui.web_ui_support import crash_and_restart, expect, new_page, say, shot, start_in_page, ui_url
from tests.gateway_harness import GatewayProcess, reference_profile


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
    cancelled = page.locator("#transcript > .msg").last  # the transcript says how it ended, live and reloaded
    await expect(cancelled).to_contain_text("Session cancelled")
    await shot(page, "ui-cancelled")
    await page.reload()
    await expect(page.locator("#stream")).to_have_text("live")
    await expect(page.locator(".msg.notice").filter(has_text="Session cancelled")).to_have_count(1)
    await expect(page.locator("#transcript > .msg").last).to_contain_text("Session cancelled")


async def test_a_fork_opens_with_the_conversation_so_far(gateway: GatewayProcess, browser: playwright_api.Browser,
                                                          tmp_path: Path) -> None:
    page, errors = await new_page(browser)
    await page.set_viewport_size({"width": 1200, "height": 600})  # a transcript taller than its pane
    await start_in_page(page, gateway, tmp_path / "work", title="original")
    await say(page, "before the fork")
    await expect(page.locator(".msg.turn")).to_have_count(1)
    await say(page, "/term seq 1 12")
    await expect(page.locator(".card.tool .terminal .status")).to_have_text("exit 0")
    await expect(page.locator(".msg.turn")).to_have_count(2)
    await page.click("#fork")
    await expect(page.locator("#detail-head strong")).to_have_text("original (fork)")
    await expect(page.locator(".forked-from")).to_have_text("forked from original")
    await expect(page.locator("#session-state")).to_have_text("WAITING_FOR_INPUT")
    await expect(page.locator(".msg.user").first).to_have_text("before the fork")  # the conversation so far
    # The copied terminal is shown whole, as tall as its output, however long the transcript grows.
    copied = page.locator("#transcript > .terminal")
    await expect(copied.locator(".terminal-output")).to_contain_text("12")
    await say(page, "/recall")
    await expect(page.locator(".msg.agent").last).to_contain_text("recall: 3 prompts: before the fork | /term seq")
    assert await page.evaluate("(b => b.scrollHeight > b.clientHeight)(document.getElementById('transcript'))")
    heights = await copied.evaluate(
        "t => [t.clientHeight, t.scrollHeight, t.querySelector('.terminal-output').clientHeight]")
    assert heights[0] == heights[1] and heights[2] > 100, heights  # not squeezed to a sliver
    await copied.scroll_into_view_if_needed()
    await shot(page, "ui-fork")
    # "Forked from session s-…" in the fork and "Forked into session s-…" in the original open each other.
    fork_id = await page.evaluate("window.__acpGateway.viewed")
    await page.locator(".msg.notice a.session-link").first.click()
    await expect(page.locator("#detail-head strong")).to_have_text("original")
    into = page.locator(".msg.notice", has_text="Forked into session").locator("a.session-link")
    await expect(into).to_have_text(fork_id)
    await shot(page, "ui-forked-into")
    await into.click()
    await expect(page.locator("#detail-head strong")).to_have_text("original (fork)")
    await page.click(".forked-from")
    await expect(page.locator("#detail-head strong")).to_have_text("original")
    assert errors == [], "\n".join(errors)


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
    await say(page, "/term printf 'plain \\033[31mred\\033[0m <b>not bold</b> \\033[1mloud\\033[0m "
                    "\\033[38;5;208morange\\033[0m\\n'; exit 3")
    tool = page.locator(".card.tool")
    terminal = tool.locator(".terminal")
    await expect(terminal.locator(".terminal-head code")).to_contain_text("$ sh -c")
    await expect(terminal.locator(".terminal-head .status")).to_have_text("exit 3")
    output = terminal.locator(".terminal-output")
    await expect(output).to_contain_text("plain red <b>not bold</b>")  # the markup is text, escaped
    red = output.locator("span", has_text="red")
    await expect(red).to_have_count(1)
    await expect(red).to_have_class("ansi-red-fg")
    assert await span_style(page, "red", "color") == "rgb(255, 123, 114)"  # app.css's red, applied
    assert await page.locator(".terminal-output b").count() == 0
    # Bold and a 256-colour orange too, with no inline style the page's policy would refuse (each a console error).
    assert await span_style(page, "loud", "fontWeight") == "700"
    assert await span_style(page, "orange", "color") == "rgb(255, 135, 0)"
    assert await output.locator("[style]").evaluate_all("es => es.map(e => e.getAttribute('style'))") == [
        "color: rgb(255, 135, 0);"]  # set through the CSSOM, which the policy allows
    assert not [e for e in errors if "Content Security Policy" in e], errors
    await expect(page.locator("#transcript > .terminal")).to_have_count(0)  # inside its tool call, not twice
    await shot(page, "ui-terminal")
    # Reloaded: the same, from the journal.
    await page.reload()
    await expect(page.locator(".card.tool .terminal .status")).to_have_text("exit 3")
    await expect(page.locator(".card.tool .terminal-output span", has_text="red")).to_have_count(1)
    assert errors == []


async def test_a_long_command_never_squeezes_how_its_terminal_ended(gateway: GatewayProcess,
                                                                     browser: playwright_api.Browser,
                                                                     tmp_path: Path) -> None:
    """A command far wider than its card is cut short (whole in its tooltip); "exit 0", and a fork's copy's "recorded",
    stay on one line, however long the command."""
    page, errors = await new_page(browser)
    await start_in_page(page, gateway, tmp_path / "work", title="long")
    long_command = "echo done " + " ".join(f"--an-argument-long-enough-to-fill-the-card-{i}" for i in range(12))
    await say(page, f"/term {long_command}")
    status = page.locator(".card.tool .terminal .status")
    await expect(status).to_have_text("exit 0")
    await expect(page.locator(".msg.turn")).to_have_count(1)
    await expect(page.locator(".card.tool .terminal .terminal-head code")).to_have_attribute(
        "title", re.compile(re.escape(long_command)))
    assert await one_line_and_cut_short(page, ".card.tool .terminal") == [1, True, True]
    await shot(page, "ui-terminal-long-command")
    await page.click("#fork")
    await expect(page.locator("#detail-head strong")).to_have_text("long (fork)")
    copied = page.locator("#transcript > .terminal .status")
    await expect(copied).to_have_text("recorded")
    assert await one_line_and_cut_short(page, "#transcript > .terminal") == [1, True, True]
    await shot(page, "ui-terminal-long-command-copied")
    assert errors == [], "\n".join(errors)


async def one_line_and_cut_short(page: playwright_api.Page, terminal: str) -> list[Any]:
    """Of the terminal card `terminal`: the lines its status takes, whether that status shows all of its text, and
    whether the command is cut short rather than pushing the card wider than the transcript."""
    return list(await page.evaluate(
        """(sel) => {
          const card = document.querySelector(sel), status = card.querySelector('.terminal-head .status');
          const code = card.querySelector('.terminal-head code'), range = document.createRange();
          range.selectNodeContents(status);
          const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
          return [lines, status.scrollWidth <= status.clientWidth,
                  code.scrollWidth > code.clientWidth && card.scrollWidth <= card.clientWidth];
        }""", terminal))


async def span_style(page: playwright_api.Page, text: str, prop: str) -> str:
    """The computed `prop` of the terminal output's span saying `text`, read in one go (the transcript is drawn again
    on every event of the session, so a span found earlier may have left the page)."""
    return str(await page.evaluate(
        "([text, prop]) => getComputedStyle([...document.querySelectorAll('.terminal-output span')]"
        ".find((e) => e.textContent === text))[prop]", [text, prop]))


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
