"""`/acp` driven by ACP clients no one here wrote: the official Python SDK's WebSocket client (its own venv) and the
official TypeScript SDK's WebSocket stream (Node.js), against a real gateway process and the reference agent.

The acceptance of ACP over WebSocket: a client creates a session and prompts; the gateway is `kill -9`ed and
restarted; the client comes back, `session/load` replays the whole conversation before its answer, the next prompt
works on the same session id, and the session is the gateway's (task.session.list, its history). And a permission
the agent asks for is answered by the SDK client.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gateway.api.acp_server.updates import STATE_KINDS
from tests.gateway_harness import ALICE, GatewayProcess, two_owner_gateway
from tests.third_party import ROOT, interop_node, sdk_python

CONVERSATION = [
    ("user_message_chunk", "/tool search found-it"), ("tool_call", "search"), ("tool_call_update", "found-it"),
    ("user_message_chunk", "hello before the crash"), ("agent_message_chunk", "echo: hello before the crash"),
]


class SdkClient:
    """One of the two SDK clients, run as a process per phase; each prints one JSON object."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name = name
        if name == "python":
            self.argv = [str(sdk_python()), str(ROOT / "tests" / "sdk" / "acp_ws_client.py")]
        else:
            # Node resolves a module's imports from where the module is: beside a node_modules of the pinned SDK.
            home = tmp_path / "ts-client"
            home.mkdir()
            (home / "node_modules").symlink_to(interop_node().parent.parent)
            shutil.copy(ROOT / "tests" / "ts" / "acp_ws_client.mjs", home / "acp_ws_client.mjs")
            self.argv = [str(interop_node()), str(home / "acp_ws_client.mjs")]

    async def run(self, gw: GatewayProcess, phase: str, cwd: str, *rest: str) -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(*self.argv, phase, f"ws://127.0.0.1:{gw.port}/acp", ALICE, cwd,
                                                    *rest, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, f"{self.name} SDK client failed ({phase}): {err.decode()[-3000:]}"
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return result

    def updates(self, result: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        """Every session/update in arrival order, and how many came before session/load answered."""
        if self.name == "typescript":
            updates = result["updates"]
            return updates, result.get("loadedAt", len(updates))
        wire = result["wire"]
        responses = [i for i, m in enumerate(wire) if "method" not in m]
        loaded = responses[1] if len(responses) > 1 else len(wire)  # after initialize's answer: session/load's
        notes = [(i, m["params"]) for i, m in enumerate(wire) if m.get("method") == "session/update"]
        return [p for _, p in notes], sum(1 for i, _ in notes if i < loaded)


def summary(updates: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, what it says) of each update of the conversation: a chunk's text, a tool call's title, a tool update's
    result text (the agent's reports of its state — commands, usage, configuration — are not the conversation)."""
    said = []
    for note in updates:
        update = note["update"]
        kind = update["sessionUpdate"]
        if kind in STATE_KINDS:
            continue
        if kind == "tool_call":
            said.append((kind, update["title"]))
        elif kind == "tool_call_update":
            said.append((kind, update["content"][0]["content"]["text"]))
        else:
            said.append((kind, update.get("content", {}).get("text", "")))
    return said


@pytest.fixture(params=["python", "typescript"])
def sdk(request: pytest.FixtureRequest, tmp_path: Path) -> SdkClient:
    return SdkClient(request.param, tmp_path)


async def test_sessions_outlive_a_kill_9_of_the_gateway(sdk: SdkClient, tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config='default_agent = "ref"\n')
    cwd = str(tmp_path / "work")
    await gw.start()
    try:
        created = await sdk.run(gw, "create", cwd)
        session = created["sessionId"]
        assert created["stops"] == ["end_turn", "end_turn"]
        assert created["loadSession"] is True
        await gw.kill9()
        await gw.start()
        reloaded = await sdk.run(gw, "reload", cwd, session)
        updates, before_answer = sdk.updates(reloaded)
        assert summary(updates[:before_answer]) == CONVERSATION  # the whole conversation, before the load's answer
        assert {u["sessionId"] for u in updates} == {session}
        assert reloaded["stops"] == ["end_turn"]  # the next prompt works on the same id
        assert summary(updates[before_answer:]) == [("agent_message_chunk", "echo: hello after the restart")]
        # The agent's slash commands and usage, as last reported, follow the answer (not every past report before it).
        states = [u["update"]["sessionUpdate"] for u in updates]
        assert "available_commands_update" in states[before_answer:] and "usage_update" in states[before_answer:]
        assert not set(states[:before_answer]) & STATE_KINDS
        rpc = await gw.client(ALICE)
        listed = await rpc.call("task.session.list", {})
        assert [s["session_id"] for s in listed["sessions"]] == [session]
        history = await rpc.call("task.session.history", {"session_id": session})
        assert [(e["kind"], e["content"]) for e in history["entries"]] == [
            ("user_message", "/tool search found-it"), ("tool_call", ""), ("tool_result", "found-it"),
            ("user_message", "hello before the crash"), ("agent_message", "echo: hello before the crash"),
            ("user_message", "hello after the restart"), ("agent_message", "echo: hello after the restart")]
        await rpc.close()
    finally:
        await gw.stop()


async def test_permission_answered_by_the_sdk_client(sdk: SdkClient, tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config='default_agent = "ref"\n')
    await gw.start()
    try:
        result = await sdk.run(gw, "permission", str(tmp_path / "work"))
        session = result["sessionId"]
        assert result["asked"] == [session]
        assert result["stops"] == ["end_turn"]
        updates, _ = sdk.updates(result)
        assert ("agent_message_chunk", 'permission: {"outcome":"selected","optionId":"allow-once"}') in summary(updates)
    finally:
        await gw.stop()

