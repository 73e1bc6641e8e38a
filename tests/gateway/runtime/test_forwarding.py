"""Forwarding between two nodes on a real PostgreSQL server: an answer or the other node's error comes back as it
was, each command runs once however many of a node's tasks claim, and a caller stops waiting when its target is
gone, its command is refused, removed or never taken, or its answer was written by someone else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from gateway.errors import GatewayError, busy
from gateway.runtime.forwarding import Forwarder, ForwardFailed, TargetGone
from gateway.store import open_store
from gateway.store.postgres import PostgresStore

SECRET = b"cluster-secret-for-the-forwarding-tests"


class Node:
    def __init__(self, store: PostgresStore, name: str) -> None:
        self.ran: list[dict[str, Any]] = []
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()
        self.forwarder = Forwarder(store, name, self.run, SECRET, poll=0.2)

    async def run(self, request: dict[str, Any]) -> Any:
        self.ran.append(request)
        self.started.set()
        await self.release.wait()
        if request["method"] == "busy":
            raise busy(request["session_id"], "RUNNING")
        if request["method"] == "crash":
            raise RuntimeError("a bug on the other node")
        return {"echo": request, "by": self.forwarder.node}


@pytest.fixture
async def nodes(pg_url: str) -> AsyncIterator[tuple[Node, Node]]:
    stores = [await open_store(pg_url), await open_store(pg_url)]
    pair = tuple(Node(store, name) for store, name in zip(stores, ("node-a", "node-b"), strict=True))  # type: ignore[arg-type]
    for node in pair:
        await node.forwarder.start()
    yield pair  # type: ignore[misc]
    for node in pair:
        await node.forwarder.close()
    for store in stores:
        await store.close()


async def test_a_call_runs_on_the_target_and_its_answer_comes_back(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    answer = await a.forwarder.call("node-b", {"method": "prompt", "session_id": "s-1", "text": "x" * 100_000})
    assert answer["by"] == "node-b" and len(answer["echo"]["text"]) == 100_000  # no 8 kB NOTIFY limit
    answers = await asyncio.gather(*(a.forwarder.call("node-b", {"method": "n", "n": i}) for i in range(30)))
    assert [x["echo"]["n"] for x in answers] == list(range(30))
    assert sorted(r["n"] for r in b.ran if r["method"] == "n") == list(range(30))  # each ran once
    assert a.ran == []


async def test_the_other_nodes_error_comes_back_as_it_was(nodes: tuple[Node, Node]) -> None:
    a, _b = nodes
    with pytest.raises(GatewayError) as err:
        await a.forwarder.call("node-b", {"method": "busy", "session_id": "s-2"})
    assert err.value.code == -32010 and err.value.data == busy("s-2", "RUNNING").data
    with pytest.raises(GatewayError) as crash:
        await a.forwarder.call("node-b", {"method": "crash"})
    assert crash.value.code == -32603 and "log has the details" in crash.value.message


async def test_a_caller_stops_waiting_when_its_target_is_gone(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    b.release.clear()  # b takes the command and never answers (it died mid-call, as far as a can tell)
    there = [True]

    async def still_there() -> bool:
        return there[0]

    call = asyncio.ensure_future(a.forwarder.call("node-b", {"method": "slow"}, still_there))
    await asyncio.wait_for(b.started.wait(), 10)
    there[0] = False  # its lease expired
    with pytest.raises(TargetGone):
        await asyncio.wait_for(call, 5)
    b.release.set()


async def test_a_forged_command_is_not_run_and_is_logged(nodes: tuple[Node, Node], pg_url: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Rows written straight into the table, as an agent that read the store's URL could: without a MAC, with a
    wrong one, expired, or a sealed command inserted again after it ran. None of them runs; each is logged."""
    import time

    from gateway.store.command_seal import seal

    _a, b = nodes
    tool = await open_store(pg_url)
    request = '{"method": "set_title", "owner": "bob", "session_id": "s-9", "args": {"title": "as bob"}}'
    later, earlier = time.time() + 30, time.time() - 30

    async def insert(command_id: str, mac: str | None, expires_at: float | None) -> None:
        await tool.write("INSERT INTO commands (id, target, sender, request, state, mac, expires_at) VALUES "
                         "(?, 'node-b', 'node-a', ?, 'pending', ?, ?)", (command_id, request, mac, expires_at))
        await tool.write("SELECT pg_notify('acp_gateway_commands', 'command node-b')")

    async def gone(command_id: str) -> None:  # the target took it and discarded it
        while await tool.fetchone("SELECT 1 FROM commands WHERE id = ?", (command_id,)):  # noqa: ASYNC110
            await asyncio.sleep(0.05)

    caplog.set_level("WARNING")
    await insert("c-nomac", None, None)
    await insert("c-wrong", "0" * 64, later)
    await insert("c-old", seal(SECRET, "c-old", "node-b", "node-a", request, earlier), earlier)
    await insert("c-othersecret", seal(b"x" * 40, "c-othersecret", "node-b", "node-a", request, later), later)
    far = time.time() + 3600  # sealed (with the secret) to stay valid for an hour: no node seals so
    await insert("c-far", seal(SECRET, "c-far", "node-b", "node-a", request, far), far)
    for command_id in ("c-nomac", "c-wrong", "c-old", "c-othersecret", "c-far"):
        await asyncio.wait_for(gone(command_id), 10)
    assert b.ran == []
    # a sealed command runs once; the same row inserted again is a replay
    await insert("c-good", seal(SECRET, "c-good", "node-b", "node-a", request, later), later)
    await asyncio.wait_for(b.started.wait(), 10)
    # answered (its row done) before it is inserted again: an answer still to come would land on the new row
    while not await tool.fetchone("SELECT 1 FROM commands WHERE id = 'c-good' AND state = 'done'"):  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await tool.write("DELETE FROM commands WHERE id = 'c-good'")
    await insert("c-good", seal(SECRET, "c-good", "node-b", "node-a", request, later), later)
    await asyncio.wait_for(gone("c-good"), 10)
    assert [r["args"]["title"] for r in b.ran] == ["as bob"]  # the sealed one, once
    said = caplog.text
    for command_id, why in (("c-nomac", "no_mac"), ("c-wrong", "bad_mac"), ("c-old", "expired"),
                            ("c-othersecret", "bad_mac"), ("c-far", "too_long"), ("c-good", "replayed")):
        assert f"forwarded command {command_id} (from 'node-a') not run: {why}" in said, said
    await tool.close()


async def test_an_answer_someone_else_wrote_is_never_believed(nodes: tuple[Node, Node], pg_url: str) -> None:
    """With UPDATE on `commands`, a forged answer is written while the real command runs: the caller is told its
    answer did not verify, never given the forged one; the real answer, sealed, is believed."""
    a, b = nodes
    b.release.clear()
    call = asyncio.ensure_future(a.forwarder.call("node-b", {"method": "prompt", "session_id": "s-1"}))
    await asyncio.wait_for(b.started.wait(), 10)
    attacker = await asyncpg.connect(pg_url)
    try:
        for forged in ('{"result": {"stop_reason": "FORGED"}}',  # as answers were stored before they were sealed
                       '{"answer": "{\\"result\\": {\\"stop_reason\\": \\"FORGED\\"}}", "by": "node-b", "mac": "00"}'):
            b.started.clear()
            await attacker.execute("UPDATE commands SET state = 'done', answer = $1 WHERE state = 'running'", forged)
            with pytest.raises(ForwardFailed, match="did not verify") as failed:
                await asyncio.wait_for(call, 10)
            assert "FORGED" not in str(failed.value)
            call = asyncio.ensure_future(a.forwarder.call("node-b", {"method": "prompt", "session_id": "s-1"}))
            await asyncio.wait_for(b.started.wait(), 10)
    finally:
        await attacker.close()
    b.release.set()
    assert (await asyncio.wait_for(call, 10))["by"] == "node-b"  # a sealed answer still comes through


async def test_a_command_removed_or_never_taken_fails_its_caller_in_time(pg_url: str) -> None:
    """A command deleted from the database, refused by its target (another cluster secret) or never taken (its
    target is down) gives its caller an error within `forward_timeout`, never a hang."""
    stores = [await open_store(pg_url), await open_store(pg_url)]
    sender = Forwarder(stores[0], "node-a", Node(stores[0], "unused").run, SECRET, poll=0.1, claim_timeout=1.0)
    other = Node(stores[1], "node-b")
    other.forwarder = Forwarder(stores[1], "node-b", other.run, b"another-cluster-secret-0123456789abcd", poll=0.1)
    await sender.start()
    attacker = await asyncpg.connect(pg_url)
    try:
        # Never taken: nobody serves node-c.
        with pytest.raises(ForwardFailed, match=r"did not take .* within forward_timeout"):
            await asyncio.wait_for(sender.call("node-c", {"method": "prompt"}), 10)
        # Removed while it waited to be taken.
        call = asyncio.ensure_future(sender.call("node-c", {"method": "prompt"}))
        await wait_for_row(attacker)
        await attacker.execute("DELETE FROM commands")
        with pytest.raises(ForwardFailed, match=r"refused prompt \(or its command was removed"):
            await asyncio.wait_for(call, 10)
        # Refused by a node holding another secret (it discards what it cannot verify).
        await other.forwarder.start()
        with pytest.raises(ForwardFailed, match="cluster_secret"):
            await asyncio.wait_for(sender.call("node-b", {"method": "prompt"}), 10)
        assert other.ran == []
    finally:
        await attacker.close()
        await sender.close()
        await other.forwarder.close()
        for store in stores:
            await store.close()


async def wait_for_row(conn: asyncpg.Connection) -> None:
    for _ in range(200):
        if await conn.fetchval("SELECT count(*) FROM commands"):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("no command row appeared")
