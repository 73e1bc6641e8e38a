"""A gateway killed after a turn is recorded and before its prompt reaches the agent host (the `turn-recorded`
failpoint, gateway/runtime/failpoints.py): the next gateway finds the host never took the prompt's line (ledger
LD-8) and sends it then, once, with the same id; the turn ends as the agent ends it, in the same agent process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from tests.gateway.agenthost.test_gateway_restart import World, agent_pids, host_pids
from tests.gateway_harness import subscribed


async def test_a_prompt_recorded_but_never_sent_is_sent_by_the_next_gateway(tmp_path: Path) -> None:
    hosted = World(tmp_path, 60)
    gateway = hosted.gateway
    gateway.env = {"ACP_GATEWAY_FAILPOINT": "turn-recorded"}
    await gateway.start()
    try:
        client, log = await subscribed(gateway)
        sid = await hosted.session(client)
        [pid] = agent_pids(hosted.agent_state)
        prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "hello"}))
        assert gateway.proc is not None
        await asyncio.wait_for(gateway.proc.wait(), 30)  # it killed itself between turn_started and the prompt
        assert gateway.proc.returncode == -signal.SIGKILL
        with contextlib.suppress(Exception):
            await prompt
        await client.close()
        gateway.env = {}
        await gateway.start()
        client, log = await subscribed(gateway, 0)
        ended = await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid, timeout=30)
        assert ended["data"]["stop_reason"] == "end_turn"
        events = [e for e in log.events if e["session_id"] == sid]
        echoed = [e for e in events if e["type"] == "session_update"
                  and e["data"]["update"].get("content", {}).get("text") == "echo: hello"]
        assert len(echoed) == 1  # the agent got the prompt once
        assert [e["type"] for e in events].count("turn_started") == 1
        assert any(e["type"] == "session_message" and "before this turn's prompt reached agent" in e["data"]["text"]
                   for e in events)
        assert agent_pids(hosted.agent_state) == {pid}  # the same agent process answered
        history = await client.call("task.session.history", {"session_id": sid})
        kinds = [(e["kind"], e["content"]) for e in history["entries"]]
        assert kinds.count(("user_message", "hello")) == 1
        assert ("agent_message", "echo: hello") in kinds
        await client.close()
    finally:
        await gateway.stop()
        for host in host_pids(gateway.state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(host, signal.SIGKILL)
