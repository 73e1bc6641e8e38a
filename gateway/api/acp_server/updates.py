"""The gateway's records as ACP messages to a remote client, as pure functions: journal events, session views,
the `initialize` answer, a permission answer.

Rules of this file:
- An agent's `session/update` goes out untouched (only its `sessionId` is the gateway's): an update kind from a
  newer agent reaches the client as it came.
- What is not the agent's speech is never made into it: gateway notes, statuses and turn boundaries have no ACP
  update and are not sent; the user's prompt becomes `user_message_chunk`s, as an agent replays it on
  `session/load`; a title becomes `session_info_update`.
- Updates an agent replayed while the gateway restored it (`replay: true`) are the conversation again: dropped.
- A configuration change the agent did not announce itself (a set by another client, a re-apply after a restore)
  becomes the `config_option_update` / `current_mode_update` the agent would have sent; one it announced is not
  repeated.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import orjson

from acp.models import STATE_UPDATE_KINDS

from .protocol import META_KEY, SERVED_PROTOCOL_VERSION

# Updates that report a state (what the agent offers, its commands, its usage, the title) rather than the
# conversation: a session/load sends the latest of each after its answer, not every past one before it.
STATE_KINDS = STATE_UPDATE_KINDS


@dataclass(slots=True)  # not frozen: made for every update relayed, and a frozen one costs twice as much to make
class Notify:
    """`session/update` notifications to write as they are."""

    frames: tuple[bytes, ...]
    prompt: tuple[dict[str, Any], ...] | None = None  # the user's prompt they echo (a connection skips its own)
    state: str | None = None  # a state update's kind (one of STATE_KINDS): a replay keeps only the latest of each


@dataclass(frozen=True)
class QuestionOffer:
    """A question to put to the client: a permission request (`session/request_permission`) or an agent's
    elicitation (`elicitation/create`, to a client that offered its `mode`)."""

    request_id: str
    params: dict[str, Any]
    method: str = "session/request_permission"
    mode: str | None = None  # an elicitation's


@dataclass(frozen=True)
class Withdraw:
    """The question was answered (or given up): a client still asked must be told."""

    request_id: str


@dataclass(frozen=True)
class CaughtUp:
    """The journal replay is over; what follows is live."""


@dataclass(frozen=True)
class Deleted:
    """The session is gone."""


Out = Notify | QuestionOffer | Withdraw | CaughtUp | Deleted


def update_frame(session_id: str, update: Any, meta: Any = None, event_id: int | None = None) -> bytes:
    """A `session/update`; `event_id`, the journal event it comes from, goes in `_meta.acpGateway.eventId` (beside the
    agent's own `_meta`, untouched): a client that comes back after a lost connection resumes after it."""
    params: dict[str, Any] = {"sessionId": session_id, "update": update}
    if event_id is not None and (meta is None or isinstance(meta, dict)):
        meta = {**(meta or {}), META_KEY: {"eventId": event_id}}
    if meta is not None:
        params["_meta"] = meta
    return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})


def translate(frame: bytes) -> Out | None:
    """One `task.session.event` frame (journal or synthetic) as what an ACP client is sent; None: nothing."""
    return translate_event(orjson.loads(frame)["params"])


def translate_all(frames: list[bytes]) -> list[Out | None]:
    """`translate` of each frame, decoded in one call (a whole group: a third of the cost of one call each)."""
    if len(frames) == 1:
        return [translate(frames[0])]
    return [translate_event(message["params"]) for message in orjson.loads(b"[" + b",".join(frames) + b"]")]


def translate_event(event: dict[str, Any]) -> Out | None:
    kind, data, session_id, event_id = event["type"], event["data"], event["session_id"], event.get("id")
    if kind == "session_update":
        if data.get("replay"):
            return None
        update = data.get("update")
        state = update.get("sessionUpdate") if isinstance(update, dict) else None
        return Notify((update_frame(session_id, update, data.get("_meta"), event_id),),
                      state=state if state in STATE_KINDS else None)
    if kind == "turn_started":
        blocks = tuple(b for b in data.get("prompt") or () if isinstance(b, dict))
        return Notify(tuple(update_frame(session_id, {"sessionUpdate": "user_message_chunk", "content": b},
                                         event_id=event_id) for b in blocks), prompt=blocks)
    if kind == "permission_requested":
        return QuestionOffer(str(data.get("request_id")), {"sessionId": session_id, "toolCall": data.get("tool_call"),
                                                           "options": data.get("options") or []})
    if kind == "permission_resolved":
        return Withdraw(str(data.get("request_id")))
    if kind == "elicitation_requested":
        return QuestionOffer(str(data.get("request_id")), elicitation_params(session_id, data), "elicitation/create",
                             str(data.get("mode")))
    if kind == "elicitation_resolved":
        return Withdraw(str(data.get("request_id")))
    if kind == "session_title":
        return Notify((update_frame(session_id, {"sessionUpdate": "session_info_update",
                                                 "title": data.get("title")}, event_id=event_id),),
                      state="session_info_update")
    if kind == "session_config":
        # The agent announced its own change; a new session's answer carries its options already.
        return None if data.get("cause") in ("agent", "launch") else config_updates(session_id, data, event_id)
    if kind == "caught_up":
        return CaughtUp()
    if kind == "session_deleted":
        return Deleted()
    return None


def agent_options(options: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The agent's own configOptions among a view's options (without the gateway's stand-ins for modes and legacy
    models, which an ACP client gets as `modes` and `models`)."""
    return [o for o in options if not ((o.get("_meta") or {}).get(META_KEY) or {}).get("via")]


def for_client(options: list[dict[str, Any]], booleans: bool) -> list[dict[str, Any]]:
    """Config options as a client may be sent them: boolean ones only to a client that said it takes them
    (`clientCapabilities.session.configOptions.boolean`, as ACP requires of agents)."""
    return options if booleans else [o for o in options if o.get("type") != "boolean"]


def without_booleans(frame: bytes) -> bytes:
    """A `config_option_update` notification without its boolean options (for a client that takes none)."""
    message = orjson.loads(frame)
    update = message.get("params", {}).get("update", {})
    if update.get("sessionUpdate") != "config_option_update" or not isinstance(update.get("configOptions"), list):
        return frame
    update["configOptions"] = for_client(update["configOptions"], False)
    return orjson.dumps(message)


def offer_answer(config: dict[str, Any], booleans: bool) -> dict[str, Any]:
    """The `configOptions`, `modes` and `models` of a session/new, load or resume answer: what the agent behind the
    session last reported, as it reported it (booleans only for a client that takes them)."""
    answer: dict[str, Any] = {}
    own = for_client(agent_options(config.get("options") or []), booleans)
    if own:
        answer["configOptions"] = own
    for key in ("modes", "models"):
        if config.get(key) is not None:
            answer[key] = config[key]
    return answer


def config_updates(session_id: str, config: dict[str, Any], event_id: int | None = None) -> Notify | None:
    """A configuration change the agent did not announce, as the updates it would have sent."""
    frames = []
    own = agent_options(config.get("options") or [])
    if own:
        frames.append(update_frame(session_id, {"sessionUpdate": "config_option_update", "configOptions": own},
                                   event_id=event_id))
    modes = config.get("modes")
    if isinstance(modes, dict) and modes.get("currentModeId"):
        frames.append(update_frame(session_id, {"sessionUpdate": "current_mode_update",
                                                "currentModeId": modes["currentModeId"]}, event_id=event_id))
    return Notify(tuple(frames), state="session_config") if frames else None


def initialize_result(prompt_capabilities: dict[str, bool], version: str, default_agent: str,
                      agents: list[str], mcp: tuple[bool, bool] = (False, False),
                      directories: bool = False) -> dict[str, Any]:
    """What the gateway guarantees whatever agent runs behind a session: load, resume, list and close are the
    gateway's own (served from its store and journal), never passed on to the agent. MCP transports and additional
    directories are the default agent's (`mcp`: http, sse), as its own `initialize` says."""
    sessions: dict[str, Any] = {"resume": {}, "list": {}, "close": {}}
    if directories:
        sessions["additionalDirectories"] = {}
    return {
        "protocolVersion": SERVED_PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": prompt_capabilities,
            "mcpCapabilities": {"http": mcp[0], "sse": mcp[1]},
            "sessionCapabilities": sessions,
        },
        "authMethods": [],
        "agentInfo": {"name": "acp-gateway", "title": "ACP session gateway", "version": version},
        "_meta": {META_KEY: {"defaultAgent": default_agent, "agents": agents}},
    }


def iso8601(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat().replace("+00:00", "Z")


def session_info(view: dict[str, Any]) -> dict[str, Any]:
    """A `task.session` view as ACP's SessionInfo; the gateway's own facts go under `_meta.acpGateway`."""
    return {"sessionId": view["session_id"], "cwd": view["cwd"], "title": view.get("title"),
            "updatedAt": iso8601(view["updated_at"]),
            "_meta": {META_KEY: {"agent": view["agent"], "state": view["state"], "taskId": view["task_id"]}}}


def elicitation_params(session_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """An `elicitation_requested` event as the `elicitation/create` an ACP client is sent (the gateway's session id)."""
    params: dict[str, Any] = {"sessionId": session_id, "mode": data.get("mode"), "message": data.get("message")}
    if data.get("mode") == "url":
        params.update(url=data.get("url"), elicitationId=data.get("elicitation_id"))
    else:
        params["requestedSchema"] = data.get("requested_schema")
    if data.get("tool_call_id"):
        params["toolCallId"] = data["tool_call_id"]
    return params


def elicitation_answer(result: Any) -> tuple[str, Any] | None:
    """An ACP client's answer to `elicitation/create` as (action, content); None when it is not one."""
    action = result.get("action") if isinstance(result, dict) else None
    if action not in ("accept", "decline", "cancel"):
        return None
    return str(action), result.get("content")


def permission_answer(result: Any) -> tuple[str | None, bool] | None:
    """An ACP client's answer to `session/request_permission` as (option_id, cancelled); None when it is not one."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if not isinstance(outcome, dict):
        return None
    if outcome.get("outcome") == "cancelled":
        return None, True
    option = outcome.get("optionId")
    if outcome.get("outcome") == "selected" and isinstance(option, str) and option:
        return option, False
    return None
