"""Session leases on a PostgreSQL store (docs/architecture.md: Cluster): which node runs a session's agent, until when,
in which epoch.

Every decision is one statement, judged on the database's clock (`now()`), so two nodes never disagree on who
holds a lease and their own clocks do not matter:
- acquire: a lease that is free, ended or expired is taken with epoch + 1; one's own unexpired lease is kept (same
  epoch); anyone else's unexpired lease is not taken (None). Of several nodes acquiring at once, exactly one wins.
- renew: only unexpired leases of this node, in the epoch it holds; what is not renewed is lost, and its agent
  must stop.
- release: ends the lease at once (SIGTERM hands leases back), keeping the row so epochs only grow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from .sql import Database


@dataclass(frozen=True)
class Lease:
    session_id: str
    node: str
    epoch: int
    expires_in: float  # seconds left, on the database's clock


class LeaseRepo:
    def __init__(self, store: Database) -> None:
        self.store = store

    async def acquire(self, session_id: str, node: str, ttl: float) -> Lease | None:
        async with self.store.transaction() as tx:  # a write (health follows it), one statement
            row = await tx.fetchone(
                "INSERT INTO leases VALUES (?, ?, 1, now() + ? * interval '1 second') "
                "ON CONFLICT (session_id) DO UPDATE SET node = excluded.node, expires_at = excluded.expires_at, "
                "epoch = CASE WHEN leases.node = excluded.node AND leases.expires_at > now() THEN leases.epoch "
                "ELSE leases.epoch + 1 END "
                "WHERE leases.node = excluded.node OR leases.expires_at <= now() "
                "RETURNING epoch, EXTRACT(EPOCH FROM expires_at - now())", (session_id, node, float(ttl)))
        return Lease(session_id, node, int(row[0]), float(row[1])) if row else None

    async def renew(self, node: str, held: Mapping[str, int], ttl: float) -> set[str]:
        """Renew this node's leases (session id → the epoch it holds); returns the ones still held."""
        if not held:
            return set()
        async with self.store.transaction() as tx:
            rows = await tx.fetchall(
                "UPDATE leases SET expires_at = now() + ? * interval '1 second' WHERE node = ? "
                "AND expires_at > now() AND session_id = ANY(?) RETURNING session_id, epoch",
                (float(ttl), node, list(held)))
        return {sid for sid, epoch in rows if held.get(sid) == int(epoch)}

    async def release(self, session_id: str, node: str, epoch: int) -> bool:
        return await self.store.write("UPDATE leases SET expires_at = now() WHERE session_id = ? AND node = ? "
                                      "AND epoch = ? AND expires_at > now()", (session_id, node, epoch)) == 1

    async def release_all(self, node: str) -> int:
        """Hand back every lease of this node at once (a clean shutdown): others need not wait for expiry."""
        return await self.store.write("UPDATE leases SET expires_at = now() WHERE node = ? AND expires_at > now()",
                                      (node,))

    async def register_node(self, node: str, pid: int, proc_start: int | None, boot_id: str | None,
                            roots: Mapping[str, list[str]]) -> None:
        await self.store.write("INSERT INTO nodes (node, pid, proc_start, boot_id, roots) VALUES (?, ?, ?, ?, ?) "
                               "ON CONFLICT (node) DO NOTHING",
                               (node, pid, proc_start, boot_id, orjson.dumps(dict(roots)).decode()))

    async def seen(self, node: str) -> None:
        """The node is alive (its renewal loop says so every round)."""
        await self.store.write("UPDATE nodes SET seen_at = now() WHERE node = ?", (node,))

    async def gone(self, node: str) -> None:
        """The node stops (cleanly): no one should send it anything from now on."""
        await self.store.write("UPDATE nodes SET seen_at = '-infinity' WHERE node = ?", (node,))

    async def live_nodes(self, within: float) -> list[tuple[str, dict[str, list[str]]]]:
        """(node, its workspace roots) of the nodes seen alive in the last `within` seconds."""
        rows = await self.store.fetchall("SELECT node, roots FROM nodes WHERE seen_at > now() - ? * "
                                         "interval '1 second' ORDER BY seen_at DESC", (float(within),))
        return [(node, orjson.loads(roots)) for node, roots in rows]

    async def node_process(self, node: str) -> tuple[int, int | None, str | None] | None:
        """(pid, start time, boot id) of a node's process, as it registered."""
        row = await self.store.fetchone("SELECT pid, proc_start, boot_id FROM nodes WHERE node = ?", (node,))
        return (int(row[0]), row[1], row[2]) if row else None

    async def held(self, session_ids: list[str]) -> dict[str, str]:
        """Session id → the node holding its unexpired lease, for those of `session_ids` that have one."""
        if not session_ids:
            return {}
        rows = await self.store.fetchall("SELECT session_id, node FROM leases WHERE session_id = ANY(?) AND "
                                         "expires_at > now()", (session_ids,))
        return {sid: node for sid, node in rows}

    async def holders(self) -> list[str]:
        """The nodes holding unexpired leases."""
        return [r[0] for r in await self.store.fetchall("SELECT DISTINCT node FROM leases WHERE expires_at > now()")]

    async def end(self, session_id: str, node: str) -> bool:
        """End a dead node's lease now (its process is gone: no need to wait for expiry)."""
        return await self.store.write("UPDATE leases SET expires_at = now() WHERE session_id = ? AND node = ? "
                                      "AND expires_at > now()", (session_id, node)) == 1

    async def holder(self, session_id: str) -> Lease | None:
        """The unexpired lease of the session, if any."""
        row = await self.store.fetchone("SELECT node, epoch, EXTRACT(EPOCH FROM expires_at - now()) FROM leases "
                                        "WHERE session_id = ? AND expires_at > now()", (session_id,))
        return Lease(session_id, row[0], int(row[1]), float(row[2])) if row else None
