"""The recorder and the replay agent, and the gateway pinned to recorded traffic through replay agents."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp.client import AcpClient
from acp.errors import RpcError
from acp.models import text_block
from acp.replay.agent import load_script
from acp.session_setup import establish_session
from gateway.clients.client import GatewayClient
from tests.gateway_harness import EventLog, GatewayProcess
from tests.support.paths import REPO

FIXTURES = REPO / "fixtures"


def agent_frames(client: AcpClient) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    client.conn.observers.append(lambda d, m: frames.append(m) if d == "in" else None)
    return frames


def offered() -> dict[str, Any]:
    """What a client offers to match the recordings: what the gateway offers (fixtures/make_fixtures.py)."""
    from fixtures.make_fixtures import Offered

    return {"terminal_host": Offered(), "on_elicitation": Offered()}


def without_ids(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in f.items() if not (k == "id" and "method" not in f)} for f in frames]


async def drive(argv: list[str], cwd: Path, prompts: list[str], token: str | None = None) -> tuple[list[dict[str, Any]],
                                                                                                  str]:
    async def allow(params: dict[str, Any]) -> dict[str, Any]:
        return {"outcome": "selected", "optionId": "allow-once"}

    client = await AcpClient.launch(argv, cwd=str(cwd), on_permission=allow, **offered())
    frames = agent_frames(client)
    await client.initialize()
    result = await establish_session(client, native_session_resume=True, resume_token=token, cwd=str(cwd))
    assert result.session_id is not None
    for text in prompts:
        await client.prompt(result.session_id, [text_block(text)])
    await client.stop()
    return frames, result.session_id


async def test_record_then_replay_reproduces_the_agent_traffic(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    fixture = tmp_path / "session.jsonl"
    agent = [sys.executable, "-m", "agents.reference", "--state-dir", str(tmp_path / "state"), "--tool-calls"]
    recorded, sid = await drive([sys.executable, "-m", "gateway.cli", "record", "--out", str(fixture), "--", *agent],
                                work, ["hello", "/permission", "/tool cat notes.txt"])
    entries = [orjson.loads(line) for line in fixture.read_bytes().splitlines()]
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    assert {e["dir"] for e in entries} >= {"client_to_agent", "agent_to_client"}
    assert all(isinstance(e["ts"], float) for e in entries)
    # The recorder changed nothing: what the client saw is what the fixture says the agent sent.
    assert [e["msg"] for e in entries if e["dir"] == "agent_to_client"] == recorded
    other = tmp_path / "elsewhere"  # a different cwd: paths in `cwd` match anything
    other.mkdir()
    replayed, replay_sid = await drive([sys.executable, "-m", "gateway.cli", "replay", str(fixture)], other,
                                       ["hello", "/permission", "/tool cat notes.txt"])
    assert replay_sid == sid
    # The replay speaks of the directory it plays in (rule RM3): the recording's paths are the run's.
    moved = orjson.loads(orjson.dumps(recorded).replace(str(work).encode(), str(other).encode()))
    assert without_ids(replayed) == without_ids(moved)


def test_recorder_forwards_bytes_exactly(tmp_path: Path) -> None:
    seen = tmp_path / "agent-stdin.bin"
    fake = tmp_path / "fake_agent.py"
    fake.write_text(
        "import sys\n"
        f"data = sys.stdin.buffer.read()\nopen({str(seen)!r}, 'wb').write(data)\n"
        "sys.stdout.buffer.write(b'{\"jsonrpc\":\"2.0\",  \"method\":\"x\"}\\r\\nnot json \\xff\\n{\"a\":1}')\n"
        "sys.stderr.write('warning: something\\n')\n")
    stdin = b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n  \n{"weird":  "spacing"}\n\xe2\x9c\x93 tail'
    out = tmp_path / "rec.jsonl"
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "record", "--out", str(out), "--", sys.executable,
                           str(fake)], input=stdin, capture_output=True, timeout=60)
    assert proc.returncode == 0
    assert seen.read_bytes() == stdin
    assert proc.stdout == b'{"jsonrpc":"2.0",  "method":"x"}\r\nnot json \xff\n{"a":1}'
    assert proc.stderr == b"warning: something\n"
    entries = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_dir.setdefault(e["dir"], []).append(e)
    assert [e.get("msg", e.get("raw")) for e in by_dir["client_to_agent"]] == [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize"}, {"weird": "spacing"}, "\u2713 tail"]
    assert [e.get("msg", e.get("raw")) for e in by_dir["agent_to_client"]] == [
        {"jsonrpc": "2.0", "method": "x"}, "not json \ufffd", {"a": 1}]
    assert by_dir["agent_stderr"][0]["line"] == "warning: something"


async def test_replay_divergence_answers_32603_with_a_diff(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    client = await AcpClient.launch([sys.executable, "-m", "gateway.cli", "replay", str(FIXTURES / "new_prompt.jsonl")],
                                    cwd=str(work), **offered())
    await client.initialize()
    result = await establish_session(client, native_session_resume=True, resume_token=None, cwd=str(work))
    assert result.session_id is not None
    with pytest.raises(RpcError) as info:
        await client.prompt(result.session_id, [text_block("something else")])
    assert info.value.code == -32603 and "replay divergence" in info.value.message
    assert "params.prompt[0].text" in info.value.message  # where the frames part
    data = info.value.data
    assert data["expected"]["params"]["prompt"] == [{"type": "text", "text": "hello"}]
    assert data["received"]["params"]["prompt"] == [{"type": "text", "text": "something else"}]
    # Side by side: the recorded line on the left, the received one on the right, marked as differing.
    row = next(line for line in data["side_by_side"].splitlines() if '"hello"' in line)
    assert " | " in row and '"something else"' in row
    # The recorded request still matches afterwards: the script waits for it.
    assert (await client.prompt(result.session_id, [text_block("hello")])).stopReason == "end_turn"
    await client.stop()
    assert "replay: divergence: received session/prompt" in client.process.stderr.text()


async def test_replay_realtime_plays_the_same_messages(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    fast, _ = await drive([sys.executable, "-m", "agents.replay", str(FIXTURES / "tool_call.jsonl")], work,
                          ["/tool ls README.md"])
    paced, _ = await drive([sys.executable, "-m", "agents.replay", "--realtime", str(FIXTURES / "tool_call.jsonl")],
                           work, ["/tool ls README.md"])
    assert without_ids(fast) == without_ids(paced)


def test_fixtures_cover_the_scenarios() -> None:
    for name, must in [("new_prompt", "session/new"), ("resume", "session/resume"), ("load", "session/load"),
                       ("cancel", "session/cancel"), ("permission", "session/request_permission"),
                       ("tool_call", "session/update")]:
        steps = load_script(FIXTURES / f"{name}.jsonl")
        assert must in {s["msg"].get("method") for s in steps}, name


# -- the gateway against replay agents -------------------------------------------------------------------

def replay_profile(agents: Path, agent_id: str, fixture: str) -> None:
    command = [sys.executable, "-m", "agents.replay", str(FIXTURES / fixture)]
    (agents / f"{agent_id}.toml").write_text(f'id = "{agent_id}"\ncommand = {orjson.dumps(command).decode()}\n'
                                             "native_session_resume = true\n")


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    d = {"agents": tmp_path / "agents", "work": tmp_path / "work", "state": tmp_path / "state"}
    d["agents"].mkdir()
    d["work"].mkdir()
    return d


async def subscribe(client: GatewayClient) -> EventLog:
    log = EventLog(client)
    await client.call("task.session.subscribe")
    return log


async def test_gateway_new_prompt_then_resume_from_recordings(dirs: dict[str, Path]) -> None:
    replay_profile(dirs["agents"], "rec", "new_prompt.jsonl")
    gw = GatewayProcess(dirs["state"], dirs["agents"])
    await gw.start()
    client = await gw.client()
    view = await client.call("task.session.start", {"agent": "rec", "cwd": str(dirs["work"]), "wait_ready": True})
    recorded_id = load_script(FIXTURES / "resume.jsonl")[2]["msg"]["params"]["sessionId"]
    assert view["acp_session_id"] == recorded_id
    assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "hello"}) == \
        {"stop_reason": "end_turn"}
    await gw.kill9()
    replay_profile(dirs["agents"], "rec", "resume.jsonl")  # the next agent process plays the resume recording
    await gw.start()
    client = await gw.client()
    resumed = await client.call("task.session.resume", {"session_id": view["session_id"]})
    assert resumed["acp_session_id"] == recorded_id and resumed["error_message"] is None
    assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "again"}) == \
        {"stop_reason": "end_turn"}
    history = await client.call("task.session.history", {"session_id": view["session_id"]})
    assert [e["content"] for e in history["entries"]] == ["hello", "echo: hello", "again", "echo: again"]
    await client.close()
    await gw.stop()


async def test_gateway_load_replay_from_recording(dirs: dict[str, Path]) -> None:
    replay_profile(dirs["agents"], "rec", "new_prompt.jsonl")
    gw = GatewayProcess(dirs["state"], dirs["agents"])
    await gw.start()
    client = await gw.client()
    view = await client.call("task.session.start", {"agent": "rec", "cwd": str(dirs["work"]), "wait_ready": True})
    await gw.kill9()
    replay_profile(dirs["agents"], "rec", "load.jsonl")
    await gw.start()
    client = await gw.client()
    log = await subscribe(client)
    await client.call("task.session.resume", {"session_id": view["session_id"]})
    last = await log.wait(lambda e: e["type"] == "session_update" and
                          e["data"]["update"]["content"]["text"] == "echo: again")
    assert last["data"]["replay"] is True
    assert all(e["data"]["replay"] for e in log.of_type("session_update"))
    history = await client.call("task.session.history", {"session_id": view["session_id"]})
    assert history["entries"] == []  # replayed history is not recorded again
    await client.close()
    await gw.stop()


@pytest.mark.parametrize(("fixture", "prompt"), [("permission.jsonl", "/permission"), ("cancel.jsonl", "/hang"),
                                                 ("tool_call.jsonl", "/tool ls README.md")])
async def test_gateway_turns_from_recordings(dirs: dict[str, Path], fixture: str, prompt: str) -> None:
    replay_profile(dirs["agents"], "rec", fixture)
    gw = GatewayProcess(dirs["state"], dirs["agents"])
    await gw.start()
    client = await gw.client()
    log = await subscribe(client)
    view = await client.call("task.session.start", {"agent": "rec", "cwd": str(dirs["work"]), "wait_ready": True})
    sid = view["session_id"]
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": prompt}))
    if fixture == "permission.jsonl":
        offer = await log.wait(lambda e: e["type"] == "permission_requested")
        await client.call("task.session.permission.respond", {"session_id": sid, "request_id":
                                                              offer["data"]["request_id"], "option_id": "allow-once"})
        assert await turn == {"stop_reason": "end_turn"}
    elif fixture == "cancel.jsonl":
        await log.wait(lambda e: e["type"] == "session_update")
        await client.call("task.session.cancel_turn", {"session_id": sid})
        assert await turn == {"stop_reason": "cancelled"}
    else:
        assert await turn == {"stop_reason": "end_turn"}
        history = await client.call("task.session.history", {"session_id": sid})
        assert [(e["kind"], e["name"], e["content"]) for e in history["entries"]] == [
            ("user_message", "", "/tool ls README.md"), ("tool_call", "ls", ""), ("tool_result", "ls", "README.md")]
    await client.close()
    await gw.stop()


async def test_a_recording_holds_no_secret_and_still_replays(dirs: dict[str, Path], tmp_path: Path) -> None:
    """A session given an MCP server with a secret (an env value), recorded through the gateway: the fixture keeps the
    variable's name and `[secret]`, never its value; and replaying it to a gateway that gives the same server (the
    real secret) matches. (A stdio server: one of another type makes the gateway ask the agent what it takes first,
    with a process of its own, whose `initialize` the recording would hold too.)"""
    secret = "dummy-recorded-secret-5e8f"
    fixture = tmp_path / "with-mcp.jsonl"
    agent = [sys.executable, "-m", "agents.reference", "--state-dir", str(tmp_path / "agent-state")]
    command = [sys.executable, "-m", "gateway.cli", "record", "--out", str(fixture), "--", *agent]
    (dirs["agents"] / "rec.toml").write_text(f'id = "rec"\ncommand = {orjson.dumps(command).decode()}\n')
    (dirs["agents"] / "play.toml").write_text(
        f'id = "play"\ncommand = {orjson.dumps([sys.executable, "-m", "agents.replay", str(fixture)]).decode()}\n')
    servers = [{"name": "docs", "command": "/usr/bin/env", "args": [], "env": [{"name": "DOCS_KEY", "value": secret}]}]
    config = tmp_path / "gw.toml"
    config.write_text("allow_stdio_mcp_servers = true\n")
    gw = GatewayProcess(dirs["state"], dirs["agents"], config=config)
    await gw.start()
    try:
        client = await gw.client()
        for agent_id in ("rec", "play"):
            view = await client.call("task.session.start", {"agent": agent_id, "cwd": str(dirs["work"]),
                                                            "wait_ready": True, "mcp_servers": servers})
            assert view["is_agent_running"], view["error_message"]
            assert await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "hello"}) \
                == {"stop_reason": "end_turn"}
            if agent_id == "rec":
                text = fixture.read_text()
                assert secret not in text and '"name":"DOCS_KEY","value":"[secret]"' in text
        await client.close()
    finally:
        await gw.stop()
