"""History entries and the resume context of docs/architecture.md: The runtime, history: pure rendering, injected once
by the caller."""

from __future__ import annotations

from collections.abc import Iterable

from ..store.rows import HistoryEntry

MESSAGE_LIMIT = 2000
TOOL_RESULT_LIMIT = 500
TRUNCATED = "... [truncated]"

HEADER = "RESUME CONTEXT FOR CONTINUING TASK"
INSTRUCTIONS = (
    "You are continuing work on the above task. The execution history shows what was already said and done. "
    "Do not repeat work that was already completed."
)


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + TRUNCATED


def render_entry(entry: HistoryEntry) -> str:
    if entry.kind == "user_message":
        return f"[USER]: {truncate(entry.content, MESSAGE_LIMIT)}"
    if entry.kind == "agent_message":
        return f"[ASSISTANT]: {truncate(entry.content, MESSAGE_LIMIT)}"
    if entry.kind == "tool_call":
        return f"[TOOL CALL: {entry.name}]"
    if entry.kind == "tool_result":
        return f"[TOOL RESULT: {entry.name}] {truncate(entry.content, TOOL_RESULT_LIMIT)}"
    if entry.kind == "turn_interrupted":
        return f"[TURN INTERRUPTED] {truncate(entry.content, TOOL_RESULT_LIMIT)}"
    raise ValueError(f"unknown history entry kind {entry.kind!r}")


def render_resume_context(history: Iterable[HistoryEntry], prompt: str) -> str:
    lines = [HEADER, "", "=== EXECUTION HISTORY ==="]
    lines += [render_entry(e) for e in history]
    lines += ["", "=== CURRENT REQUEST ===", prompt, "", "=== INSTRUCTIONS ===", INSTRUCTIONS]
    return "\n".join(lines)
