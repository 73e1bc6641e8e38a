"""gateway.runtime.permissions: which permission requests a profile's policy answers, by table."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.runtime.permissions import decide_permission, option_ids, refusal

OPTIONS = [{"optionId": "a1", "kind": "allow_once"}, {"optionId": "r1", "kind": "reject_once"}]
ONLY_ALLOW = [{"optionId": "always", "kind": "allow_always"}]


def request(kind: str | None, options: list[dict[str, Any]] = OPTIONS) -> dict[str, Any]:
    return {"sessionId": "x", "toolCall": {"toolCallId": "t", "kind": kind}, "options": options}


SELECT = "selected"
ROWS = [
    # policy, tool kind, options -> answer (None: ask the frontends)
    ("ask", "read", OPTIONS, None),
    ("ask", "edit", OPTIONS, None),
    ("allow_reads", "read", OPTIONS, {"outcome": SELECT, "optionId": "a1"}),
    ("allow_reads", "search", OPTIONS, {"outcome": SELECT, "optionId": "a1"}),
    ("allow_reads", "edit", OPTIONS, None),
    ("allow_reads", "execute", OPTIONS, None),
    ("allow_reads", None, OPTIONS, None),
    ("allow_all", "execute", OPTIONS, {"outcome": SELECT, "optionId": "a1"}),
    ("allow_all", "edit", ONLY_ALLOW, {"outcome": SELECT, "optionId": "always"}),
    ("allow_all", "edit", [{"optionId": "r1", "kind": "reject_once"}], None),  # nothing to allow with
    ("deny_all", "read", OPTIONS, {"outcome": SELECT, "optionId": "r1"}),
    ("deny_all", "read", ONLY_ALLOW, {"outcome": "cancelled"}),  # no reject option: cancelled
]


@pytest.mark.parametrize(("policy", "kind", "options", "expected"), ROWS)
def test_decide_permission(policy: str, kind: str | None, options: list[dict[str, Any]],
                           expected: dict[str, Any] | None) -> None:
    assert decide_permission(policy, request(kind, options)) == expected


def test_refusal_and_option_ids_ignore_malformed_options() -> None:
    params = {"options": ["junk", {"kind": "reject_once"}, {"optionId": "r2", "kind": "reject_always"}]}
    assert refusal(params) == {"outcome": "selected", "optionId": "r2"}
    assert option_ids(params) == ["None", "r2"]
