"""The store's repositories, on SQLite and on a real PostgreSQL server alike (the `any_store` fixture)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.errors import is_storage_error
from gateway.store import HistoryEntry, StoreBase, open_store, store_kind
from gateway.store.postgres import numbered


async def new_session(store: StoreBase, owner: str = "alice", task_id: str | None = None, title: str = "t") -> str:
    row = await store.sessions.create(owner=owner, agent="reference", cwd="/w", title=title, description=None,
                                      task_id=task_id, task_state="CREATED", session_state="CREATED")
    return row.id


async def test_sessions_are_created_read_listed_and_changed(any_store: StoreBase) -> None:
    store = any_store
    first = await new_session(store, title="first")
    row = await store.sessions.get(first)
    assert row is not None and (row.owner, row.agent, row.title, row.state, row.task_state) == (
        "alice", "reference", "first", "CREATED", "CREATED")
    assert await store.sessions.get(first, owner="bob") is None  # another owner's session is not there
    second = await new_session(store, task_id=row.task_id, title="second")  # the task exists: joined, not replaced
    task = await store.tasks.get("alice", row.task_id)
    assert task is not None and task.title == "first"
    assert await store.tasks.get("bob", row.task_id) is None
    await new_session(store, owner="bob")
    listed = [r.id for r, _ in await store.sessions.list("alice", states=None, before_seq=None, limit=10)]
    assert listed == [second, first]  # newest first
    seq = (await store.sessions.get(second)).seq  # type: ignore[union-attr]
    older = await store.sessions.list("alice", states=None, before_seq=seq, limit=10)
    assert [r.id for r, _ in older] == [first]
    await store.sessions.update(first, state="RUNNING", task_state="RUNNING", title="renamed", launched=True,
                                recovery_pending=False, turn_event_id=7)
    row = await store.sessions.get(first)
    assert row is not None and (row.state, row.title, row.launched, row.turn_event_id, row.task_state) == (
        "RUNNING", "renamed", True, 7, "RUNNING")
    running = await store.sessions.list("alice", states=["RUNNING", "FAILED"], before_seq=None, limit=10)
    assert [r.id for r, _ in running] == [first]
    assert [r.id for r in await store.sessions.running()] == [first]
    with pytest.raises(ValueError):
        await store.sessions.update(first, owner="mallory")


async def test_status_facts_count_pending_permissions(any_store: StoreBase) -> None:
    store = any_store
    sid = await new_session(store)
    await store.executors.set_running(sid, execution_id="x1", instance_id="i1", cwd="/w", pid=4242,
                                      proc_start=2**40, boot_id="b")
    await store.permissions.add("p1", sid, "alice", {"toolCall": {"title": "write"}}, event_id=3)
    await store.permissions.add("p2", sid, "alice", {"toolCall": {"title": "read"}})
    await store.permissions.add("elic-1", sid, "alice", {"mode": "url"})  # an elicitation: not a permission
    facts = await store.sessions.with_status_facts(sid, "alice")
    assert facts is not None
    row, executor, pending, config = facts
    assert row.id == sid and executor is not None and (executor.pid, executor.proc_start) == (4242, 2**40)
    assert pending == 2 and config is None  # no configuration stored: the session's is empty
    assert await store.sessions.with_status_facts(sid, "bob") is None


async def test_a_session_configuration_is_created_with_it_changed_in_parts_and_deleted_with_it(
        any_store: StoreBase) -> None:
    store = any_store
    servers = [{"name": "docs", "type": "http", "url": "https://mcp.example/", "headers": [
        {"name": "Authorization", "value": "Bearer s3cr3t"}]}]
    row = await store.sessions.create(owner="alice", agent="reference", cwd="/w", title=None, description=None,
                                      task_id=None, task_state="TODO", session_state="CREATED",
                                      config={"chosen": {"model": {"value": "big", "category": "model", "by": "user"}},
                                              "mcp_servers": servers, "additional_directories": ["/w2"]})
    config = await store.configs.get(row.id)
    assert config is not None and config.chosen["model"]["value"] == "big" and config.mcp_servers == servers
    assert (config.offer, config.commands, config.usage, config.additional_directories) == ({}, None, None, ["/w2"])
    await store.configs.save(row.id, offer={"modes": {"currentModeId": "plan", "availableModes": []}},
                             usage={"used": 1, "size": 2})
    await store.configs.save(row.id, commands=[{"name": "review", "description": "Review"}])
    config = await store.configs.get(row.id)
    assert config is not None and config.offer["modes"]["currentModeId"] == "plan"
    assert (config.usage, config.commands, config.mcp_servers) == ({"used": 1, "size": 2},
                                                                   [{"name": "review", "description": "Review"}],
                                                                   servers)  # the other columns untouched
    facts = await store.sessions.with_status_facts(row.id, "alice")
    assert facts is not None and facts[3] == config
    with pytest.raises(ValueError):
        await store.configs.save(row.id, owner="mallory")
    other = await new_session(store)
    await store.configs.save(other, usage={"used": 3, "size": 4})  # a session stored before configurations were
    assert (await store.configs.get(other)).usage == {"used": 3, "size": 4}  # type: ignore[union-attr]
    await store.sessions.delete(row.id)
    assert await store.configs.get(row.id) is None


async def test_executors_record_the_agent_process(any_store: StoreBase) -> None:
    store = any_store
    sid = await new_session(store)
    await store.executors.set_running(sid, execution_id="x1", instance_id="i1", cwd="/w", pid=1)
    await store.executors.set_running(sid, execution_id="x2", instance_id="i2", cwd="/w", pid=2)  # an upsert
    await store.executors.set_token(sid, "resume-me")
    executor = await store.executors.get(sid)
    assert executor is not None and (executor.execution_id, executor.pid, executor.resume_token) == ("x2", 2,
                                                                                                    "resume-me")
    assert [e.session_id for e in await store.executors.leftovers("i1")] == [sid]
    assert await store.executors.leftovers("i2") == []
    await store.executors.touch("i2")
    await store.executors.set_stopped(sid)
    executor = await store.executors.get(sid)
    assert executor is not None and (executor.status, executor.execution_id) == ("stopped", None)


async def test_history_pages_in_order(any_store: StoreBase) -> None:
    store = any_store
    sid = await new_session(store)
    assert not await store.history.exists(sid)
    await store.history.append(sid, [HistoryEntry("user_message", f"u{i}") for i in range(5)])
    await store.history.append(sid, [HistoryEntry("tool_call", "ls", name="ls")])
    assert await store.history.exists(sid)
    page = await store.history.page(sid, 0, 3)
    assert [p.content for p in page] == ["u0", "u1", "u2"]
    rest = await store.history.page(sid, page[-1].id, 10)
    assert [p.content for p in rest] == ["u3", "u4", "ls"]
    assert (await store.history.all(sid))[-1] == HistoryEntry("tool_call", "ls", "ls")


async def test_cancel_requests_are_idempotent(any_store: StoreBase) -> None:
    store = any_store
    await store.cancels.request("s1")
    await store.cancels.request("s1")
    assert await store.cancels.pending() == ["s1"]
    await store.cancels.clear("s1")
    assert await store.cancels.pending() == []


async def test_the_first_permission_answer_wins(any_store: StoreBase) -> None:
    store = any_store
    sid = await new_session(store)
    other = await new_session(store, owner="bob")
    await store.permissions.add("p1", sid, "alice", {"n": 1})
    await store.permissions.add("p2", other, "bob", {"n": 2})
    first, second = await asyncio.gather(store.permissions.resolve("p1", {"outcome": "a"}),
                                         store.permissions.resolve("p1", {"outcome": "b"}))
    assert sorted([first, second]) == [False, True]
    assert await store.permissions.get("p1") == (sid, "alice", "resolved", {"n": 1})
    assert [p[0] for p in await store.permissions.pending("bob")] == ["p2"]
    assert await store.permissions.pending("alice", sid) == []
    assert await store.permissions.expire_all() == 1
    assert await store.permissions.pending("bob") == []


async def test_delete_takes_everything_of_the_session_and_an_orphaned_task(any_store: StoreBase) -> None:
    store = any_store
    sid = await new_session(store)
    row = await store.sessions.get(sid)
    assert row is not None
    kept = await new_session(store, task_id=row.task_id)
    await store.history.append(sid, [HistoryEntry("user_message", "hi")])
    await store.permissions.add("p1", sid, "alice", {})
    await store.cancels.request(sid)
    await store.sessions.delete(sid)
    assert await store.sessions.get(sid) is None and not await store.history.exists(sid)
    assert await store.permissions.get("p1") is None and await store.cancels.pending() == []
    assert await store.tasks.get("alice", row.task_id) is not None  # another session still has the task
    await store.sessions.delete(kept)
    assert await store.tasks.get("alice", row.task_id) is None


async def test_instances(any_store: StoreBase) -> None:
    store = any_store
    await store.instances.register("i1")
    assert await store.instances.is_alive("i1")
    await store.instances.register("i2")
    assert not await store.instances.is_alive("i1") and await store.instances.is_alive("i2")
    await store.instances.mark_dead("i2")
    assert not await store.instances.is_alive("i2")


async def test_a_store_opened_twice_migrates_once_and_keeps_its_rows(any_store: StoreBase, tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    """A second node (or a restart) opening the same store finds it migrated: the rows are there."""
    sid = await new_session(any_store)
    url = getattr(any_store, "url", None) or str(getattr(any_store, "path", ""))
    again, also = await asyncio.gather(open_store(url), open_store(url))
    try:
        assert (await again.sessions.get(sid)) is not None and (await also.sessions.get(sid)) is not None
    finally:
        await again.close()
        await also.close()


@pytest.mark.parametrize(("url", "kind"), [
    ("postgresql://u@h/db", "postgresql"), ("postgres://h/db", "postgresql"), ("/var/lib/g.db", "sqlite"),
    ("sqlite:///var/lib/g.db", "sqlite"), ("g.db", "sqlite"),
])
def test_the_store_url_says_which_backend(url: str, kind: str) -> None:
    assert store_kind(url) == kind


def test_placeholders_are_numbered_for_postgresql() -> None:
    assert numbered("SELECT ? WHERE a = ? AND b IN (?, ?)") == "SELECT $1 WHERE a = $2 AND b IN ($3, $4)"


async def test_an_unreachable_postgresql_is_a_storage_fault(unused_tcp_port: int) -> None:
    with pytest.raises(OSError) as err:
        await open_store(f"postgresql://postgres@127.0.0.1:{unused_tcp_port}/nothing")
    assert is_storage_error(err.value)
