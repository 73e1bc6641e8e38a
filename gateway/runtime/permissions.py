"""Permission policy (per agent profile): which `session/request_permission` a human must answer.

Pure: a function of the policy and the request. `None` means "ask the frontends".
"""

from __future__ import annotations

from typing import Any

READ_KINDS = frozenset({"read", "search", "fetch", "think"})
CANCELLED: dict[str, Any] = {"outcome": "cancelled"}


def _option(params: dict[str, Any], kinds: tuple[str, ...]) -> str | None:
    options = params.get("options") or []
    for kind in kinds:
        for option in options:
            if isinstance(option, dict) and option.get("kind") == kind and isinstance(option.get("optionId"), str):
                return str(option["optionId"])
    return None


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": "selected", "optionId": option_id}


def refusal(params: dict[str, Any]) -> dict[str, Any]:
    """The safe answer (used by `deny_all` and on timeout): a reject option, else `cancelled`."""
    option = _option(params, ("reject_once", "reject_always"))
    return selected(option) if option else dict(CANCELLED)


def decide_permission(policy: str, params: dict[str, Any]) -> dict[str, Any] | None:
    if policy == "deny_all":
        return refusal(params)
    allow = _option(params, ("allow_once", "allow_always"))
    if allow is None:
        return None
    if policy == "allow_all":
        return selected(allow)
    tool_call = params.get("toolCall")
    kind = tool_call.get("kind") if isinstance(tool_call, dict) else None
    if policy == "allow_reads" and kind in READ_KINDS:
        return selected(allow)
    return None


def option_ids(params: dict[str, Any]) -> list[str]:
    return [str(o.get("optionId")) for o in params.get("options") or [] if isinstance(o, dict)]
