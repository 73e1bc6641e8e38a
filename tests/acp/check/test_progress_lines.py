"""`acp-gateway check`'s progress lines on stderr: evidence too long for a line is cut between words, with an
ellipsis, and the live line fits the terminal (a wrapped one leaves rows behind at each redraw)."""

from __future__ import annotations

import io

import pytest

from acp.check.framework import Check, CheckResult, Result, Tier
from acp.check.report import EVIDENCE_WIDTH, Progress, clipped, progress_line

pytestmark = pytest.mark.unit

LONG = ("the agent answered session/new with a session id but never sent available_commands_update before the "
        "first prompt, which the checker needed to decide whether commands are advertised")


async def _never(ctx: object) -> CheckResult:  # a check's function, never called here
    raise AssertionError


def _result(evidence: str) -> CheckResult:
    check = Check("ACP-TEST-001", Tier.MANDATORY, "a check", "ACP v1", _never)  # type: ignore[arg-type]
    return CheckResult(check, Result.FAIL, evidence, seconds=1.25)


@pytest.mark.parametrize(("text", "width", "shown"), [
    ("short enough", 20, "short enough"),
    ("exactly ten", 11, "exactly ten"),
    ("one two three", 10, "one two…"),  # "three" would be cut: it goes whole
    ("one two three", 8, "one two…"),  # the cut falls on the space after "two"
    ("one two, three", 10, "one two…"),  # no dangling comma before the ellipsis
    ("/a/very/long/path/without/spaces", 12, "/a/very/lon…"),  # one word longer than the line: cut where it ends
    ("anything", 1, "…"),
])
def test_clipped_cuts_between_words(text: str, width: int, shown: str) -> None:
    assert clipped(text, width) == shown
    assert len(clipped(text, width)) <= width


def test_a_progress_line_ends_on_a_whole_word() -> None:
    line = progress_line(_result(LONG), 3, 40)
    assert line.startswith("[ 3/40] FAIL    ACP-TEST-001 (1.2 s) the agent answered")
    evidence = line.split(" s) ", 1)[1]
    assert evidence.endswith("…") and len(evidence) <= EVIDENCE_WIDTH
    assert LONG.startswith(evidence[:-1]) and LONG[len(evidence) - 1] == " "  # the next word was left out, whole


def test_the_live_line_fits_the_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(40, stream, live=True, width=30)
    progress.running = {"ACP-SESSION-NEW-WITH-A-LONG-NAME": 0.0, "ACP-PROMPT-TURN": 0.0}
    progress.tick()
    drawn = stream.getvalue().split("\r\x1b[2K")[-1]
    assert len(drawn) <= 30 and drawn.startswith("[0/40] running") and drawn.endswith("…")
