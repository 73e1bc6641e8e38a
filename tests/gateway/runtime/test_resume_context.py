"""gateway.runtime.resume_context: the resume context of docs/architecture.md: The runtime, history, entry by entry."""

from __future__ import annotations

import pytest

from gateway.runtime.resume_context import (
    HEADER,
    INSTRUCTIONS,
    MESSAGE_LIMIT,
    TOOL_RESULT_LIMIT,
    TRUNCATED,
    render_entry,
    render_resume_context,
)
from gateway.store import HistoryEntry

ROWS = [
    (HistoryEntry("user_message", "fix the bug"), "[USER]: fix the bug"),
    (HistoryEntry("agent_message", "done"), "[ASSISTANT]: done"),
    (HistoryEntry("tool_call", name="edit"), "[TOOL CALL: edit]"),
    (HistoryEntry("tool_result", "ok", "edit"), "[TOOL RESULT: edit] ok"),
    (HistoryEntry("turn_interrupted", "the gateway stopped"), "[TURN INTERRUPTED] the gateway stopped"),
    (HistoryEntry("user_message", "x" * (MESSAGE_LIMIT + 1)), "[USER]: " + "x" * MESSAGE_LIMIT + TRUNCATED),
    (HistoryEntry("agent_message", "y" * MESSAGE_LIMIT), "[ASSISTANT]: " + "y" * MESSAGE_LIMIT),
    (HistoryEntry("tool_result", "z" * (TOOL_RESULT_LIMIT + 5), "t"),
     "[TOOL RESULT: t] " + "z" * TOOL_RESULT_LIMIT + TRUNCATED),
]


@pytest.mark.parametrize(("entry", "line"), ROWS)
def test_render_entry(entry: HistoryEntry, line: str) -> None:
    assert render_entry(entry) == line


def test_unknown_kind_is_a_bug() -> None:
    with pytest.raises(ValueError, match="unknown history entry kind"):
        render_entry(HistoryEntry("nonsense"))


def test_whole_context() -> None:
    text = render_resume_context([HistoryEntry("user_message", "hi"), HistoryEntry("agent_message", "hello")], "go")
    assert text == "\n".join([HEADER, "", "=== EXECUTION HISTORY ===", "[USER]: hi", "[ASSISTANT]: hello", "",
                              "=== CURRENT REQUEST ===", "go", "", "=== INSTRUCTIONS ===", INSTRUCTIONS])
