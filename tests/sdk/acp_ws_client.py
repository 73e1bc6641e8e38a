"""A remote ACP client built on the official Python SDK's WebSocket transport (`agent-client-protocol[http]`), run in
its own venv (`make sdk`) by tests/gateway/api/test_acp_sdk_clients.py against a gateway's `/acp`.

    acp_ws_client.py create URL TOKEN CWD               new session, two prompts
    acp_ws_client.py reload URL TOKEN CWD SESSION_ID    session/load it, then one more prompt
    acp_ws_client.py permission URL TOKEN CWD           a prompt whose tool asks for permission, allowed once

It prints one JSON object: every message the SDK received, in wire order (from the SDK's stream observer), and
what its calls answered.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from acp.connection import StreamDirection, StreamEvent
from acp.ws.client import create_websocket_stream

import acp
from acp.schema import AllowedOutcome, RequestPermissionResponse, TextContentBlock


class Client:
    """The SDK's Client interface: updates are taken (the observer records them), permission is allowed once."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        return None

    async def request_permission(self, options: Any, session_id: str, tool_call: Any,
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.asked.append(session_id)
        allow = next(o for o in options if o.kind == "allow_once")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))


def text(t: str) -> list[TextContentBlock]:
    return [TextContentBlock(type="text", text=t)]


async def main(phase: str, url: str, token: str, cwd: str, *rest: str) -> dict[str, Any]:
    wire: list[dict[str, Any]] = []

    def observe(event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING:
            wire.append(event.message)

    transport = await create_websocket_stream(url, headers={"Authorization": f"Bearer {token}"})
    client = Client()
    conn = acp.connect_to_agent(client, transport, observers=[observe])
    out: dict[str, Any] = {"wire": wire}
    init = await conn.initialize(protocol_version=1)
    out["loadSession"] = init.agent_capabilities.load_session if init.agent_capabilities else None
    if phase == "create":
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        out["sessionId"] = session.session_id
        out["stops"] = [(await conn.prompt(session_id=session.session_id, prompt=text(t))).stop_reason
                        for t in ("/tool search found-it", "hello before the crash")]
    elif phase == "reload":
        session_id = rest[0]
        await conn.load_session(cwd=cwd, session_id=session_id, mcp_servers=[])
        out["stops"] = [(await conn.prompt(session_id=session_id, prompt=text("hello after the restart"))).stop_reason]
    elif phase == "permission":
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        out["sessionId"] = session.session_id
        out["stops"] = [(await conn.prompt(session_id=session.session_id, prompt=text("/permission"))).stop_reason]
        out["asked"] = client.asked
    await conn.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:]))))
