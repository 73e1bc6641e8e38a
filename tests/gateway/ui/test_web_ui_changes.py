"""The web UI's Changes pane in headless Chromium (docs/worktrees.md): a session started in a worktree of its own
from the start form, its branch in the head, what its turns changed file by file, its checkpoints with Rewind (the
files on disk go back), and Merge into the branch it came from."""

from __future__ import annotations

from pathlib import Path

import playwright.async_api as playwright_api

from tests.gateway.runtime.test_worktrees import git, make_repo, tree_files
from tests.gateway.ui.web_ui_support import expect, new_page, say, shot, ui_url
from tests.gateway_harness import GatewayProcess


async def test_changes_checkpoints_rewind_and_merge_in_the_page(gateway: GatewayProcess,
                                                                browser: playwright_api.Browser,
                                                                tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "work" / "repo", {"a.txt": "one\n", "keep.txt": "kept\n"})
    page, errors = await new_page(browser, width=1400)
    await page.goto(ui_url(gateway))
    await expect(page.locator("#stream")).to_have_text("live")
    await page.select_option("#agent", "ref")
    await page.fill("#cwd", str(repo))
    await page.fill("#title", "in a worktree")
    await page.check("#worktree")
    await page.click("#start")
    await expect(page.locator("#session-state")).to_have_attribute("data-state", "WAITING_FOR_INPUT")
    await expect(page.locator("#worktree-branch")).to_contain_text("acp/s-")
    await expect(page.locator("#worktree-branch")).to_contain_text("from main")

    await say(page, "/sh echo changed > a.txt && echo hi > new.txt && mkdir -p 'a b' && echo in > 'a b/c d.txt' "
                    "&& echo cafe > café.txt")
    await expect(page.locator(".msg.turn")).to_have_count(1)
    await page.click("#changes-toggle")
    files = page.locator("#changed-files .changed-file")
    await expect(files).to_have_count(4)
    await expect(page.locator("#changed-files")).to_contain_text("4 files changed since its base")
    for name, line in (("a b/c d.txt", "+in"), ("café.txt", "+cafe")):  # each file's own patch, whatever its name
        await page.locator(f'.changed-file[data-path="{name}"] summary').click()
        await expect(page.locator(f'.changed-file[data-path="{name}"] .diff .add')).to_have_text([line])
    await page.locator('.changed-file[data-path="a.txt"] summary').click()
    await expect(page.locator('.changed-file[data-path="a.txt"] .diff .add')).to_contain_text(["+changed"])
    await expect(page.locator('.changed-file[data-path="a.txt"] .diff .del')).to_contain_text(["-one"])
    await expect(page.locator("#checkpoints li")).to_have_count(1)

    await say(page, "/sh echo two > a.txt && rm -r new.txt 'a b' café.txt")
    await expect(page.locator(".msg.turn")).to_have_count(2)
    await expect(page.locator("#checkpoints li")).to_have_count(2)  # read again when the turn ended
    await expect(page.locator('#checkpoints li[data-checkpoint="2"]')).to_contain_text("/sh echo two")
    await shot(page, "ui-changes")
    page.on("dialog", lambda dialog: dialog.accept())
    await page.locator('#checkpoints li[data-checkpoint="2"] button.rewind').click()
    await expect(page.locator("#checkpoints li")).to_have_count(3)  # the files before the rewind, kept
    worktree = Path(await page.evaluate("window.__acpGateway.sessions.get(window.__acpGateway.viewed).cwd"))
    assert tree_files(worktree) == {"a.txt": "changed\n", "keep.txt": "kept\n", "new.txt": "hi\n",
                                    "a b/c d.txt": "in\n", "café.txt": "cafe\n"}
    await expect(page.locator(".msg.notice").filter(has_text="Rewound the files to checkpoint 2")).to_have_count(1)
    await shot(page, "ui-changes-rewound")

    await page.click("#merge")
    await expect(page.locator("#changes-note")).to_contain_text("Merged acp/s-")
    assert tree_files(repo) == tree_files(worktree)
    assert git(repo, "status", "--porcelain") == ""
    await shot(page, "ui-changes-merged")
    await page.click("#merge")  # nothing new: said so, no empty merge commit
    await expect(page.locator("#changes-note")).to_contain_text("Nothing to merge")

    # While a turn runs, Rewind and Merge wait for it.
    await say(page, "/sh sleep 3")
    await expect(page.locator("#merge")).to_be_disabled()
    await expect(page.locator("#checkpoints button.rewind").first).to_be_disabled()
    await expect(page.locator(".msg.turn")).to_have_count(3)
    await expect(page.locator("#merge")).to_be_enabled()

    # Discard closes the pane with the session.
    await page.click("#discard")
    await expect(page.locator("#changes")).to_be_hidden()
    await expect(page.locator("#detail-head")).to_contain_text("Select or start a session.")

    # A session in no repository says so plainly, with no checkpoints section.
    plain = tmp_path / "work" / "plain"
    plain.mkdir()
    await page.fill("#cwd", str(plain))
    await page.uncheck("#worktree")
    await page.click("#start")
    await expect(page.locator("#session-state")).to_have_attribute("data-state", "WAITING_FOR_INPUT")
    await page.click("#changes-toggle")
    await expect(page.locator(".no-repository")).to_contain_text("in no git repository")
    await expect(page.locator("#checkpoints")).to_have_count(0)
    await page.click("#changes-close")
    await expect(page.locator("#changes")).to_be_hidden()
    await expect(page.locator("#changes-toggle")).to_have_text("Changes")
    assert errors == [], "\n".join(errors)
