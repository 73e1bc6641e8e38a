"""Agent hosts in a cluster (issue 46, item 4): on a shared PostgreSQL store, a node's new incarnation attaches to its
own hosts again and takes their leases back with a new fencing token, so a turn under way when the node was killed -9
or stopped ends in the same agent process; a node that stays away longer than its leases last has its hosts end (a
host lingers no longer than a lease: another node may take the session over) and another node takes the session
over by the restore rules, never with two agents at work."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.gateway.agenthost.test_gateway_restart import agent_pids, all_events, chunk_texts, host_pids
from tests.gateway_harness import GatewayProcess, reference_profile, subscribed

LEASE_TTL = 4.0


async def hosts_listed(node: GatewayProcess, pg_url: str) -> list[dict[str, Any]]:
    """What `acp-gateway hosts --json` says of a node's state directory."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "hosts", "--json", "--state-dir", str(node.state_dir), "--store", pg_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    listed: list[dict[str, Any]] = orjson.loads(out)
    return listed


class Nodes:
    def __init__(self, tmp_path: Path, pg_url: str) -> None:
        self.tmp_path = tmp_path
        self.pg_url = pg_url
        agents = tmp_path / "agents"
        agents.mkdir()
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.agent_state = tmp_path / "agent-state"
        reference_profile(agents, self.agent_state, "ref")
        config = tmp_path / "cluster.toml"
        config.write_text(f"lease_ttl = {LEASE_TTL}\nhost_linger = 600\n")
        self.nodes = {name: GatewayProcess(tmp_path / f"state-{name}", agents, "--store", pg_url, "--node-id", name,
                                           "--workspace-root", str(self.work), config=config) for name in ("a", "b")}


@pytest.fixture
async def nodes(tmp_path: Path, pg_url: str) -> AsyncIterator[Nodes]:
    n = Nodes(tmp_path, pg_url)
    for node in n.nodes.values():
        await node.start()
    yield n
    for node in n.nodes.values():
        if node.proc is not None and node.proc.returncode is None:
            await node.stop()
        for pid in host_pids(node.state_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
async def test_a_nodes_next_incarnation_takes_its_hosts_back_and_the_turn_goes_on(nodes: Nodes, how: str) -> None:
    a = nodes.nodes["a"]
    gate = nodes.work / "gate"
    client, log = await subscribed(a)
    sid = (await client.call("task.session.start", {"agent": "ref", "cwd": str(nodes.work),
                                                    "wait_ready": True}))["session_id"]
    [pid] = agent_pids(nodes.agent_state)
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"/gate {gate} 30"}))
    await log.wait(lambda e: e["type"] == "session_update" and e["session_id"] == sid
                   and e["data"]["update"].get("content", {}).get("text") == "chunk 14 ")
    if how == "kill9":
        await a.kill9()
    else:
        await a.stop()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    gate.touch()
    await a.start()
    events = await all_events(a, sid, lambda e: e["type"] == "turn_ended" and e["session_id"] == sid)
    [ended] = [e for e in events if e["type"] == "turn_ended"]
    assert ended["data"]["stop_reason"] == "end_turn"
    assert chunk_texts(events, sid) == [f"chunk {i} " for i in range(30)]
    assert agent_pids(nodes.agent_state) == {pid}
    # the other node sees the same session run on a, and a command through it is forwarded there
    other = await nodes.nodes["b"].client()
    answer = await other.call("task.session.prompt", {"session_id": sid, "prompt": "hello"})
    assert answer["stop_reason"] == "end_turn"
    assert agent_pids(nodes.agent_state) == {pid}
    await other.close()


async def test_a_node_away_longer_than_its_leases_leaves_the_session_to_another_node(nodes: Nodes) -> None:
    a, b = nodes.nodes["a"], nodes.nodes["b"]
    client = await a.client()
    sid = (await client.call("task.session.start", {"agent": "ref", "cwd": str(nodes.work),
                                                    "wait_ready": True}))["session_id"]
    await client.close()
    [pid] = agent_pids(nodes.agent_state)
    hosts = host_pids(a.state_dir)
    assert len(hosts) == 1
    # `acp-gateway hosts` on each node's state directory lists that node's hosts only
    listed = {name: await hosts_listed(node, nodes.pg_url) for name, node in nodes.nodes.items()}
    assert [(h["session_id"], h["host_pid"], h["state"]) for h in listed["a"]] == [(sid, *hosts, "attached")]
    assert listed["b"] == []
    await a.kill9()
    # the host lingers no longer than a lease lasts: then it ends, and its agent with it
    for _ in range(int(LEASE_TTL * 40) + 200):
        if pid not in agent_pids(nodes.agent_state) and not host_pids(a.state_dir) & hosts:
            break
        await asyncio.sleep(0.05)
    assert pid not in agent_pids(nodes.agent_state)
    other = await b.client()
    answer = await other.call("task.session.prompt", {"session_id": sid, "prompt": "hello"})
    assert answer["stop_reason"] == "end_turn"
    assert len(agent_pids(nodes.agent_state)) == 1  # one agent: b's, restored by the rules
    await other.close()
    await a.start()  # a comes back: it finds no host of its own to attach, and leaves b's session alone
    status = await (client := await a.client()).call("task.session.status", {"session_id": sid})
    assert status["is_agent_running"] is True
    assert len(agent_pids(nodes.agent_state)) == 1
    await client.close()
