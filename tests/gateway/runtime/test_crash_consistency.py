"""Crash consistency: a mixed workload against a real gateway, `kill -9` at random moments, 30 times, on a SQLite
store, on a PostgreSQL store, and against two nodes of a cluster on PostgreSQL (one of them killed each time).

After every restart: each acknowledged resume token, history entry, cancellation and event is still there
(`PRAGMA integrity_check` ok on SQLite), no session is lost or duplicated, no event id is duplicated or skipped,
no agent process is left behind, and at the end every active session resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from gateway.store import journal_frames, open_store, store_kind
from tests.conftest import process_alive, wait_until
from tests.gateway_harness import GatewayProcess, reference_profile
from tests.pg_server import fresh_database

ITERATIONS = 30
SEED = int(os.environ.get("CRASH_SEED", "20261130"))


@dataclass
class Acked:
    """What the gateway acknowledged to a client: it must survive anything."""

    tokens: dict[str, str] = field(default_factory=dict)  # session id -> acp session id
    prompts: dict[str, int] = field(default_factory=dict)  # session id -> prompts answered end_turn
    cancelled: set[str] = field(default_factory=set)
    events: set[int] = field(default_factory=set)


def agents_of(agent_state: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if str(agent_state).encode() in cmdline and process_alive(int(entry.name)):
                    pids.append(int(entry.name))
    return pids


async def check_database(url: str, acked: Acked) -> None:
    """What was acknowledged is in the store (SQLite or PostgreSQL, read through the store's own SQL), nothing is
    duplicated, and each owner's event ids run without a gap."""
    if store_kind(url) == "sqlite":
        db = sqlite3.connect(url)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.close()
    store = await open_store(url)
    try:
        ids = [r[0] for r in await store.fetchall("SELECT id FROM sessions")]
        assert len(ids) == len(set(ids)), "a session is duplicated"
        tokens = dict(await store.fetchall("SELECT session_id, resume_token FROM executors"))
        for sid, token in acked.tokens.items():
            assert sid in ids, f"acknowledged session {sid} is lost"
            assert tokens.get(sid) == token, f"session {sid}: token {tokens.get(sid)!r}, acknowledged {token!r}"
        for sid, count in acked.prompts.items():
            kinds = [r[0] for r in await store.fetchall("SELECT kind FROM history WHERE session_id = ?", (sid,))]
            assert kinds.count("user_message") >= count and kinds.count("agent_message") >= count, sid
        states = dict(await store.fetchall("SELECT id, state FROM sessions"))
        for sid in acked.cancelled:
            assert states[sid] == "CANCELLED", f"cancelled session {sid} is {states[sid]}"
        by_owner: dict[str, list[int]] = {}
        for owner, spans, frames in await store.fetchall("SELECT owner, spans, frames FROM journal "
                                                         "ORDER BY owner, last_id"):
            by_owner.setdefault(owner, []).extend(orjson.loads(frame)["params"]["id"]
                                                  for frame in journal_frames(spans, frames, 0, 1 << 62, None))
        for owner, journal in by_owner.items():
            assert journal == list(range(journal[0], journal[0] + len(journal))), \
                f"owner {owner}: event ids duplicated or skipped"
        missing = acked.events - {i for journal in by_owner.values() for i in journal}
        assert not missing, f"acknowledged events lost: {sorted(missing)[:10]}"
    finally:
        await store.close()


async def workload(nodes: list[GatewayProcess], victim: GatewayProcess, work: Path, acked: Acked,
                   rng: random.Random) -> None:
    """Mixed calls through every node (each op through one at random), then `kill -9` of `victim` at a random
    moment."""
    clients = [await gw.client() for gw in nodes]
    watchers = [await gw.client() for gw in nodes]
    for watcher in watchers:
        await watcher.call("task.session.subscribe")

    async def watch(watcher: GatewayClient) -> None:
        while True:
            note = await watcher.notifications.get()
            event = note["params"]
            if event["id"] is not None:
                acked.events.add(event["id"])
            if event["type"] == "permission_requested":
                with contextlib.suppress(Exception):
                    await watcher.call("task.session.permission.respond", {
                        "session_id": event["session_id"], "request_id": event["data"]["request_id"],
                        "option_id": "allow-once"})

    async def one_op() -> None:
        client = rng.choice(clients)
        active = [s for s in acked.tokens if s not in acked.cancelled]
        op = rng.choice(["start", "prompt", "prompt", "permission", "resume", "cancel"] if active else ["start"])
        sid = rng.choice(active) if active else None
        try:
            if op == "start":
                view = await client.call("task.session.start", {"agent": "ref", "cwd": str(work), "wait_ready": True})
                if view["acp_session_id"]:
                    acked.tokens[view["session_id"]] = view["acp_session_id"]
            elif op in ("prompt", "permission"):
                text = "/permission" if op == "permission" else f"note {rng.randint(0, 10**6)}"
                result = await client.call("task.session.prompt", {"session_id": sid, "prompt": text})
                if result["stop_reason"] == "end_turn" and op == "prompt":
                    acked.prompts[sid] = acked.prompts.get(sid, 0) + 1
            elif op == "resume":
                view = await client.call("task.session.resume", {"session_id": sid})
                assert view["acp_session_id"] == acked.tokens[sid]
            elif op == "cancel" and rng.random() < 0.3:
                view = await client.call("task.session.cancel", {"session_id": sid})
                assert view["state"] == "CANCELLED"
                acked.cancelled.add(sid)  # type: ignore[arg-type]
        except RpcCallError as err:
            # busy, not resumable (or moved to another node), limits, already ended; a node that died mid-call
            assert err.code in (-32010, -32013, -32014, -32009, -32015), err
        except ConnectionError:
            return

    async def run() -> None:
        while True:
            await asyncio.gather(*(one_op() for _ in range(rng.randint(1, 3))))

    tasks = [*(asyncio.ensure_future(watch(w)) for w in watchers), asyncio.ensure_future(run())]
    await asyncio.sleep(rng.uniform(0.05, 0.8))  # the crash moment: random, not a synchronisation
    await victim.kill9()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for c in (*clients, *watchers):
        await c.close()


@pytest.fixture(params=["sqlite", "postgresql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The loop runs on each backend: a SQLite file, and a database of its own on a real PostgreSQL server."""
    if request.param == "sqlite":
        yield str(tmp_path / "state" / "gateway.db")
        return
    async with fresh_database(request.getfixturevalue("pg_server")) as url:
        yield url


async def test_kill9_at_random_moments(tmp_path: Path, store_url: str) -> None:
    rng = random.Random(SEED)
    agents, work, agent_state = tmp_path / "agents", tmp_path / "work", tmp_path / "agent-state"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, agent_state, "ref", "--permission")
    url = store_url
    gw = GatewayProcess(tmp_path / "state", agents, "--store", url)
    acked = Acked()
    for iteration in range(ITERATIONS):
        await gw.start()
        await workload([gw], gw, work, acked, rng)
        await wait_until(lambda: not agents_of(agent_state), timeout=15,
                         what=f"agents of the killed gateway to exit (iteration {iteration}, seed {SEED})")
        await check_database(url, acked)
    assert len(acked.tokens) >= 3 and sum(acked.prompts.values()) >= 3, "the workload did too little to mean much"
    await gw.start()
    client = await gw.client()
    listed = await client.call("task.session.list", {"limit": 500})
    assert {s["session_id"] for s in listed["sessions"]} >= set(acked.tokens)
    for sid, token in acked.tokens.items():
        if sid in acked.cancelled:
            continue
        status = await client.call("task.session.status", {"session_id": sid})
        if status["state"] in ("CANCELLED", "FAILED", "COMPLETED"):
            continue  # a cancel the client never heard back about
        resumed = await client.call("task.session.recover" if status["resume_reason"] == "error_recovery"
                                    else "task.session.resume", {"session_id": sid, **(
                                        {"action": "retry"} if status["resume_reason"] == "error_recovery" else {})})
        assert resumed["is_agent_running"] and resumed["acp_session_id"] == token, (sid, resumed)
        await client.call("task.session.cancel", {"session_id": sid})  # keep the live count under the limit
    await client.close()
    await gw.stop()


async def test_kill9_of_cluster_nodes_at_random_moments(tmp_path: Path, pg_server: str) -> None:
    """Two nodes of a cluster on one PostgreSQL store, calls through both, `kill -9` of one of them at random
    moments: every acknowledged write present, no event id duplicated or skipped, and at the end every active
    session resumes with its ACP session, through either node."""
    rng = random.Random(SEED + 1)
    agents, work, agent_state = tmp_path / "agents", tmp_path / "work", tmp_path / "agent-state"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, agent_state, "ref", "--permission")
    acked = Acked()
    async with fresh_database(pg_server) as url:
        nodes = [GatewayProcess(tmp_path / f"state-{name}", agents, "--store", url, "--node-id", name)
                 for name in ("a", "b")]
        for node in nodes:
            await node.start()
        try:
            for _ in range(ITERATIONS):
                victim = rng.choice(nodes)
                await workload(nodes, victim, work, acked, rng)
                await victim.start()
                await check_database(url, acked)
            assert len(acked.tokens) >= 3 and sum(acked.prompts.values()) >= 3, "the workload did too little"
            clients = [await node.client() for node in nodes]
            for sid, token in acked.tokens.items():
                client = rng.choice(clients)
                status = await client.call("task.session.status", {"session_id": sid})
                if sid in acked.cancelled or status["state"] in ("CANCELLED", "FAILED", "COMPLETED"):
                    continue
                method = "task.session.recover" if status["resume_reason"] == "error_recovery" else \
                    "task.session.resume"
                resumed = await client.call(method, {"session_id": sid, **(
                    {"action": "retry"} if method == "task.session.recover" else {})})
                assert resumed["acp_session_id"] == token, (sid, resumed)
                await client.call("task.session.cancel", {"session_id": sid})
            for client in clients:
                await client.close()
        finally:
            for node in nodes:
                await node.stop()
