"""What a cluster node checks of the database before it serves, on a real PostgreSQL: its clock against the
database's, its secret against the cluster's key check; and what `doctor` says of both and of PUBLIC's CONNECT."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from gateway.cli.doctor import database_facts
from gateway.runtime import cluster as cluster_module
from gateway.runtime.cluster import Cluster, ClusterRefused
from gateway.store import open_store
from gateway.store.command_seal import key_check

SECRET = b"cluster-secret-for-the-checks-0123456789"


async def nothing(_session_id: str) -> None:
    return None


@pytest.mark.parametrize(("off", "refused"), [(0.0, False), (4.0, False), (30.0, True), (-30.0, True)])
async def test_a_node_whose_clock_is_off_the_databases_refuses_to_serve(pg_url: str, off: float, refused: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = await open_store(pg_url, cluster_secret=SECRET)
    real = time.time
    monkeypatch.setattr(cluster_module.time, "time", lambda: real() + off)
    node = Cluster(store, "n1/abc", 15.0, nothing, secret=SECRET)
    try:
        if refused:
            with pytest.raises(ClusterRefused, match=r"clock is 30.* the database's .*NTP"):
                await node.prepare()
        else:
            await node.prepare()
            assert node.clock_fault is None
    finally:
        await store.close()


def test_doctor_says_what_the_database_says_of_this_node(pg_url: str) -> None:
    facts, problems = database_facts(pg_url, SECRET.decode())
    assert problems == []
    assert any("PUBLIC has CONNECT" in f for f in facts), facts  # a fresh database: every role may connect
    assert any(f.startswith("clock:") for f in facts), facts

    async def revoke_and_serve() -> str:
        admin = await asyncpg.connect(pg_url)
        try:
            database = await admin.fetchval("SELECT current_database()")
            await admin.execute(f'REVOKE CONNECT ON DATABASE "{database}" FROM PUBLIC')
            store = await open_store(pg_url, cluster_secret=SECRET)
            await Cluster(store, "n1/abc", 15.0, nothing, secret=SECRET).prepare()  # writes the key check
            await store.close()
            return str(await admin.fetchval("SELECT check_value FROM cluster_key"))
        finally:
            await admin.close()

    assert asyncio.run(revoke_and_serve()) == key_check(SECRET)
    facts, problems = database_facts(pg_url, SECRET.decode())
    assert not any("PUBLIC" in f for f in facts) and "cluster_secret: the cluster's" in facts, facts
    facts, _ = database_facts(pg_url, "another-cluster-secret-0123456789abcdef")
    assert any("not the one the cluster's nodes last used" in f for f in facts), facts
