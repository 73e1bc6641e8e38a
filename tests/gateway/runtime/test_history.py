"""gateway.runtime.history: live ACP updates coalesced into history entries, by table."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.runtime.history import HistoryCoalescer
from gateway.store import HistoryEntry


def chunk(text: str, message_id: str | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    if message_id is not None:
        update["messageId"] = message_id
    return update


TOOL = {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "read_file", "kind": "read"}
DONE = {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
        "content": [{"type": "content", "content": {"type": "text", "text": "42 lines"}}]}
FAILED = {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "failed", "rawOutput": "boom"}
ROWS = [
    ("chunks make one message", [chunk("Hel"), chunk("lo")],
     [HistoryEntry("agent_message", "Hello")]),
    ("a new messageId ends the message", [chunk("a", "m1"), chunk("b", "m1"), chunk("c", "m2")],
     [HistoryEntry("agent_message", "ab"), HistoryEntry("agent_message", "c")]),
    ("a tool call ends the message", [chunk("look"), TOOL, DONE],
     [HistoryEntry("agent_message", "look"), HistoryEntry("tool_call", name="read_file"),
      HistoryEntry("tool_result", "42 lines", "read_file")]),
    ("a failed tool says so", [TOOL, FAILED],
     [HistoryEntry("tool_call", name="read_file"), HistoryEntry("tool_result", "(failed) boom", "read_file")]),
    ("in-progress updates and unknown kinds record nothing",
     [{"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"},
      {"sessionUpdate": "some_future_kind", "x": 1}, {"sessionUpdate": "plan", "entries": []}], []),
    ("non-text content is named", [chunk("x") | {"content": {"type": "image", "data": "..."}}],
     [HistoryEntry("agent_message", "<image>")]),
]


@pytest.mark.parametrize(("updates", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_coalescing(updates: list[dict[str, Any]], expected: list[HistoryEntry]) -> None:
    coalescer = HistoryCoalescer()
    entries = [e for u in updates for e in coalescer.feed(u)] + coalescer.flush()
    assert entries == expected
