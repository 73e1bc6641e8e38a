"""Real third-party agents inside the bubblewrap sandbox, pinned by `make interop` and run offline with dummy keys:
claude-agent-acp and opencode start, answer `session/new` (with their options), and after a gateway `kill -9` —
which leaves none of their processes behind — are restored by `session/resume` from their own session stores,
which live in their owner's agent home."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.conftest import wait_until
from tests.gateway_harness import GatewayProcess, processes_naming, running
from tests.third_party import INTEROP, interop_node

AGENTS = {
    # A closed local port makes claude's model calls fail at once; as root inside, IS_SANDBOX lets its CLI run.
    "claude": ([str(interop_node()), str(INTEROP / "@agentclientprotocol/claude-agent-acp/dist/index.js")],
               {"ANTHROPIC_API_KEY": "sk-ant-dummy-sandbox-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
                "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"}),
    "opencode": ([str(INTEROP / "opencode-ai/bin/opencode.exe"), "acp"], {}),
}


def processes_under(path: Path) -> list[str]:
    return processes_naming(str(path), also_environ=True)


@pytest.mark.parametrize("agent", sorted(AGENTS))
async def test_a_real_agent_starts_answers_and_is_restored_inside_the_sandbox(tmp_path: Path, agent: str) -> None:
    command, env = AGENTS[agent]
    if not Path(command[-1] if agent == "claude" else command[0]).exists():
        pytest.fail(f"{agent} is not installed: `make interop` (part of `make test`) installs it")
    agents = tmp_path / "agents"
    agents.mkdir()
    env_toml = ", ".join(f"{k} = {orjson.dumps(v).decode()}" for k, v in env.items())
    (agents / f"{agent}.toml").write_text(
        f'id = "{agent}"\ncommand = {orjson.dumps(command).decode()}\nenv = {{ {env_toml} }}\n'
        f'native_session_resume = true\nsandbox = "bwrap"\nsandbox_read = ["{INTEROP.parent}"]\n')
    work = tmp_path / "work"
    work.mkdir()
    gw = GatewayProcess(tmp_path / "state", agents, "--default-agent", agent)
    async with running(gw):
        client = await gw.client()
        view = await client.call("task.session.start", {"cwd": str(work), "wait_ready": True}, timeout=120)
        assert view["is_agent_running"], view["error_message"]
        assert view["config"]["options"], "its session/new answered with its options"
        token = view["acp_session_id"]
        # a choice, as a user makes one: claude keeps a session on disk once something happened in it
        mode = next(o for o in view["config"]["options"] if o.get("category") == "mode")
        other = next(v["value"] for v in mode["options"] if v["value"] != mode["currentValue"])
        await client.call("task.session.set_config_option", {"session_id": view["session_id"],
                                                             "config_id": mode["id"], "value": other})
        homes = gw.state_dir / "homes"
        if agent == "claude":  # it keeps a session once its CLI took a prompt: one, cut short (its model is offline)
            turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": view["session_id"],
                                                                             "prompt": "hello"}))
            await wait_until(lambda: any(homes.glob(f"*/.claude/projects/*/{token}.jsonl")), 60,
                             "its transcript, in its owner's agent home")
            await client.call("task.session.cancel_turn", {"session_id": view["session_id"]})
            assert (await asyncio.wait_for(turn, 60))["stop_reason"] == "cancelled"
        await client.close()
        await gw.kill9()
        # the agent and everything it started die with the gateway (its PID namespace ends with it)
        await wait_until(lambda: not processes_under(homes), 10, f"no agent processes left: {processes_under(homes)}")
        await gw.start()
        client = await gw.client()
        resumed = await client.call("task.session.resume", {"session_id": view["session_id"]}, timeout=120)
        assert resumed["is_agent_running"], resumed["error_message"]
        assert resumed["acp_session_id"] == token and "restored by session/resume" in (resumed["how"] or ""), resumed
        chosen = {o["id"]: o["currentValue"] for o in resumed["config"]["options"]}
        assert chosen[mode["id"]] == other
        await client.close()
