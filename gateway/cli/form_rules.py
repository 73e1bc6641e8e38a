"""An agent's question's form, checked as a person types it: each answer against the field the requested schema
describes, a pure function of the schema and the text (no I/O), so the terminal (`questions.py`) and `answer
FIELD=VALUE` (`frontend.py`) refuse the same answers with the same words, before anything is sent."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

from ..clients.chat_text import plain
from ..clients.view_text import choice_titles


class FieldRefused(ValueError):
    """A form's answer that does not fit its field: the words say why (and what would)."""


_BOOLEANS = {"y": True, "yes": True, "true": True, "n": False, "no": False, "false": False}
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def _format_refusal(fmt: str, text: str) -> str | None:
    """Why `text` is not of the string `format` a form field names (the ones MCP forms use), or None."""
    if fmt == "email" and not _EMAIL.fullmatch(text):
        return "an email address (name@example.com)"
    if fmt in ("uri", "url") and not (urlsplit(text).scheme and (urlsplit(text).netloc or urlsplit(text).path)):
        return "a URL (https://…)"
    parse = {"date": date.fromisoformat, "date-time": datetime.fromisoformat}.get(fmt)
    if parse is not None:
        try:
            parse(text)
        except ValueError:
            return "a date (2025-01-31)" if fmt == "date" else "a date and time (2025-01-31T09:30:00Z)"
    return None


def _chosen(choices: list[dict[str, Any]], text: str) -> Any:
    """A choice given by its value, its title (any case) or its number in the list the form shows."""
    for choice in choices:
        if plain(choice["const"]) == text:
            return choice["const"]
    titled = [c for c in choices if str(c["title"]).casefold() == text.casefold()
              or plain(c["const"]).casefold() == text.casefold()]
    if len(titled) == 1:
        return titled[0]["const"]
    if text.isdigit() and 1 <= int(text) <= len(choices):
        return choices[int(text) - 1]["const"]
    raise FieldRefused(f"{text!r} is not one of the choices: "
                       + ", ".join(f"{n}) {c['title']}" for n, c in enumerate(choices, 1)))


def _bounded(prop: dict[str, Any], value: float) -> None:
    for key, fits, words in (("minimum", value.__ge__, "at least"), ("exclusiveMinimum", value.__gt__, "more than"),
                             ("maximum", value.__le__, "at most"), ("exclusiveMaximum", value.__lt__, "less than")):
        bound = prop.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool) and not fits(bound):
            raise FieldRefused(f"{plain(value)} is too {'small' if 'Min' in key or key == 'minimum' else 'large'}: "
                               f"give a number {words} {plain(bound)}")


def field_value(prop: dict[str, Any], text: str) -> Any:
    """What a person typed for one form field, as the value its schema asks for, or FieldRefused saying why it
    does not fit: whole numbers and numbers within their bounds, a choice by value, title or number, y/n/true/false
    for a boolean, text of the length, pattern and format asked, comma-separated lists of those."""
    kind = prop.get("type")
    if kind == "array":
        items: dict[str, Any] = prop["items"] if isinstance(prop.get("items"), dict) else {}
        values = [field_value({"type": "string", **items}, part.strip()) for part in text.split(",") if part.strip()]
        if isinstance(prop.get("minItems"), int) and len(values) < prop["minItems"]:
            raise FieldRefused(f"give at least {prop['minItems']} value(s), comma-separated")
        if isinstance(prop.get("maxItems"), int) and len(values) > prop["maxItems"]:
            raise FieldRefused(f"give at most {prop['maxItems']} value(s)")
        return values
    choices = choice_titles(prop)
    if choices:
        return _chosen(choices, text)
    if kind == "boolean":
        if text.lower() not in _BOOLEANS:
            raise FieldRefused(f"{text!r} is not a yes or no: answer y or n (or true or false)")
        return _BOOLEANS[text.lower()]
    if kind in ("integer", "number"):
        try:
            number: float = int(text) if kind == "integer" or not any(c in text for c in ".eE") else float(text)
        except ValueError:
            raise FieldRefused(f"{text!r} is not a {'whole number' if kind == 'integer' else 'number'}") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise FieldRefused(f"{text!r} is not a number")
        _bounded(prop, number)
        return number
    if isinstance(prop.get("minLength"), int) and len(text) < prop["minLength"]:
        raise FieldRefused(f"too short: give at least {prop['minLength']} character(s)")
    if isinstance(prop.get("maxLength"), int) and len(text) > prop["maxLength"]:
        raise FieldRefused(f"too long: give at most {prop['maxLength']} characters (this is {len(text)})")
    if isinstance(prop.get("pattern"), str):
        try:
            matches = re.search(prop["pattern"], text) is not None
        except re.error:  # a pattern Python cannot read: the gateway's check decides
            matches = True
        if not matches:
            raise FieldRefused(f"{text!r} is not of the form the agent asks (pattern {prop['pattern']})")
    refusal = _format_refusal(str(prop.get("format") or ""), text)
    if refusal is not None:
        raise FieldRefused(f"{text!r} is not {refusal}")
    return text


def form_answer(schema: dict[str, Any] | None, fields: list[str]) -> dict[str, Any]:
    """`FIELD=VALUE` pairs typed by a person as the content a form's schema asks for, each checked against its
    field (`field_value`), the required fields present; FieldRefused names every one that does not fit and every
    required one missing, at once (one at a time made a person retype the command per mistake). With no schema (the
    question is not open: the gateway says why) the values go as text."""
    properties = (schema or {}).get("properties") or {}
    content: dict[str, Any] = {}
    refusals: list[str] = []
    for pair in fields:
        name, sep, value = pair.partition("=")
        if not sep:
            refusals.append(f"{pair!r}: give each field as FIELD=VALUE")
            continue
        if schema is None:
            content[name] = value
            continue
        if name not in properties:
            refusals.append(f"the form has no field {name!r}; its fields: {', '.join(properties)}")
            continue
        try:
            content[name] = field_value(properties[name], value)
        except FieldRefused as refused:
            refusals.append(f"{name}: {refused}")
    given = {pair.partition("=")[0] for pair in fields}  # a field given but refused is not also missing
    missing = [name for name in (schema or {}).get("required") or [] if name not in given]
    if missing:
        refusals.append(f"required field(s) missing: {', '.join(missing)}")
    if refusals:
        raise FieldRefused("; ".join(refusals))
    return content
