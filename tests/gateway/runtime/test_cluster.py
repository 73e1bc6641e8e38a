"""Three `serve` processes on one real PostgreSQL store form a cluster (docs/architecture.md: Cluster): a session
started through one node is watched through another and prompted through the third, its turn running on the node holding
its lease; two nodes resuming at once start one agent; a dead node's session is taken over with the same ACP session;
and a node frozen past its lease never writes for the session again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from tests.acp_wire import AcpWire, is_update
from tests.conftest import process_alive, wait_until
from tests.gateway_harness import TOKEN, EventLog, GatewayProcess, agent_log, reference_profile

LEASE_TTL = 2.0


class Cluster:
    def __init__(self, tmp_path: Path, pg_url: str) -> None:
        self.agents = tmp_path / "agents"
        self.agents.mkdir()
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.agent_state = tmp_path / "agent-state"  # one machine: the agents' own state is shared, as it must be
        self.log = tmp_path / "agent.log"
        reference_profile(self.agents, self.agent_state, "ref", log=self.log)
        config = tmp_path / "cluster.toml"
        config.write_text(f"lease_ttl = {LEASE_TTL}\n")
        self.nodes = {name: GatewayProcess(tmp_path / f"state-{name}", self.agents, "--store", pg_url,
                                           "--node-id", name, "--workspace-root", str(self.work), config=config)
                      for name in ("a", "b", "c")}

    async def client(self, node: str) -> GatewayClient:
        return await self.nodes[node].client()

    def agents_running(self) -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if str(self.agent_state).encode() in (entry / "cmdline").read_bytes() and \
                            process_alive(int(entry.name)):
                        pids.append(int(entry.name))
        return pids


@pytest.fixture
async def cluster(tmp_path: Path, pg_url: str) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, pg_url)
    for node in c.nodes.values():
        await node.start()
    yield c
    for node in c.nodes.values():
        if node.proc is not None and node.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                node.proc.send_signal(signal.SIGCONT)
            await node.stop()


async def health(node: GatewayProcess) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    await writer.drain()
    answer = (await asyncio.wait_for(reader.read(), 10)).decode()
    writer.close()
    return answer


async def start(client: GatewayClient, work: Path) -> dict[str, Any]:
    view: dict[str, Any] = await client.call("task.session.start", {"agent": "ref", "cwd": str(work),
                                                                    "wait_ready": True})
    return view


async def test_started_on_a_watched_on_b_prompted_on_c(cluster: Cluster) -> None:
    a, b, c = [await cluster.client(n) for n in "abc"]
    view = await start(a, cluster.work)
    sid = view["session_id"]
    watcher, prompter = EventLog(b), EventLog(c)
    await b.call("task.session.subscribe", {"session_id": sid, "since": 0})
    await c.call("task.session.subscribe", {"session_id": sid})
    await watcher.wait(lambda e: e["type"] == "caught_up")
    await prompter.wait(lambda e: e["type"] == "caught_up")
    assert await c.call("task.session.prompt", {"session_id": sid, "prompt": "hello from c"}) == \
        {"stop_reason": "end_turn"}
    for log in (watcher, prompter):  # every update reaches both other nodes
        ended = await log.wait(lambda e: e["type"] == "turn_ended")
        assert ended["data"]["stop_reason"] == "end_turn"
        updates = [e for e in log.events if e["type"] == "session_update"]
        assert any("echo: hello from c" in str(u["data"]) for u in updates)
    ids = watcher.ids()
    assert ids[0] == 1 and ids == sorted(ids) and len(ids) == len(set(ids))  # from the first, strictly increasing
    seen_by_c = prompter.ids()
    assert seen_by_c == sorted(seen_by_c) and len(seen_by_c) == len(set(seen_by_c)) and set(seen_by_c) <= set(ids)
    # The turn ran where the session's agent runs: on a, which holds its lease.
    assert (await a.call("task.session.status", {"session_id": sid}))["resume_reason"] == "agent_running"
    elsewhere = await c.call("task.session.status", {"session_id": sid})
    assert (elsewhere["resume_reason"], elsewhere["needs_resume"]) == ("stale_execution", False)
    assert elsewhere["is_agent_running"] is True  # on another node
    assert (await c.call("task.session.get", {"session_id": sid}))["is_agent_running"] is True
    listed = (await b.call("task.session.list", {}))["sessions"]
    assert [(s["session_id"], s["is_agent_running"]) for s in listed] == [(sid, True)]
    assert len(cluster.agents_running()) == 1
    assert "ok: node a/" in await health(cluster.nodes["a"]) and "1 session lease(s) held" in \
        await health(cluster.nodes["a"])
    assert "0 session lease(s) held" in await health(cluster.nodes["c"])
    history = await b.call("task.session.history", {"session_id": sid})
    assert [(e["kind"], e["content"]) for e in history["entries"]] == [
        ("user_message", "hello from c"), ("agent_message", "echo: hello from c")]
    # A change of the session's configuration through c runs on a (the agent's node); b's subscriber sees it.
    changed = await c.call("task.session.set_config_option", {"session_id": sid, "config_id": "model",
                                                              "value": "ref-large"})
    assert {o["id"]: o["currentValue"] for o in changed["config"]["options"]}["model"] == "ref-large"
    with pytest.raises(RpcCallError) as refused:  # refused up front wherever it is asked
        await b.call("task.session.set_mode", {"session_id": sid, "mode_id": "yolo"})
    assert refused.value.code == -32017
    seen = await watcher.wait(lambda e: e["type"] == "session_config" and e["data"]["cause"] == "set")
    assert seen["data"]["chosen"]["model"] == {"value": "ref-large", "by": "user"}
    assert [m["params"]["value"] for m in agent_log(cluster.log) if m["method"] == "session/set_config_option"] == [
        "ref-large"]
    assert len(cluster.agents_running()) == 1
    for client in (a, b, c):
        await client.close()


async def test_an_acp_client_on_any_node_drives_a_session_held_by_another(cluster: Cluster) -> None:
    """ACP over WebSocket in a cluster: a session made by an ACP client on a is loaded and prompted by one on c; the
    turn runs on a, and every update of it reaches c's client before the prompt's answer, as ACP orders them."""
    on_a = await AcpWire.connect(cluster.nodes["a"].port, TOKEN)
    sid = (await on_a.call("session/new", {"cwd": str(cluster.work), "mcpServers": [],
                                           "_meta": {"acpGateway": {"agent": "ref"}}}))["sessionId"]
    assert await on_a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "one"}]}) == {
        "stopReason": "end_turn"}
    on_c = await AcpWire.connect(cluster.nodes["c"].port, TOKEN)
    await on_c.call("session/load", {"sessionId": sid, "cwd": str(cluster.work), "mcpServers": []})
    assert on_c.texts() == [("user_message_chunk", "one"), ("agent_message_chunk", "echo: one")]
    mark = len(on_c.frames)
    answer = await on_c.request("session/prompt", {"sessionId": sid,
                                                   "prompt": [{"type": "text", "text": "/stream 5"}]})
    assert answer["result"] == {"stopReason": "end_turn"}
    before = on_c.frames[mark:on_c.frames.index(answer)]
    assert [f["params"]["update"]["content"]["text"] for f in before
            if f["params"]["update"]["sessionUpdate"] == "agent_message_chunk"] == [f"chunk {i} " for i in range(5)]
    await on_a.wait_for(is_update("agent_message_chunk", "chunk 4"))  # the first client watches it live
    assert len(cluster.agents_running()) == 1
    a = await cluster.client("a")
    assert (await a.call("task.session.status", {"session_id": sid}))["resume_reason"] == "agent_running"
    for client in (on_a, on_c, a):
        await client.close()


async def test_two_nodes_resuming_at_once_start_one_agent(cluster: Cluster) -> None:
    a = await cluster.client("a")
    view = await start(a, cluster.work)
    await a.close()
    await cluster.nodes["a"].stop()  # SIGTERM: its lease is handed back at once
    await wait_until(lambda: not cluster.agents_running(), timeout=15, what="a's agent to stop")
    b, c = await cluster.client("b"), await cluster.client("c")
    answers = await asyncio.gather(*(client.call("task.session.resume", {"session_id": view["session_id"]})
                                     for client in (b, c)))
    assert {x["acp_session_id"] for x in answers} == {view["acp_session_id"]}
    assert len(cluster.agents_running()) == 1
    resumed = [e for e in agent_log(cluster.log) if e["method"] == "session/resume"]
    assert len(resumed) == 1
    for client in (b, c):
        await client.close()


async def test_a_dead_nodes_session_is_taken_over_with_the_same_acp_session(cluster: Cluster) -> None:
    a, b = await cluster.client("a"), await cluster.client("b")
    view = await start(a, cluster.work)
    sid = view["session_id"]
    watcher = EventLog(b)
    await b.call("task.session.subscribe", {"session_id": sid})
    turn = asyncio.ensure_future(b.call("task.session.prompt", {"session_id": sid, "prompt": "/hang"}))
    await watcher.wait(lambda e: e["type"] == "turn_started")
    await cluster.nodes["a"].kill9()
    with pytest.raises(RpcCallError) as err:  # the forwarded turn ends when a's lease runs out
        await asyncio.wait_for(turn, LEASE_TTL * 10)
    assert err.value.code == -32015 and "stopped before it answered" in err.value.message
    assert err.value.data is not None and err.value.data["needs_resume"] is True
    resumed = await b.call("task.session.resume", {"session_id": sid})
    assert resumed["acp_session_id"] == view["acp_session_id"] and resumed["is_agent_running"]
    ended = await watcher.wait(lambda e: e["type"] == "turn_ended")
    assert ended["data"]["stop_reason"] == "interrupted"  # the dead node's turn, closed by the one taking over
    assert await b.call("task.session.prompt", {"session_id": sid, "prompt": "after"}) == {"stop_reason": "end_turn"}
    # a, restarted, is a new node: the session stays b's, and a prompt through a runs on b
    await cluster.nodes["a"].start()
    a = await cluster.client("a")
    assert (await a.call("task.session.status", {"session_id": sid}))["resume_reason"] == "stale_execution"
    assert await a.call("task.session.prompt", {"session_id": sid, "prompt": "via a"}) == {"stop_reason": "end_turn"}
    assert len(cluster.agents_running()) == 1
    await a.close()
    await b.close()


async def test_a_node_frozen_past_its_lease_never_writes_for_the_session_again(cluster: Cluster) -> None:
    a = await cluster.client("a")
    view = await start(a, cluster.work)
    sid = view["session_id"]
    await a.close()
    node_a = cluster.nodes["a"]
    assert node_a.proc is not None
    [a_agent] = cluster.agents_running()
    os.kill(node_a.proc.pid, signal.SIGSTOP)
    b = await cluster.client("b")

    async def took_over() -> bool:
        try:
            await b.call("task.session.resume", {"session_id": sid})
        except RpcCallError:
            return False
        return True

    deadline = asyncio.get_running_loop().time() + LEASE_TTL * 10
    while not await took_over():  # until a's lease has run out on the database's clock
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.2)
    os.kill(node_a.proc.pid, signal.SIGCONT)
    await wait_until(lambda: not process_alive(a_agent), timeout=LEASE_TTL * 10,
                     what="the frozen node to stop its agent once it finds its lease lost")
    assert len(cluster.agents_running()) == 1
    assert await b.call("task.session.prompt", {"session_id": sid, "prompt": "b runs it"}) == \
        {"stop_reason": "end_turn"}
    assert any("lost the lease of session" in line for line in node_a.stderr_lines)
    await b.close()


async def test_a_session_runs_on_a_node_whose_workspaces_hold_it(tmp_path: Path, pg_url: str) -> None:
    """Nodes a and c may run sessions in w1, node b only in w2. A w1 session whose node stopped is prompted
    through b: b forwards it to c, which takes it up. With no node for w1 left, b answers -32011."""
    agents, w1, w2 = tmp_path / "agents", tmp_path / "w1", tmp_path / "w2"
    for d in (agents, w1 / "proj", w2):
        d.mkdir(parents=True)
    reference_profile(agents, tmp_path / "agent-state", "ref")
    config = tmp_path / "cluster.toml"
    config.write_text(f"lease_ttl = {LEASE_TTL}\n")
    roots = {"a": w1, "b": w2, "c": w1}
    nodes = {name: GatewayProcess(tmp_path / name / "state", agents, "--store", pg_url, "--node-id", name,
                                  "--workspace-root", str(root), config=config) for name, root in roots.items()}
    for node in nodes.values():
        await node.start()
    try:
        a = await nodes["a"].client()
        view = await a.call("task.session.start", {"agent": "ref", "cwd": str(w1 / "proj"), "wait_ready": True})
        await a.close()
        await nodes["a"].stop()
        b = await nodes["b"].client()
        assert await b.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "hi"}) == \
            {"stop_reason": "end_turn"}
        c = await nodes["c"].client()
        assert (await c.call("task.session.status", {"session_id": view["session_id"]}))["resume_reason"] == \
            "agent_running"
        await c.close()
        await nodes["c"].stop()
        with pytest.raises(RpcCallError) as err:
            await b.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "again"})
        assert err.value.code == -32011
        await b.close()
    finally:
        for node in nodes.values():
            await node.stop()


async def test_a_node_with_another_cluster_secret_refuses_to_start(tmp_path: Path, pg_url: str) -> None:
    """It would refuse every command the others seal, and they every one it seals (calls through it hung): it says
    so at start, naming cluster_secret. With no node of the old secret running, the new one is the cluster's."""
    agents = tmp_path / "agents"
    agents.mkdir()
    first = GatewayProcess(tmp_path / "state-a", agents, "--store", pg_url, "--node-id", "a")
    await first.start()
    other = tmp_path / "other-secret.conf"
    other.write_text('cluster_secret = "another-cluster-secret-0123456789abcdef"\n')
    second = GatewayProcess(tmp_path / "state-b", agents, "--store", pg_url, "--node-id", "b", config=other)
    try:
        with pytest.raises(RuntimeError, match="cluster_secret is not the one the running node"):
            await second.start()
        assert second.proc is not None and await second.proc.wait() == 2
        assert "running node(s) a/" in "".join(second.stderr_lines)
    finally:
        await first.stop()
    await second.start()  # nobody of the old secret runs: rotated
    assert "differs from the one node a/" in "".join(second.stderr_lines)
    await second.stop()


async def test_a_role_that_can_only_connect_hears_nothing_of_a_prompt_through_the_cluster(cluster: Cluster,
                                                                                       pg_url: str) -> None:
    """Another application's role on the same server (PUBLIC's CONNECT, nothing else) listens on every channel the
    gateway uses while a prompt is forwarded from one node to the agent's and its answer streams back."""
    import uuid

    import asyncpg

    from gateway.store.commands import COMMANDS_CHANNEL
    from gateway.store.notices import JOURNAL_CHANNEL

    role = f"acp_listener_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f"CREATE ROLE {role} LOGIN")
    heard: list[str] = []
    listener = await asyncpg.connect(pg_url, user=role)
    try:
        for channel in (JOURNAL_CHANNEL, COMMANDS_CHANNEL):
            await listener.add_listener(channel, lambda _c, _p, _ch, payload: heard.append(payload))
        a, b = await cluster.client("a"), await cluster.client("b")
        sid = (await start(a, cluster.work))["session_id"]
        assert await b.call("task.session.prompt", {"session_id": sid, "prompt": "ALICE-CONFIDENTIAL-PROMPT-42"}) \
            == {"stop_reason": "end_turn"}
        await a.close()
        await b.close()
    finally:
        await listener.close()
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()
    assert any(p.startswith("command ") for p in heard) and len(heard) > 3, heard  # it heard the traffic
    for payload in heard:
        assert "CONFIDENTIAL" not in payload and "default" not in payload and sid not in payload, payload
