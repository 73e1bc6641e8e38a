"""`acp-gateway connect`, the stdio bridge an editor runs as its agent, against a real gateway and the reference agent:
held to the conformance checker's bar; driven by editors no one here wrote (the official Python and TypeScript SDKs'
stdio clients, acpx); and a prompt under way when the gateway is `kill -9`ed gets its answer, every update once."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.gateway_harness import ALICE, BOB, GatewayProcess, two_owner_gateway
from tests.third_party import ROOT, acpx, interop_node, sdk_python

# The reference agent's own commands for the checker (its profile's [check] table).
CHECK_PROMPTS = ["--prompt", "long=/hang", "--prompt", "longer=/hang", "--prompt", "permission=/permission",
                 "--prompt", "tools=/work", "--prompt", "mode_change=/mode plan",
                 "--prompt", "client_method=/call _acp_check/unknown_method"]
# Every check runs sessions of its own, each with its agent: more than the default per-owner limit of live ones.
MANY_SESSIONS = 'default_agent = "ref"\nmax_live_sessions_per_owner = 200\nmax_starts_per_minute_per_owner = 1000\n'


def bridge_argv(gw: GatewayProcess) -> list[str]:
    """`acp-gateway connect` as an editor would configure it: the gateway found from its state directory (its `url`
    file, read again at each reconnect), the token from the environment."""
    return [sys.executable, "-m", "gateway.cli", "connect", "--state-dir", str(gw.state_dir)]


def editor_env(token: str = ALICE) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_GATEWAY_")}
    return {**env, "ACP_GATEWAY_TOKEN": token}


async def test_the_checker_finds_connect_conformant(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=MANY_SESSIONS)
    await gw.start()
    try:
        work = tmp_path / "work"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.cli", "check", "--json", *CHECK_PROMPTS, "--turn-timeout", "60", "--",
            *bridge_argv(gw), cwd=work, env={**editor_env(), "TMPDIR": str(work)},  # its sessions in a workspace root
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 600)
        report = json.loads(out)
        (tmp_path / "report.json").write_bytes(out)
        failed = {c["id"]: (c["evidence"], (c.get("transcript") or [])[-8:]) for c in report["checks"]
                  if c["result"] not in ("pass", "skip", "info")}
        assert report["conformant"], (failed, err.decode()[-3000:])
        assert not failed
        results = {c["id"]: c["result"] for c in report["checks"]}
        # what the gateway does itself, whatever agent runs behind it: load, resume, list, close, cancel
        for check in ("ACP-LOAD-001", "ACP-LOAD-002", "ACP-RESUME-001", "ACP-LIST-001", "ACP-CLOSE-002",
                      "ACP-CANCEL-001", "ACP-CANCEL-002"):
            assert results.get(check) == "pass", (check, results.get(check))
    finally:
        await gw.stop()


class Editor:
    """An SDK's stdio client (tests/sdk/acp_stdio_client.py, tests/ts/acp_stdio_client.mjs) running the bridge."""

    def __init__(self, name: str, tmp_path: Path) -> None:
        self.name = name
        if name == "python":
            self.argv = [str(sdk_python()), str(ROOT / "tests" / "sdk" / "acp_stdio_client.py")]
        else:
            home = tmp_path / "ts-editor"
            home.mkdir()
            (home / "node_modules").symlink_to(interop_node().parent.parent)
            shutil.copy(ROOT / "tests" / "ts" / "acp_stdio_client.mjs", home / "acp_stdio_client.mjs")
            self.argv = [str(interop_node()), str(home / "acp_stdio_client.mjs")]
        self.stderr: list[str] = []

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.stderr.append(line.decode(errors="replace"))


@pytest.fixture(params=["python", "typescript"])
def editor(request: pytest.FixtureRequest, tmp_path: Path) -> Editor:
    return Editor(request.param, tmp_path)


# Agents in hosts of their own (the default outside the tests): a turn outlives the gateway; the gateway's own stop at
# the end of the test ends them.
HOSTED = 'default_agent = "ref"\nhost_linger = 60\non_stop = "stop"\n'


async def test_a_prompt_under_way_gets_its_answer_across_a_gateway_kill_9(editor: Editor, tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=HOSTED)
    await gw.start()
    gate = tmp_path / "work" / "gate"
    proc = await asyncio.create_subprocess_exec(
        *editor.argv, str(tmp_path / "work"), str(gate), "--", *bridge_argv(gw), env=editor_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    draining = asyncio.ensure_future(editor._drain(proc.stderr))
    try:
        first = await asyncio.wait_for(proc.stdout.readline(), 60)
        if not first:
            await proc.wait()
            await asyncio.wait_for(draining, 10)
        assert first.strip() == b"underway", "".join(editor.stderr)[-3000:]
        await gw.kill9()  # the agent's host keeps the turn running; the bridge loses its connection
        before = len(gw.stderr_lines)
        await gw.start()  # on another port: the bridge finds it in the state directory
        # The bridge is back (the new gateway logs its initialize) while the turn still runs: the rest of it comes live.
        await wait_until(lambda: any("ACP connection" in line for line in gw.stderr_lines[before:]), 60,
                         "the bridge to connect to the restarted gateway")
        gate.touch()  # the turn may end now
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, "".join(editor.stderr)[-3000:]
        result: dict[str, Any] = json.loads(line)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        draining.cancel()
    try:
        assert result["stops"] == ["end_turn", "end_turn"]  # the prompt under way got its answer, and the next one
        said = "".join(result["chunks"])
        numbers = [int(n) for n in said.split("chunk ")[1:]]
        assert numbers == list(range(len(numbers))) and len(numbers) > 1  # every update once, none lost, in order
        assert result["after"] == ["echo: after the restart"]
        rpc = await gw.client(ALICE)
        listed = await rpc.call("task.session.list", {})
        assert [s["session_id"] for s in listed["sessions"]] == [result["sessionId"]]  # the same session, one turn
        history = await rpc.call("task.session.history", {"session_id": result["sessionId"]})
        assert [(e["kind"], e["content"]) for e in history["entries"]] == [
            ("user_message", f"/trickle {gate}"), ("agent_message", said),
            ("user_message", "after the restart"), ("agent_message", "echo: after the restart")]
        await rpc.close()
    finally:
        await gw.stop()


async def test_acpx_runs_a_prompt_through_connect(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config='default_agent = "ref"\n')
    await gw.start()
    try:
        home = tmp_path / "acpx-home"  # acpx keeps its sessions under HOME
        home.mkdir()
        agent = " ".join(bridge_argv(gw))
        proc = await asyncio.create_subprocess_exec(
            *acpx(), "--agent", agent, "--format", "json", "--approve-all", "exec", "/tool search found-it",
            cwd=tmp_path / "work", env={**editor_env(), "HOME": str(home)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()[-3000:]
        wire = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
        answers = [m["result"] for m in wire if "result" in m and "stopReason" in m["result"]]
        assert answers == [{"stopReason": "end_turn"}]
        updates = [m["params"]["update"] for m in wire if m.get("method") == "session/update"]
        assert ("tool_call", "search") in [(u["sessionUpdate"], u.get("title")) for u in updates]
        rpc = await gw.client(ALICE)
        listed = await rpc.call("task.session.list", {})
        assert len(listed["sessions"]) == 1 and listed["sessions"][0]["agent"] == "ref"
        await rpc.close()
    finally:
        await gw.stop()


async def test_a_refused_token_is_said_and_ends_the_bridge(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path)
    await gw.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            *bridge_argv(gw), env=editor_env("not-a-token-of-this-gateway"), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        init = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {"protocolVersion": 1}}
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(init).encode() + b"\n"), 60)
        assert proc.returncode == 2
        assert "refused this token" in err.decode()
        answer = json.loads(out.decode().splitlines()[-1])
        assert answer["id"] == 7 and "refused this token" in answer["error"]["message"]
        assert "not-a-token-of-this-gateway" not in err.decode() + out.decode()
    finally:
        await gw.stop()


async def closes_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()  # a gateway dying as it is reached: the handshake gets no answer


@pytest.mark.parametrize("listening", [False, True])
async def test_no_gateway_is_said_with_what_to_do(tmp_path: Path, listening: bool) -> None:
    state = tmp_path / "state"
    state.mkdir()
    server = await asyncio.start_server(closes_at_once, "127.0.0.1", 0) if listening else None
    port = server.sockets[0].getsockname()[1] if server is not None else 9  # else: nothing listens there
    (state / "url").write_text(f"ws://127.0.0.1:{port}/rpc?token={BOB}\n")  # a token in the URL is never shown
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "connect", "--state-dir", str(state), "--wait", "2",
        env=editor_env(BOB), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    init = {"jsonrpc": "2.0", "id": "a", "method": "initialize", "params": {"protocolVersion": 1}}
    proc.stdin.write(json.dumps(init).encode() + b"\n")  # and the editor waits (its stdin stays open)
    answer = json.loads(await asyncio.wait_for(proc.stdout.readline(), 120))
    assert answer["id"] == "a" and f"no gateway at ws://127.0.0.1:{port}/acp " in answer["error"]["message"]
    assert await asyncio.wait_for(proc.wait(), 30) == 1
    said = (await proc.stderr.read()).decode()
    assert f"no gateway at ws://127.0.0.1:{port}/acp " in said and "acp-gateway serve" in said
    assert "Traceback" not in said
    assert BOB not in said and BOB not in answer["error"]["message"]
    if server is not None:
        server.close()


class RawEditor:
    """The bridge driven with raw JSON-RPC lines on its stdin and stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.seen: list[dict[str, Any]] = []
        self.ids = 0

    @classmethod
    async def start(cls, gw: GatewayProcess, *flags: str, token: str = ALICE) -> RawEditor:
        return cls(await asyncio.create_subprocess_exec(*bridge_argv(gw), *flags, env=editor_env(token),
                                                        stdin=asyncio.subprocess.PIPE,
                                                        stdout=asyncio.subprocess.PIPE))

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.ids += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method,
                                          "params": params}).encode() + b"\n")
        while True:
            message = json.loads(await asyncio.wait_for(self.proc.stdout.readline(), 60))
            self.seen.append(message)
            if message.get("id") == self.ids and "method" not in message:
                return message

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert await asyncio.wait_for(self.proc.wait(), 30) == 0


async def test_session_opens_a_gateway_session_started_elsewhere(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config='default_agent = "ref"\n')
    await gw.start()
    try:
        rpc = await gw.client(ALICE)
        started = await rpc.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                        "name": "refactor", "wait_ready": True})
        await rpc.call("task.session.prompt", {"session_id": started["session_id"], "prompt": "from the cli"})
        editor = await RawEditor.start(gw, "--session", "refactor")
        await editor.call("initialize", {"protocolVersion": 1})
        opened = await editor.call("session/new", {"cwd": str(tmp_path / "work"), "mcpServers": []})
        assert opened["result"]["sessionId"] == started["session_id"]  # the named session, not a new one
        answer = await editor.call("session/prompt", {"sessionId": started["session_id"],
                                                      "prompt": [{"type": "text", "text": "from the editor"}]})
        assert answer["result"] == {"stopReason": "end_turn"}
        said = [m["params"]["update"].get("content", {}).get("text") for m in editor.seen
                if m.get("method") == "session/update"]
        assert "echo: from the cli" in said and "echo: from the editor" in said  # its conversation, then the turn
        await editor.close()
        assert [s["session_id"] for s in (await rpc.call("task.session.list", {}))["sessions"]] == [
            started["session_id"]]
        bob = await RawEditor.start(gw, "--session", started["session_id"], token=BOB)  # not bob's to open
        await bob.call("initialize", {"protocolVersion": 1})
        refused = await bob.call("session/new", {"cwd": str(tmp_path / "work"), "mcpServers": []})
        assert refused["error"]["code"] == -32002
        await bob.close()
        await rpc.close()
    finally:
        await gw.stop()
