"""A real gateway process on a real PostgreSQL store: sessions, turns, events and a `kill -9` restore, as on SQLite."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from gateway.clients.client import RpcCallError
from tests.gateway_harness import EventLog, GatewayProcess, agent_log, reference_profile
from tests.support.probes import healthz
from tests.support.world import Layout, Spec, WorldFactory, start


def profiles(at: Layout) -> None:
    reference_profile(at.agents, at.agent_state, "ref", log=at.log)
    reference_profile(at.agents, at.agent_state, "ref-load", "--no-resume", log=at.log)


def on(pg_url: str) -> Spec:
    """A gateway on a database of the test's own, each test's own gateway: one test kills it, the other its
    connections. (The tests ask for `pg_url` before `gateway_world`: the gateway stops before its database goes.)"""
    return Spec(agents=profiles, args=("--store", pg_url))


@pytest.mark.parametrize(("agent", "method"), [("ref", "session/resume"), ("ref-load", "session/load")])
async def test_kill9_then_resume_restores_the_same_acp_session_from_postgresql(
        pg_url: str, gateway_world: WorldFactory, agent: str, method: str) -> None:
    own = await gateway_world(on(pg_url))
    gateway = own.gateway
    client = await own.client()
    view = await start(client, own.work, agent)
    sid, acp_id = view["session_id"], view["acp_session_id"]
    assert await client.call("task.session.prompt", {"session_id": sid, "prompt": "first"}) == \
        {"stop_reason": "end_turn"}
    await client.close()
    await gateway.kill9()
    assert not (own.layout.state / "gateway.db").exists()  # nothing of it went to a SQLite file
    await gateway.start()
    again = await own.client()
    status = await again.call("task.session.status", {"session_id": sid})
    assert (status["needs_resume"], status["resume_reason"]) == (True, "agent_not_running")
    resumed = await again.call("task.session.resume", {"session_id": sid})
    assert resumed["acp_session_id"] == acp_id
    assert [e["params"]["sessionId"] for e in agent_log(own.layout.log) if e["method"] == method] == [acp_id]
    assert await again.call("task.session.prompt", {"session_id": sid, "prompt": "second"}) == \
        {"stop_reason": "end_turn"}
    history = await again.call("task.session.history", {"session_id": sid})
    assert [(e["kind"], e["content"]) for e in history["entries"]] == [
        ("user_message", "first"), ("agent_message", "echo: first"),
        ("user_message", "second"), ("agent_message", "echo: second")]
    reader = await own.client()
    replay = EventLog(reader)
    await reader.call("task.session.subscribe", {"since": 0})  # the whole journal, across the restart
    await replay.wait(lambda e: e["type"] == "caught_up")
    ids = replay.ids()
    assert len(ids) > 10 and ids == list(range(1, len(ids) + 1))  # gap-free and in order
    assert [e["data"]["stop_reason"] for e in replay.of_type("turn_ended")] == ["end_turn", "end_turn"]
    await reader.close()
    await again.close()


async def test_a_lost_database_connection_costs_at_most_one_call_and_health_says_so(
        pg_url: str, gateway_world: WorldFactory) -> None:
    """The server ends the gateway's connections — the pool's, the journal writer's and the listener's (a restart, a
    failover of the database): the next call that needs a write may answer -32016, with /healthz 503 meanwhile; they
    reconnect and the call after works, health back to 200, with no traceback (the autouse check)."""
    own = await gateway_world(on(pg_url))
    client = await own.client()
    view = await start(client, own.work)
    admin = await asyncpg.connect(pg_url)
    # this test's database only: other runs on the same server are none of its business
    ended = await admin.fetchval("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE application_name LIKE 'acp-gateway%' AND datname = current_database()")
    await admin.close()
    assert ended >= 1
    codes = []
    for title in ("one", "two", "three"):
        try:
            await client.call("task.session.set_title", {"session_id": view["session_id"], "title": title})
            codes.append(0)
        except RpcCallError as err:
            codes.append(err.code)
            assert await healthz(own.gateway.port) == "HTTP/1.1 503 Service Unavailable"
    assert codes[1:] == [0, 0] and codes[0] in (0, -32016), codes
    assert await healthz(own.gateway.port) == "HTTP/1.1 200 OK"
    assert (await client.call("task.session.get", {"session_id": view["session_id"]}))["title"] == "three"
    await client.close()


async def test_an_unreachable_store_is_a_one_line_start_up_error(tmp_path: Path, unused_tcp_port: int) -> None:
    gw = GatewayProcess(tmp_path / "state", tmp_path, "--store",
                        f"postgresql://postgres:secret@127.0.0.1:{unused_tcp_port}/test")
    with pytest.raises(RuntimeError) as err:
        await gw.start()
    said = str(err.value)
    assert "cannot open the store postgresql://postgres:***@127.0.0.1" in said and "secret" not in said
    assert "Traceback" not in said
    GatewayProcess.started.remove(gw)
