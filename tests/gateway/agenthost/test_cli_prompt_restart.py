"""`acp-gateway prompt` follows its turn across a gateway `kill -9` and restart (issue 46): with agent hosts the turn
goes on, and the terminal that sent it reconnects, resubscribes after the last event it printed and prints the rest
of the turn once, in order, then the agent's own stop reason."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import orjson

from tests.gateway.agenthost.test_gateway_restart import World, agent_pids, chunk_texts


async def test_prompt_on_the_command_line_follows_its_turn_across_a_gateway_kill(hosted: World) -> None:
    gate = hosted.tmp_path / "gate"
    client = await hosted.gateway.client()
    sid = await hosted.session(client)
    await client.close()
    [pid] = agent_pids(hosted.agent_state)
    env = {k: v for k, v in os.environ.items() if k not in ("ACP_GATEWAY_URL", "ACP_GATEWAY_TOKEN")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "--json", "prompt", sid, f"/gate {gate} 40", "--state-dir",
        str(hosted.gateway.state_dir), "--token", hosted.gateway.token or "", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    printed: list[dict[str, Any]] = []
    try:
        while "chunk 19 " not in chunk_texts(printed, sid):
            printed.append(orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 60)))
        await hosted.gateway.kill9()
        gate.touch()  # the rest of the turn happens while no gateway runs, or as it comes back
        await hosted.gateway.start()
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    *rest, answer = out.decode().splitlines()
    printed += [orjson.loads(line) for line in rest]
    said = err.decode()
    assert proc.returncode == 0, said
    assert orjson.loads(answer) == {"stop_reason": "end_turn"}  # the agent's own end, not `interrupted`
    assert chunk_texts(printed, sid) == [f"chunk {i} " for i in range(40)]  # each once, in order, no gap
    ids = [e["id"] for e in printed]
    assert ids == sorted(set(ids))  # no event printed twice
    assert [e["type"] for e in printed].count("turn_ended") == 1
    assert "closed; reconnecting for up to 120 s (a turn its agent host keeps goes on meanwhile)" in said
    assert f"reconnected to ws://127.0.0.1:{hosted.gateway.port}/rpc" in said
    assert agent_pids(hosted.agent_state) == {pid}  # the same agent process ended the turn
