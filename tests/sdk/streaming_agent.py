"""An ACP agent built on the official Python SDK (`agent-client-protocol`), for checking `acp-gateway check`.

It runs in the SDK's own venv (`.sdk-venv`, made by `make sdk`): its import name `acp` is the SDK's, not ours.
It answers each prompt by streaming the prompt's words back, one update per word, as a model streams tokens,
and honours session/cancel between words. `--echo-once` makes it behave as the SDK's echo example does: one
update, then the answer at once (a conformant agent whose turns end before a cancel can reach them).
"""

import asyncio
import sys
from typing import Any
from uuid import uuid4

from acp.interfaces import Client

from acp import Agent, InitializeResponse, NewSessionResponse, PromptResponse, run_agent, update_agent_message_text
from acp.schema import AgentCapabilities, Implementation

WORD_PAUSE = 0.02  # the agent's own pacing between streamed words, like a model's tokens


class StreamingAgent(Agent):
    def __init__(self, echo_once: bool) -> None:
        self.echo_once = echo_once
        self.cancelled: dict[str, asyncio.Event] = {}
        self.client: Client | None = None

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(protocol_version=1, agent_capabilities=AgentCapabilities(),
                                  agent_info=Implementation(name="sdk-streaming-agent", version="1.0"))

    async def new_session(self, cwd: str, additional_directories: Any = None, mcp_servers: Any = None,
                          **kwargs: Any) -> NewSessionResponse:
        session_id = f"sdk-{uuid4().hex}"
        self.cancelled[session_id] = asyncio.Event()
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        assert self.client is not None
        cancelled = self.cancelled.setdefault(session_id, asyncio.Event())
        cancelled.clear()
        text = " ".join(getattr(block, "text", "") for block in prompt)
        words = text.split() or ["(empty)"]
        for word in words[:1] if self.echo_once else words:
            if cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
            await self.client.session_update(session_id=session_id, update=update_agent_message_text(word + " "))
            if not self.echo_once:
                await asyncio.sleep(WORD_PAUSE)
        return PromptResponse(stop_reason="cancelled" if cancelled.is_set() else "end_turn")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.setdefault(session_id, asyncio.Event()).set()


if __name__ == "__main__":
    asyncio.run(run_agent(StreamingAgent(echo_once="--echo-once" in sys.argv[1:])))
