"""ACP `session/update`s as a terminal chat: message text streams as it comes, other updates get a line each.

Shared by `acp-gateway run` and `acp-gateway prompt`; machines use `--json` instead.
"""

from __future__ import annotations

import json
import re
from typing import Any, TextIO

from acp.update_kinds import STATE_UPDATE_KINDS

# Updates that say nothing a reader of the conversation needs (they stay in --json and in the UI).
QUIET_KINDS = STATE_UPDATE_KINDS

# In a command's output, the colour sequences (SGR: ESC [ … m) are kept for a terminal that shows them; every other
# escape or control sequence goes (a command's output must not retitle, move or reprogram the reader's terminal).
_SGR = re.compile(r"\x1b\[[0-9;]*m")
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?|[\x00-\x08\x0b-\x1f\x7f]")


def plain(value: Any) -> str:
    """A value of the wire as a person reads it, in JSON's words, not Python's: `true`, `false`, `null`; text as it
    is; a list or an object as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def terminal_text(text: str, colour: bool) -> str:
    """A command's output made safe to print: colours kept (`colour`) or dropped, other control sequences dropped."""
    kept = _SGR.split(text)
    colours = _SGR.findall(text) if colour else [""] * (len(kept) - 1)
    parts = [_CONTROL.sub("", piece) for piece in kept]
    return "".join(p + c for p, c in zip(parts, [*colours, ""], strict=True))


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

    def terminal(self, kind: str, data: dict[str, Any], colour: bool = False) -> None:
        """An agent's terminal: its command, its output as it comes, its exit."""
        if kind == "terminal_started":
            self._line(f"[terminal] $ {plain(data.get('command'))}  (in {plain(data.get('cwd'))})")
        elif kind == "terminal_output":
            self._line_break()
            self.out.write(terminal_text(str(data.get("text", "")), colour))
        elif kind == "terminal_exited":
            how = (f"exit code {data.get('exit_code')}" if data.get("exit_code") is not None
                   else f"killed by {data.get('signal')}" if data.get("signal") else "ended")
            more = "" if data.get("complete", True) else (f"; {data.get('output_bytes')} bytes in all, the rest not "
                                                         "streamed")
            self._line(f"\n[terminal] {how}{more}")
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
