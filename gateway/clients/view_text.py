"""The API's objects as lines of text for a terminal: config options, slash commands, events, permission requests
and agents' questions. Shared by the CLI's wire-only verbs (`acp-gateway config|commands|watch|permission|prompt`);
machines use `--json` instead, the web UI its own rendering (gateway/ui/)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .chat_text import plain, terminal_text
from .resume_reasons import resume_reason_words


def yes_no(flag: Any) -> str:
    """A yes-or-no fact of a view (`is_agent_running`, `needs_resume`) in words."""
    return "yes" if flag else "no"


def option_line(option: dict[str, Any], chosen: dict[str, Any]) -> str:
    """`id: value (chosen by who)    [the values it takes]  its name`."""
    shown = plain(option.get("currentValue"))
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
    values = ", ".join(f"{o.get('id')}={plain(o.get('currentValue'))}" for o in data.get("options") or [])
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


def _status_event(session_id: str, data: dict[str, Any]) -> str:
    """A session's state; one whose agent is not running and needs a resume (as each such session is announced
    after a gateway restart) says why, and the command that brings it back."""
    if data.get("needs_resume"):
        reason = data.get("resume_reason")
        # The reason's words say the agent is not running, and what of it was kept: said once, not twice.
        what = resume_reason_words(str(reason)) if reason else "the agent is not running"
        return (f"session {session_id}: {what} — resume it with `acp-gateway resume {session_id}` "
                "(or send it a prompt)")
    line = f"{session_id} session_status: {plain(data.get('state'))}"
    if "is_agent_running" in data:
        line += f"; agent running: {yes_no(data['is_agent_running'])}"
    return line + (f"; error: {data['error_message']}" if data.get("error_message") else "")


# event type -> its line (from the session id and the event's data); any other type: its data as JSON, cut short.
EVENT_LINES: dict[str, Callable[[str, dict[str, Any]], str]] = {
    "session_config": _config_event,
    "terminal_output": _terminal_event,
    "session_update": _update_event,
    "session_status": _status_event,
}


def describe_event(event: dict[str, Any]) -> str:
    data = event.get("data", {})
    line = EVENT_LINES.get(event["type"])
    if line is not None:
        return line(event["session_id"], data)
    return f"{event['session_id']} {event['type']}: {orjson.dumps(data).decode()[:300]}"


def status_text(status: dict[str, Any]) -> str:
    """A status view's first line: state, whether the agent runs, whether it needs a resume and why; then, for a
    worktree session, its worktree and branch."""
    reason = str(status.get("resume_reason") or "")
    needs = (f"needs a resume: yes — {resume_reason_words(reason)}" if status.get("needs_resume")
             else "needs a resume: no" + (f" ({resume_reason_words(reason)})"
                                           if reason not in ("", "agent_running", "terminal_state") else ""))
    tree = status.get("worktree")
    return (f"{status['state']} (task {status['task_state']}); agent running: {yes_no(status['is_agent_running'])}; "
            f"{needs}" + (f"; error: {status['error_message']}" if status.get("error_message") else "")
            + (f"\nworktree {tree.get('path')} on branch {tree.get('branch')} (from {tree.get('base')})"
               if isinstance(tree, dict) else ""))


def pending_lines(status: dict[str, Any], session_id: str) -> list[str]:
    """The permission requests and questions of a status view still waiting for a person, each with its id, its
    title and the command that answers it. A gateway that gives only their counts (an integer) gets the command
    that lists them."""
    lines: list[str] = []
    permissions, questions = status.get("pending_permissions"), status.get("pending_elicitations")
    if isinstance(permissions, int) and permissions:
        lines.append(f"{permissions} permission request(s) waiting: `acp-gateway permission {session_id}` lists them")
    for request in permissions if isinstance(permissions, list) else []:
        options = request.get("options") or []
        lines.append(f"permission request {request.get('request_id')} waiting: {request.get('title') or 'a tool call'}")
        if options:
            lines.append("  options: " + "  ".join(f"{o.get('option_id')} ({o.get('name')})" for o in options))
        lines.append("  answer: " + permission_command(session_id, str(request.get("request_id"))))
    if isinstance(questions, int) and questions:
        lines.append(f"{questions} question(s) of the agent waiting: `acp-gateway answer {session_id}` lists them")
    for question in questions if isinstance(questions, list) else []:
        lines.append(f"question {question.get('request_id')} waiting: {question.get('title') or 'the agent asks'}")
        lines.append("  answer: " + answer_command(session_id, str(question.get("request_id")), question.get("mode")))
    return lines


def answer_command(session_id: str, request_id: str, mode: Any) -> str:
    """The command that answers an agent's question from any terminal."""
    return (f"acp-gateway answer {session_id} {request_id} " + ("--open" if mode == "url" else "FIELD=VALUE …")
            + "  (or --decline)")


def permission_command(session_id: str, request_id: str) -> str:
    """The command that answers a permission request from any terminal."""
    return f"acp-gateway permission {session_id} {request_id} OPTION_ID  (or --cancel)"


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
    fields = "  ".join(f"{name}{'*' if name in required else ''} ({plain(prop.get('type'))}"
                       + (f": {'|'.join(map(plain, choices))}" if (choices := choice_values(prop)) else "") + ")"
                       for name, prop in (schema.get("properties") or {}).items())
    return f"the agent asks ({data['request_id']}): {data.get('message')}\n  fields: {fields}"


def choice_values(prop: dict[str, Any]) -> list[Any]:
    """The values a form field offers: its `enum`, or the `const`s of its `oneOf`/`anyOf` (each with a title)."""
    if isinstance(prop.get("enum"), list):
        return list(prop["enum"])
    return [c.get("const") for c in choice_titles(prop)]


def choice_titles(prop: dict[str, Any]) -> list[dict[str, Any]]:
    """A field's choices as `{const, title}`: `oneOf`/`anyOf` entries as given, `enum` values titled by
    `enumNames` where the schema has them, else by themselves."""
    for key in ("oneOf", "anyOf"):
        entries = prop.get(key)
        if isinstance(entries, list) and entries and all(isinstance(e, dict) and "const" in e for e in entries):
            return [{"const": e["const"], "title": e.get("title") or plain(e["const"])} for e in entries]
    if isinstance(prop.get("enum"), list):
        names: list[Any] = prop["enumNames"] if isinstance(prop.get("enumNames"), list) else []
        return [{"const": v, "title": names[i] if i < len(names) else plain(v)} for i, v in enumerate(prop["enum"])]
    return []


def field_hint(prop: dict[str, Any], required: bool) -> str:
    """What a form field takes, in words, as the terminal form asks it: `whole number, at least 0`."""
    kind = prop.get("type")
    choices = choice_titles(prop) or choice_titles(prop.get("items") or {})
    if choices:
        listed = ", ".join(f"{n}) {c['title']}" for n, c in enumerate(choices, 1))
        what = ("one or more of" if kind == "array" else "one of") + f": {listed}"
    else:
        what = {"integer": "whole number", "number": "number", "boolean": "y or n", "array": "comma-separated list"
                }.get(str(kind), str(prop.get("format") or "text").replace("-", " "))
    bounds = []
    for key, words in (("minimum", "at least"), ("exclusiveMinimum", "more than"), ("maximum", "at most"),
                       ("exclusiveMaximum", "less than")):
        if isinstance(prop.get(key), int | float) and not isinstance(prop.get(key), bool):
            bounds.append(f"{words} {plain(prop[key])}")
    if isinstance(prop.get("minLength"), int) and prop["minLength"] > 0:
        bounds.append(f"at least {prop['minLength']} character(s)")
    if isinstance(prop.get("maxLength"), int):
        bounds.append(f"at most {prop['maxLength']} characters")
    if prop.get("default") is not None:
        bounds.append(f"empty: {plain(prop['default'])}")
    elif not required:
        bounds.append("empty to skip")
    return ", ".join([what, *bounds])
