"""Session leases on a real PostgreSQL server: one holder at a time, expiry and takeover with a greater epoch, renewal
that fails once another node took over, and release that lets another node in at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from gateway.store import EventGroup, EventRow, HistoryEntry, open_store
from gateway.store.postgres import PostgresStore


@pytest.fixture
async def nodes(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two nodes' stores on one database (each its own pool, as two gateway processes)."""
    a, b = await open_store(pg_url), await open_store(pg_url)
    assert isinstance(a, PostgresStore) and isinstance(b, PostgresStore)
    yield a, b
    await a.close()
    await b.close()


async def expired(store: PostgresStore, session_id: str, timeout: float = 10.0) -> None:
    """Until the database says the lease has run out (its clock, not ours)."""
    deadline = time.monotonic() + timeout
    while await store.leases.holder(session_id) is not None:
        assert time.monotonic() < deadline, "the lease did not expire"
        await asyncio.sleep(0.05)


async def test_one_holder_at_a_time(nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    lease = await a.leases.acquire("s-1", "node-a", 15)
    assert lease is not None and (lease.node, lease.epoch) == ("node-a", 1) and 14 < lease.expires_in <= 15
    assert await b.leases.acquire("s-1", "node-b", 15) is None  # held elsewhere, unexpired
    again = await a.leases.acquire("s-1", "node-a", 15)  # one's own: kept, same epoch
    assert again is not None and again.epoch == 1
    holder = await b.leases.holder("s-1")
    assert holder is not None and (holder.node, holder.epoch) == ("node-a", 1)
    assert await b.leases.holder("s-never") is None


async def test_of_nodes_acquiring_at_once_exactly_one_wins(nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    for round_ in range(20):
        sid = f"s-race-{round_}"
        got = await asyncio.gather(*(store.leases.acquire(sid, f"node-{i}", 15)
                                     for i, store in enumerate([a, b, a, b, a, b])))
        winners = {lease.node for lease in got if lease is not None}
        assert len(winners) == 1 and sum(lease is not None for lease in got) == 1


async def test_expiry_lets_another_node_take_over_with_a_greater_epoch(
        nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    first = await a.leases.acquire("s-2", "node-a", 0.3)
    assert first is not None
    await expired(b, "s-2")
    taken = await b.leases.acquire("s-2", "node-b", 15)
    assert taken is not None and taken.epoch == first.epoch + 1
    assert await a.leases.renew("node-a", {"s-2": first.epoch}, 15) == set()  # lost: a must stop its agent
    assert await b.leases.renew("node-b", {"s-2": taken.epoch}, 15) == {"s-2"}
    assert await a.leases.acquire("s-2", "node-a", 15) is None


async def test_release_hands_the_lease_over_at_once(nodes: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = nodes
    held = [await a.leases.acquire(f"s-{i}", "node-a", 15) for i in range(3)]
    assert all(lease is not None for lease in held)
    assert await a.leases.release("s-0", "node-a", 1)
    assert not await a.leases.release("s-0", "node-a", 1)  # already ended
    taken = await b.leases.acquire("s-0", "node-b", 15)
    assert taken is not None and taken.epoch == 2
    assert await a.leases.release_all("node-a") == 2  # SIGTERM: the rest at once
    assert {(await b.leases.acquire(f"s-{i}", "node-b", 15)).epoch for i in (1, 2)} == {2}  # type: ignore[union-attr]
    assert await a.leases.renew("node-a", {"s-1": 1, "s-2": 1}, 15) == set()


async def test_the_database_refuses_a_write_for_a_session_another_node_holds(pg_url: str) -> None:
    """Fencing: node a lost the lease (frozen past it, say) and b took it. Whatever a believes, the database
    refuses its writes for that session (SQLSTATE AL001): the session row, its history, executor, permissions and
    journal. b writes; a writes for other sessions; a tool's connection (no node) is not fenced."""
    a = await open_store(pg_url, node="node-a/1")
    b = await open_store(pg_url, node="node-b/1")
    tool = await open_store(pg_url)
    assert isinstance(a, PostgresStore) and isinstance(b, PostgresStore)
    try:
        row = await a.sessions.create(owner="o", agent="ref", cwd="/w", title=None, description=None, task_id=None,
                                      task_state="CREATED", session_state="CREATED")
        other = await a.sessions.create(owner="o", agent="ref", cwd="/w", title=None, description=None,
                                        task_id=None, task_state="CREATED", session_state="CREATED")
        first = await a.leases.acquire(row.id, "node-a/1", 0.3)
        assert first is not None
        await a.history.append(row.id, [HistoryEntry("user_message", "while a holds it")])
        await expired(b, row.id)
        assert await b.leases.acquire(row.id, "node-b/1", 15) is not None
        refused = [
            a.history.append(row.id, [HistoryEntry("agent_message", "late")]),
            a.sessions.update(row.id, title="late"),
            a.executors.set_token(row.id, "late"),
            a.executors.set_running(row.id, execution_id="x", instance_id="i", cwd="/w"),
            a.permissions.add("p-late", row.id, "o", {}),
            a.events.append_batch(EventGroup.of([EventRow(1, "session_update", "o", row.id, None, 0.0, {})])),
        ]
        for write in refused:
            with pytest.raises(asyncpg.PostgresError) as err:
                await write
            assert err.value.sqlstate == "AL001" and "leased to node node-b/1" in str(err.value)
        await b.history.append(row.id, [HistoryEntry("agent_message", "b writes")])
        await b.sessions.update(row.id, title="b's")
        await a.sessions.update(other.id, title="a's other session")  # not leased: anyone writes
        await tool.sessions.update(row.id, title="a tool is no node")
        kinds = [e.content for e in await tool.history.all(row.id)]
        assert kinds == ["while a holds it", "b writes"]
    finally:
        for store in (a, b, tool):
            await store.close()
