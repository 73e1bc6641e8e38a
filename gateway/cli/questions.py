"""Asking at a terminal: an agent's question (an elicitation's form, field by field, each answer checked as it is
typed) and a permission request (which option), the answers sent to the gateway; and the questions still open."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from ..clients.chat_text import ChatPrinter, plain
from ..clients.view_text import answer_command, field_hint
from ..error_codes import ALREADY_TERMINAL, INVALID_PARAMS
from .form_rules import FieldRefused, field_value

# The client (websockets' client side) is imported where a question is answered: every command line imports this
# module through frontend.py's verbs, and most never ask anything.
if TYPE_CHECKING:
    from ..clients.client import GatewayClient


class GaveUp(Exception):
    """The person ended the form (end of input, Ctrl-D) or declined it (`-`)."""

    def __init__(self, action: str) -> None:
        super().__init__(action)
        self.action = action  # what the question is answered with: decline


async def open_questions(client: GatewayClient, session_id: str) -> list[dict[str, Any]]:
    """The session's questions still open, as re-offered to a new subscription (then `caught_up`)."""
    await client.call("task.session.subscribe", {"session_id": session_id})
    found: dict[str, dict[str, Any]] = {}
    while True:
        event = (await asyncio.wait_for(client.notifications.get(), 30)).get("params") or {}
        if event.get("type") == "elicitation_requested":
            found[event["data"]["request_id"]] = event["data"]
        elif event.get("type") == "elicitation_resolved":
            found.pop(event["data"].get("request_id"), None)
        elif event.get("type") == "caught_up":
            return list(found.values())


async def open_question(client: GatewayClient, session_id: str, request_id: str) -> dict[str, Any] | None:
    return next((q for q in await open_questions(client, session_id) if q["request_id"] == request_id), None)


class StdinLines:
    """Lines typed on standard input (a terminal), read by the event loop rather than a thread: a Ctrl-C while one
    is awaited ends the wait at once, where a thread blocked in `readline` would hold the process until Enter."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.buffer = b""
        self.ended = False
        self.waiting = False  # a line is being waited for (no answer typed here is on its way)

    @staticmethod
    def _readable(readable: asyncio.Future[None]) -> None:
        if not readable.done():
            readable.set_result(None)

    async def readline(self) -> str | None:
        """The next line, without its newline; None at the end of input (Ctrl-D)."""
        loop = asyncio.get_running_loop()
        while b"\n" not in self.buffer and not self.ended:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self.fd, self._readable, readable)
            self.waiting = True
            try:
                await readable
            finally:
                self.waiting = False
                loop.remove_reader(self.fd)
            chunk = os.read(self.fd, 4096)
            self.buffer += chunk
            self.ended = not chunk
        line, newline, self.buffer = self.buffer.partition(b"\n")
        return line.decode("utf-8", "replace") if newline or line else None


async def _ask_field(name: str, prop: dict[str, Any], required: bool, chat: ChatPrinter,
                     lines: StdinLines) -> tuple[bool, Any]:
    """One field, asked until the answer fits: (True, value), or (False, None) for a field left out."""
    while True:
        chat.note(f"  {prop.get('title') or name} ({field_hint(prop, required)}; - to decline): ")
        typed = await lines.readline()
        if typed is None:
            raise GaveUp("decline")
        text = typed.strip()
        if text == "-":
            raise GaveUp("decline")
        if not text:
            if prop.get("default") is not None:
                return True, prop["default"]
            if not required:
                return False, None
            chat.note(f"  {name} is required")
            continue
        try:
            return True, field_value(prop, text)
        except FieldRefused as refused:
            chat.note(f"  {refused}")


async def ask_question(client: GatewayClient, session_id: str, data: dict[str, Any], chat: ChatPrinter,
                       lines: StdinLines) -> bool:
    """Ask an agent's question on the terminal, field by field, each answer checked as it is typed; a refusal
    from the gateway is said and its field asked again. The end of input (Ctrl-D) or `-` declines the question,
    so that the agent is never left waiting on a form nobody fills. True once the gateway took an answer."""
    from ..clients.client import RpcCallError

    request_id = str(data["request_id"])
    schema = data.get("requested_schema") or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    answer: dict[str, Any] = {"session_id": session_id, "request_id": request_id, "action": "accept"}
    content: dict[str, Any] = {}
    to_ask = list(properties)
    while True:
        try:
            if data.get("mode") == "url":
                chat.note("  opened it? y to go on, anything else declines: ")
                typed = await lines.readline()
                if (typed or "").strip().lower() not in ("y", "yes"):
                    raise GaveUp("decline")
            for name in to_ask:
                given, value = await _ask_field(name, properties[name], name in required, chat, lines)
                content.pop(name, None)
                if given:
                    content[name] = value
        except GaveUp as gave_up:
            return await give_up(client, session_id, data, chat, gave_up.action)
        if data.get("mode") != "url":
            answer["content"] = content
        try:
            await client.call("task.session.elicitation.respond", answer)
            return True
        except RpcCallError as err:
            if err.code == ALREADY_TERMINAL:
                chat.note(f"  question {request_id} was answered already (elsewhere)")
                return True
            chat.note(f"  not taken: {err.message}")
            if err.code != INVALID_PARAMS or data.get("mode") == "url":
                chat.note(f"  the question stays open: {answer_command(session_id, request_id, data.get('mode'))}")
                return False
            field = str((err.data or {}).get("field") or "") if isinstance(err.data, dict) else ""
            named = field.removeprefix("content.").split(".")[0]
            to_ask = [named] if named in properties else list(properties)  # that field again, or the whole form


async def give_up(client: GatewayClient, session_id: str, data: dict[str, Any], chat: ChatPrinter,
                  action: str) -> bool:
    """The person will not answer here: the question is declined (or cancelled), so the agent goes on; if that
    cannot be delivered, the question stays open and the command that answers it is said."""
    from ..clients.client import RpcCallError

    request_id = str(data["request_id"])
    try:
        await client.call("task.session.elicitation.respond",
                          {"session_id": session_id, "request_id": request_id, "action": action}, timeout=10)
    except RpcCallError as err:
        if err.code == ALREADY_TERMINAL:
            chat.note(f"  question {request_id} was answered already (elsewhere)")
            return True
        chat.note(f"  not taken: {err.message}")
    except (ConnectionError, TimeoutError):
        pass
    else:
        chat.note(f"  question {request_id} {'declined' if action == 'decline' else 'cancelled'}: the agent goes on "
                  "without an answer")
        return True
    chat.note(f"  the question stays open: answer it with {answer_command(session_id, request_id, data.get('mode'))}")
    return False


async def ask_permission(client: GatewayClient, session_id: str, data: dict[str, Any], chat: ChatPrinter,
                         lines: StdinLines) -> None:
    """Ask on the terminal which option to take; an answer from elsewhere first makes this one -32009."""
    from ..clients.client import RpcCallError

    options = data.get("options") or []
    for number, option in enumerate(options, 1):
        chat.note(f"  {number}) {plain(option.get('name'))} [{plain(option.get('kind'))}]")
    chat.note("  choose a number (empty: cancel the request): ")
    choice = (await lines.readline() or "").strip()
    answer: dict[str, Any] = {"session_id": session_id, "request_id": data["request_id"]}
    if choice.isdigit() and 1 <= int(choice) <= len(options):
        answer["option_id"] = options[int(choice) - 1]["optionId"]
    else:
        answer["cancelled"] = True
    try:
        await client.call("task.session.permission.respond", answer)
    except RpcCallError as err:
        chat.note(f"  not taken: {err.message}")
