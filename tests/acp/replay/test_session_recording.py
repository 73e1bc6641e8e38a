"""`record_dir`: each agent process of a session recorded to a file of its own, secrets and paths written out, and
the session played back from its recordings as a fixture."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import orjson

from acp.replay.script import AGENT, CLIENT, Script
from tests.gateway_harness import GatewayProcess

KEY = "sk-dummy-recording-profile-key-123"  # the profile's API key, in the agent's environment
MCP_SECRET = "mcp-dummy-recording-header-456"  # an MCP header value the session was given


def profile(agents: Path, state: Path) -> None:
    command = [sys.executable, "-m", "agents.reference", "--state-dir", str(state), "--leaky-mcp"]
    (agents / "ref.toml").write_text(f'id = "ref"\ncommand = {orjson.dumps(command).decode()}\n'
                                     f'native_session_resume = true\nenv = {{ REF_API_KEY = "{KEY}" }}\n')


def replay_profile(agents: Path, recordings: Path) -> None:
    command = [sys.executable, "-m", "agents.replay", str(recordings)]
    (agents / "played.toml").write_text(f'id = "played"\ncommand = {orjson.dumps(command).decode()}\n'
                                        "native_session_resume = true\n")


async def test_each_agent_process_is_recorded_without_secrets_and_plays_back(tmp_path: Path) -> None:
    agents, work, records = tmp_path / "agents", tmp_path / "work", tmp_path / "records"
    agents.mkdir()
    work.mkdir()
    profile(agents, tmp_path / "agent-state")
    config = tmp_path / "gw.toml"
    config.write_text(f'record_dir = "{records}"\n')
    gw = GatewayProcess(tmp_path / "state", agents, config=config)
    await gw.start()
    client = await gw.client()
    server = {"type": "http", "name": "docs", "url": "https://mcp.example.com/v1",
              "headers": [{"name": "Authorization", "value": MCP_SECRET}]}
    view = await client.call("task.session.start", {"agent": "ref", "cwd": str(work), "wait_ready": True,
                                                    "mcp_servers": [server]})
    sid = view["session_id"]
    assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello"}) == {
        "stop_reason": "end_turn"}
    await client.call("task.session.prompt", {"session_id": sid, "prompt": "/mcp"})  # it repeats the secret
    await client.close()
    await gw.kill9()
    await gw.start()  # the second process of the session: a file of its own
    client = await gw.client()
    await client.call("task.session.resume", {"session_id": sid})
    assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "again"}) == {
        "stop_reason": "end_turn"}
    await client.close()
    await gw.stop()

    folder = records / sid
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == ["001.jsonl", "002.jsonl"]
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in files)
    for f in files:
        data = f.read_bytes()
        assert KEY.encode() not in data and MCP_SECRET.encode() not in data
        assert str(work).encode() not in data and str(tmp_path).encode() not in data
    first = Script.from_lines("001", files[0].read_bytes().splitlines())
    sent = [e.msg.get("method") for e in first.entries if e.direction == CLIENT]
    assert sent[:2] == ["initialize", "session/new"] and sent.count("session/prompt") == 2
    new = next(e.msg for e in first.entries if e.msg.get("method") == "session/new")
    assert new["params"]["cwd"] == "<cwd>" and new["params"]["mcpServers"][0]["headers"][0]["value"] == "[secret]"
    said = b"".join(orjson.dumps(e.msg) for e in first.entries if e.direction == AGENT)
    assert b"[secret]" in said  # what the agent repeated of the header is written out too
    second = Script.from_lines("002", files[1].read_bytes().splitlines())
    assert [e.msg.get("method") for e in second.entries if e.direction == CLIENT][1] == "session/resume"

    # The session's recordings are a fixture: a gateway replaying them gets the same answers, in another directory.
    played_state, elsewhere = tmp_path / "played-state", tmp_path / "elsewhere"
    elsewhere.mkdir()
    replay_profile(agents, folder)
    gw = GatewayProcess(played_state, agents)
    await gw.start()
    client = await gw.client()
    view = await client.call("task.session.start", {"agent": "played", "cwd": str(elsewhere), "wait_ready": True,
                                                    "mcp_servers": [server]})
    assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "hello"}) == {
        "stop_reason": "end_turn"}
    history = await client.call("task.session.history", {"session_id": view["session_id"]})
    assert [e["content"] for e in history["entries"]][:2] == ["hello", "echo: hello"]
    await client.close()
    await gw.stop()
    assert os.listdir(records) == [sid]  # the replaying gateway records nothing: it was not asked to
