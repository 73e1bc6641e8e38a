"""The checker's schema judge on single messages an agent sends: the protocol's own `$/cancel_request` is a
notification either peer may send (an agent withdrawing a permission request it put to the client)."""

from __future__ import annotations

from typing import Any

import pytest

from acp.check.schema import acp_v1_schema


@pytest.mark.parametrize(("message", "violation"), [
    ({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 3}}, None),
    ({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {}}, "notification $/cancel_request"),
    ({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}}}, None),
    ({"jsonrpc": "2.0", "method": "session/frobnicate", "params": {}}, "notification session/frobnicate"),
    ({"jsonrpc": "2.0", "method": "_vendor/anything", "params": {}}, None),
])
def test_agent_messages_judged_by_the_schema(message: dict[str, Any], violation: str | None) -> None:
    found = acp_v1_schema().check_from_agent(message)
    assert (found.role if found is not None else None) == violation
