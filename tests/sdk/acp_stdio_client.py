"""An editor built on the official Python SDK's stdio client (`acp.spawn_agent_process`), run in its own venv
(`make sdk`) by tests/gateway/api/test_acp_connect.py with `acp-gateway connect` as its agent.

    acp_stdio_client.py CWD GATE -- AGENT ARGV...

A session, then a prompt `/trickle GATE` (the reference agent streams `chunk 0 `, `chunk 1 `, … until the file GATE
exists); once the first chunk came it prints `underway` on stdout (the test then kills the gateway, restarts it, and
makes GATE). Then one more prompt. Last it prints one JSON object: the session id, the stop reasons, and every agent
message chunk's text in arrival order.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import acp
from acp.schema import TextContentBlock


class Editor:
    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.first = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if getattr(update, "session_update", None) == "agent_message_chunk":
            self.chunks.append(update.content.text)
            self.first.set()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def text(t: str) -> list[TextContentBlock]:
    return [TextContentBlock(type="text", text=t)]


async def main(cwd: str, gate: str, agent: list[str]) -> dict[str, Any]:
    editor = Editor()
    # The agent's environment, as an editor's configuration gives it (Zed's `env`): the SDK passes only a few
    # variables on by default, and the token is one to pass.
    async with acp.spawn_agent_process(editor, agent[0], *agent[1:], env=dict(os.environ)) as (conn, _process):
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd=cwd, mcp_servers=[])
        turn = asyncio.ensure_future(conn.prompt(session_id=session.session_id, prompt=text(f"/trickle {gate}")))
        await editor.first.wait()
        print("underway", flush=True)
        stops = [(await turn).stop_reason]
        during = list(editor.chunks)
        stops.append((await conn.prompt(session_id=session.session_id, prompt=text("after the restart"))).stop_reason)
        return {"sessionId": session.session_id, "stops": stops, "chunks": during,
                "after": editor.chunks[len(during):]}


if __name__ == "__main__":
    split = sys.argv.index("--")
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[split + 1:]))), flush=True)
