"""The API's objects as lines of text for a terminal: config options, slash commands, events, permission requests
and agents' questions. Shared by the CLI's wire-only verbs (`acp-gateway config|commands|watch|permission|prompt`);
machines use `--json` instead, the web UI its own rendering (gateway/ui/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .chat_text import terminal_text


def option_line(option: dict[str, Any], chosen: dict[str, Any]) -> str:
    """`id: value (chosen by who)    [the values it takes]  its name`."""
    current = option.get("currentValue")
    shown = str(current).lower() if isinstance(current, bool) else current
    values = [o.get("value") for o in option.get("options") or [] if isinstance(o, dict)]
    values += [v.get("value") for g in option.get("options") or [] if isinstance(g, dict)
               for v in g.get("options") or [] if isinstance(v, dict)]
    choice = chosen.get(str(option.get("id")))
    by = f" (chosen by {choice['by']})" if choice else ""
    kind = "true | false" if option.get("type") == "boolean" else " | ".join(str(v) for v in values if v)
    return f"{option.get('id')}: {shown}{by}    [{kind}]  {option.get('name') or ''}".rstrip()


def unapplied_lines(config: dict[str, Any]) -> list[str]:
    """The choices a session's agent could not be given, one line each."""
    return [f"not applied: {u['message']}" for u in config.get("unapplied") or []]


def describe_command(command: dict[str, Any]) -> str:
    hint = (command.get("input") or {}).get("hint") if isinstance(command.get("input"), dict) else None
    return f"/{command.get('name')}" + (f" {hint}" if hint else "") + f"    {command.get('description') or ''}"


def _config_event(session_id: str, data: dict[str, Any]) -> str:
    values = ", ".join(f"{o.get('id')}={o.get('currentValue')}" for o in data.get("options") or [])
    return f"{session_id} session_config ({data.get('cause')}): {values}" + "".join(
        f"; {line}" for line in unapplied_lines(data))


def _terminal_event(session_id: str, data: dict[str, Any]) -> str:
    return f"{session_id} terminal_output {data.get('terminal_id')}: " + terminal_text(
        str(data.get("text", "")), colour=False).rstrip("\n")


def _update_event(session_id: str, data: dict[str, Any]) -> str:
    update = data.get("update") or {}
    content = update.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    tag = " (replay)" if data.get("replay") else ""
    return f"{session_id} {update.get('sessionUpdate')}{tag}: {text if text is not None else ''}"


# event type -> its line (from the session id and the event's data); any other type: its data as JSON, cut short.
EVENT_LINES: dict[str, Callable[[str, dict[str, Any]], str]] = {
    "session_config": _config_event,
    "terminal_output": _terminal_event,
    "session_update": _update_event,
}


def describe_event(event: dict[str, Any]) -> str:
    data = event.get("data", {})
    line = EVENT_LINES.get(event["type"])
    if line is not None:
        return line(event["session_id"], data)
    return f"{event['session_id']} {event['type']}: {orjson.dumps(data).decode()[:300]}"


def describe_request(data: dict[str, Any]) -> str:
    """A permission request: what the tool call would do, where, and the options to answer with."""
    tool = data.get("tool_call") or {}
    where = ", ".join(str(loc.get("path")) for loc in tool.get("locations") or [] if isinstance(loc, dict))
    options = "  ".join(f"{o.get('optionId')} ({o.get('name')})" for o in data.get("options") or [])
    return (f"permission request {data['request_id']}: {tool.get('title') or tool.get('kind') or 'a tool call'}"
            + (f" on {where}" if where else "") + f"\n  options: {options}")


def describe_question(data: dict[str, Any]) -> str:
    """An agent's question (an elicitation): its message, and the link to open or the form's fields (* required)."""
    if data.get("mode") == "url":
        return f"the agent asks ({data['request_id']}): {data.get('message')}\n  open: {data.get('url')}"
    schema = data.get("requested_schema") or {}
    required = set(schema.get("required") or [])
    fields = "  ".join(f"{name}{'*' if name in required else ''} ({prop.get('type')}"
                       + (f": {'|'.join(map(str, prop['enum']))}" if prop.get("enum") else "") + ")"
                       for name, prop in (schema.get("properties") or {}).items())
    return f"the agent asks ({data['request_id']}): {data.get('message')}\n  fields: {fields}"
