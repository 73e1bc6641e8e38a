"""Elicitation (`elicitation/create`, `elicitation/complete`): what an agent may ask a person, and what answers it.

Pure rules, no I/O. `check_request` takes an agent's request apart or refuses it (E1-E4); `check_answer` turns a
person's answer into the ACP response, or names the field that does not fit the requested schema (A1-A4), so the
question stays open for a better answer.

  E1  mode "form": `requestedSchema` is an object schema whose properties are primitives (string, number, integer,
      boolean) or arrays of strings, a valid JSON Schema                               -> a form to show
  E2  mode "url": an `elicitationId` and an http(s) `url`                              -> a link to open
  E3  any other mode, or E1/E2 broken                                                  -> -32602, naming the field
  E4  a mode the client did not offer                                                  -> -32602
  A1  accept, with content that validates against the requested schema (form)         -> {action: accept, content}
  A2  accept of a URL elicitation (the person agreed to open it), no content         -> {action: accept}
  A3  decline, cancel                                                                  -> {action}, no content
  A4  accept with content that does not validate, content for a URL, another action  -> refused: field and why
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .errors import INVALID_PARAMS, RpcError

PRIMITIVES = frozenset({"string", "number", "integer", "boolean"})
ACTIONS = frozenset({"accept", "decline", "cancel"})
MAX_SCHEMA_PROPERTIES = 100


@dataclass(frozen=True)
class Elicitation:
    mode: str  # "form" or "url"
    message: str
    schema: dict[str, Any] | None = None  # form
    url: str | None = None  # url
    elicitation_id: str | None = None  # url
    tool_call_id: str | None = None


def _refused(field: str, why: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"elicitation/create: {field}: {why}", {"field": field})


def check_request(params: Any, offered: frozenset[str] = frozenset({"form", "url"})) -> Elicitation:
    """E1-E4: the elicitation to put to people, or RpcError (-32602) naming what is wrong."""
    if not isinstance(params, dict):
        raise _refused("params", "an object is required")
    mode = params.get("mode")
    message = params.get("message")
    if not isinstance(message, str):
        raise _refused("message", "a string is required")
    tool_call = params.get("toolCallId")
    tool_call_id = tool_call if isinstance(tool_call, str) else None
    if mode not in ("form", "url"):
        raise _refused("mode", f"must be 'form' or 'url', not {mode!r}")
    if mode not in offered:
        raise _refused("mode", f"this client did not offer {mode} elicitation")
    if mode == "url":
        url, elicitation_id = params.get("url"), params.get("elicitationId")
        if not isinstance(elicitation_id, str) or not elicitation_id:
            raise _refused("elicitationId", "a non-empty string is required")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise _refused("url", "an http or https URL is required")
        return Elicitation("url", message, url=url, elicitation_id=elicitation_id, tool_call_id=tool_call_id)
    schema = params.get("requestedSchema")
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise _refused("requestedSchema", "an object schema is required")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or len(properties) > MAX_SCHEMA_PROPERTIES:
        raise _refused("requestedSchema.properties", f"an object of at most {MAX_SCHEMA_PROPERTIES} fields is "
                       "required")
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind not in PRIMITIVES and not (kind == "array" and isinstance(prop.get("items"), dict)
                                           and prop["items"].get("type", "string") == "string"):
            raise _refused(f"requestedSchema.properties.{name}", f"type {kind!r} is not a primitive (string, "
                           "number, integer, boolean) or an array of strings")
    required = schema.get("required")
    if required is not None and (not isinstance(required, list) or not set(required) <= set(properties)):
        raise _refused("requestedSchema.required", "must name properties of the schema")
    # jsonschema (tens of ms to import) when an agent first asks a form question, not in every client's start
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = ".".join(str(p) for p in exc.path)
        raise _refused("requestedSchema" + (f".{where}" if where else ""), exc.message) from None
    return Elicitation("form", message, schema={**schema, "type": "object"}, tool_call_id=tool_call_id)


@dataclass(frozen=True)
class AnswerRefusal:
    field: str  # where in the answer (`content.age`, `action`)
    message: str


def check_answer(elicitation: Elicitation, action: str, content: Any) -> dict[str, Any] | AnswerRefusal:
    """A1-A4: the response the agent gets, or what is wrong with the answer."""
    if action not in ACTIONS:
        return AnswerRefusal("action", f"must be one of accept, decline, cancel, not {action!r}")
    if action != "accept":
        return {"action": action} if content is None else AnswerRefusal("content", f"no content goes with {action}")
    if elicitation.mode == "url":
        return {"action": "accept"} if content is None else AnswerRefusal(
            "content", "a URL elicitation takes no content: accept means the link was opened")
    if not isinstance(content, dict):
        return AnswerRefusal("content", "an object answering the requested schema is required")
    assert elicitation.schema is not None
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(elicitation.schema).iter_errors(content), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        path = ".".join(str(p) for p in first.path)
        if first.validator == "required":  # the missing field is in the message, not the path
            missing = first.message.split("'")[1] if "'" in first.message else ""
            path = ".".join(p for p in (path, missing) if p)
        return AnswerRefusal("content" + (f".{path}" if path else ""), first.message)
    return {"action": "accept", "content": content}
