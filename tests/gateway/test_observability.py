"""Observability against a real gateway: `/metrics` (prometheus_client) and JSON logs, while sessions start, turn,
die and come back."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.clients.client import RpcCallError
from tests.gateway_harness import ALICE, BOB, metrics_text, two_owner_gateway

OPERATOR = "the-operators-metrics-token-0123"


async def scrape(port: int, token: str = OPERATOR) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    head, body = await metrics_text(port, token)
    assert "200 OK" in head.split("\r\n")[0] and "text/plain" in head
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(body) for sample in family.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_restores_turns_calls_and_relay_lag_are_counted(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=f'metrics_token = "{OPERATOR}"\n')
    await gw.start()
    try:
        client = await gw.client(ALICE)
        view = await client.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                        "wait_ready": True})
        await client.call("task.session.prompt", {"session_id": view["session_id"], "prompt": "hello"})
        await client.close()
        first = await scrape(gw.port)
        assert value(first, "acp_gateway_restores_total", owner="alice", agent="ref", method="session/new",
                     outcome="new", failure_class="") == 1
        assert value(first, "acp_gateway_agent_launches_total", owner="alice", agent="ref") == 1
        assert value(first, "acp_gateway_turns_total", owner="alice", agent="ref", stop_reason="end_turn") == 1
        assert value(first, "acp_gateway_rpc_calls_total", owner="alice", method="task.session.prompt",
                     outcome="ok") == 1
        assert value(first, "acp_gateway_rpc_seconds_count", owner="alice", method="task.session.start") == 1
        assert value(first, "acp_gateway_relay_lag_seconds_count") > 0
        assert value(first, "acp_gateway_live_sessions") == 1
        assert value(first, "acp_gateway_store_healthy") == 1

        await gw.kill9()
        await gw.start()
        client = await gw.client(ALICE)
        await client.call("task.session.resume", {"session_id": view["session_id"]})
        with pytest.raises(RpcCallError):
            await client.call("task.session.status", {"session_id": "s-nope"})
        await client.close()
        again = await scrape(gw.port)
        assert value(again, "acp_gateway_restores_total", owner="alice", agent="ref", method="session/resume",
                     outcome="restored", failure_class="") == 1
        assert value(again, "acp_gateway_rpc_calls_total", owner="alice", method="task.session.status",
                     outcome="-32002") == 1
    finally:
        await gw.stop()


async def test_json_logs_carry_the_session_agent_and_restore(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path)
    gw.extra += ["--log-format", "json"]
    await gw.start()
    try:
        client = await gw.client(ALICE)
        view = await client.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                        "wait_ready": True})
        await client.close()
    finally:
        await gw.stop()
    records = [orjson.loads(line) for line in gw.stderr_lines if line.startswith("{")]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    restores = [r for r in records if "restore" in r]
    assert [(r["session_id"], r["agent"], r["restore"]["outcome"], r["level"]) for r in restores] == [
        (view["session_id"], "ref", "new", "INFO")]
    assert restores[0]["restore"]["attempts"] == [{"method": "session/new", "error": None}]


async def test_an_owner_reads_only_its_own_series_and_the_operator_everything(tmp_path: Path) -> None:
    """Another owner's call counts and turns would tell when and how they work."""
    gw = two_owner_gateway(tmp_path, config=f'metrics_token = "{OPERATOR}"\n')
    await gw.start()
    try:
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        await alice.call("gateway.info")
        for _ in range(3):
            await bob.call("gateway.info")
        await alice.close()
        await bob.close()
        mine, theirs, whole = await scrape(gw.port, ALICE), await scrape(gw.port, BOB), await scrape(gw.port)
        assert value(mine, "acp_gateway_rpc_calls_total", owner="alice", method="gateway.info", outcome="ok") == 1
        assert value(theirs, "acp_gateway_rpc_calls_total", owner="bob", method="gateway.info", outcome="ok") == 3
        assert {dict(labels).get("owner") for _, labels in mine} == {"alice"}  # nothing of bob, nothing gateway-wide
        assert {dict(labels).get("owner") for _, labels in theirs} == {"bob"}
        assert value(whole, "acp_gateway_rpc_calls_total", owner="bob", method="gateway.info", outcome="ok") == 3
        assert ("acp_gateway_connections", ()) in whole and ("acp_gateway_connections", ()) not in mine
        head, _ = await metrics_text(gw.port, "not-a-token-of-anyone-at-all")
        assert head.startswith("HTTP/1.1 401")
    finally:
        await gw.stop()
