"""ACP `session/update`s as a terminal chat: message text streams as it comes, other updates get a line each.

Shared by `acp-gateway run` and `acp-gateway prompt`; machines use `--json` instead.
"""

from __future__ import annotations

from typing import Any, TextIO

from acp.models import STATE_UPDATE_KINDS

# Updates that say nothing a reader of the conversation needs (they stay in --json and in the UI).
QUIET_KINDS = STATE_UPDATE_KINDS


class ChatPrinter:
    """Writes updates to `out` as a conversation. Text chunks of one message join up with no prefix; a change
    of speaker, a tool call or a plan starts a new line."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._speaker: str | None = None  # whose text the current line continues
        self._tool_status: dict[str, str] = {}
        self._tool_title: dict[str, str] = {}  # an update names its call by id only: say it by its title

    def update(self, update: dict[str, Any], replay: bool = False) -> None:
        kind = str(update.get("sessionUpdate", "?"))
        content = update.get("content")
        if kind in ("agent_message_chunk", "user_message_chunk", "agent_thought_chunk"):
            text = content.get("text", f"<{content.get('type')}>") if isinstance(content, dict) else ""
            speaker = {"agent_message_chunk": "", "user_message_chunk": "you: ",
                       "agent_thought_chunk": "(thinking) "}[kind]
            if self._speaker != speaker:
                self._line_break()
                self.out.write(("(replay) " if replay else "") + speaker)
                self._speaker = speaker
            self.out.write(str(text))
        elif kind in ("tool_call", "tool_call_update"):
            call_id = str(update.get("toolCallId", ""))
            status = str(update.get("status") or "")
            if kind == "tool_call_update" and self._tool_status.get(call_id) == status:
                return
            self._tool_status[call_id] = status
            title = self._tool_title[call_id] = str(update.get("title") or self._tool_title.get(call_id) or call_id)
            self._line(f"[tool] {title}" + (f" ({status})" if status else ""))
        elif kind == "plan":
            entries = update.get("entries") or []
            steps = "; ".join(f"{e.get('content', '')} [{e.get('status', '')}]" for e in entries if isinstance(e, dict))
            self._line(f"[plan] {steps}")
        elif kind not in QUIET_KINDS:
            self._line(f"[{kind}]")
        self.out.flush()

    def note(self, text: str) -> None:
        """A line of the client's own (a permission request, the stop reason)."""
        self._line(text)
        self.out.flush()

    def end(self) -> None:
        self._line_break()
        self.out.flush()

    def _line(self, text: str) -> None:
        self._line_break()
        self.out.write(text + "\n")

    def _line_break(self) -> None:
        if self._speaker is not None:
            self.out.write("\n")
            self._speaker = None
