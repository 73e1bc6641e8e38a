"""Turning live ACP `session/update`s into history entries (docs/architecture.md: The runtime, history): pure, one turn
at a time.

Agent message chunks are coalesced into one `agent_message` per message: a message ends when its
`messageId` changes, a tool call starts, or the turn ends (`flush`). Replayed updates never come
here: they are history already.
"""

from __future__ import annotations

from typing import Any

from ..store.rows import HistoryEntry


def _content_text(content: Any) -> str:
    if isinstance(content, dict):
        if content.get("type") == "text":
            return str(content.get("text", ""))
        if content.get("type") == "content":
            return _content_text(content.get("content"))
        if content.get("type") == "diff":
            return f"diff {content.get('path', '')}"
        return f"<{content.get('type', 'content')}>"
    if isinstance(content, str):  # a tool's rawOutput may be plain text
        return content
    if isinstance(content, list):
        return "\n".join(t for t in (_content_text(c) for c in content) if t)
    return ""


class HistoryCoalescer:
    def __init__(self) -> None:
        self._text: list[str] = []
        self._message_id: Any = None
        self._tool_names: dict[str, str] = {}

    def feed(self, update: dict[str, Any]) -> list[HistoryEntry]:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            out: list[HistoryEntry] = []
            message_id = update.get("messageId")
            if self._text and message_id != self._message_id:
                out = self.flush()
            self._message_id = message_id
            self._text.append(_content_text(update.get("content")))
            return out
        if kind == "tool_call":
            out = self.flush()
            call_id = str(update.get("toolCallId", ""))
            name = str(update.get("title") or update.get("kind") or "tool")
            self._tool_names[call_id] = name
            out.append(HistoryEntry("tool_call", name=name))
            return out
        if kind == "tool_call_update" and update.get("status") in ("completed", "failed"):
            out = self.flush()
            call_id = str(update.get("toolCallId", ""))
            name = self._tool_names.get(call_id) or str(update.get("title") or "tool")
            result = _content_text(update.get("content") or update.get("rawOutput") or "")
            if update.get("status") == "failed":
                result = f"(failed) {result}".rstrip()
            out.append(HistoryEntry("tool_result", content=result, name=name))
            return out
        return []

    def flush(self) -> list[HistoryEntry]:
        if not self._text:
            return []
        entry = HistoryEntry("agent_message", content="".join(self._text))
        self._text = []
        self._message_id = None
        return [entry]
