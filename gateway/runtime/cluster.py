"""This gateway as a node of a cluster (docs/architecture.md: Cluster): the leases it holds, and its link to the other
nodes.

On a PostgreSQL store every `serve` is a node. A session's agent runs only on the holder of its lease; the holder
renews it every third of `lease_ttl`, and a lease it could not renew is lost: its agent is stopped without another
write (the database would refuse them: fencing). Commands for a session another node holds are forwarded to it.
On SQLite the gateway is the only node: it holds every lease, and nothing is forwarded or renewed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import agent_failed
from ..store import StoreBase
from ..store.command_seal import CLOCK_SLACK, key_check
from . import reaper
from .forwarding import Forwarder, ForwardFailed, Handler, TargetGone
from .workspace import within

if TYPE_CHECKING:  # the PostgreSQL store (asyncpg) is loaded only when a cluster opens one
    from ..store.postgres import PostgresStore

log = logging.getLogger(__name__)


class HeldElsewhere(Exception):
    def __init__(self, node: str) -> None:
        super().__init__(f"held by node {node}")
        self.node = node


def node_name(configured: str | None) -> str:
    """The node's id and this process's incarnation: `--node-id` (default: the host name) and a random part, so a
    restarted node, or an old process of it that was frozen, is never taken for the current one."""
    return f"{configured or socket.gethostname()}/{uuid.uuid4().hex[:8]}"


class ClusterRefused(RuntimeError):
    """This node must not serve in this cluster (another cluster_secret than its running nodes', a clock far off):
    one line saying what to change."""


class Cluster:
    def __init__(self, store: StoreBase, node: str, lease_ttl: float,
                 on_lost: Callable[[str], Awaitable[None]], roots: Mapping[str, list[str]] | None = None,
                 secret: bytes = b"", forward_timeout: float = 30.0) -> None:
        self.store: PostgresStore | None = None
        if store.kind == "postgresql":  # only then was the PostgreSQL store's module (asyncpg) loaded
            from ..store.postgres import PostgresStore

            self.store = store if isinstance(store, PostgresStore) else None
        self.enabled = self.store is not None
        self.node = node
        self.lease_ttl = lease_ttl
        self.on_lost = on_lost
        self.held: dict[str, int] = {}  # session id -> the epoch of its lease held here
        self.forwarder: Forwarder | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._lost: set[asyncio.Task[None]] = set()
        self.lease_failure: str | None = None  # the last renewal's fault, for /healthz
        self.clock_fault: str | None = None  # the last clock check's, for /healthz
        self.roots = dict(roots or {})  # where this node may run sessions: {"*": [...], owner: [...]}
        self.secret = secret  # seals the commands this node forwards, and checks those sent to it
        self.forward_timeout = forward_timeout  # how long a forwarded command may wait for its node to take it

    async def prepare(self) -> None:
        """Before recovery: this node is registered, and the leases of nodes that ran on this machine and died (this
        gateway before a `kill -9`, say) are ended, so what they held is recovered now, not after `lease_ttl`."""
        if self.store is None:
            return
        await self._check_clock()
        await self._prove_secret()
        pid = os.getpid()
        await self.store.leases.register_node(self.node, pid, reaper.process_start(pid), reaper.boot_id(), self.roots)
        for node in await self.store.leases.holders():
            if node != self.node and await self._dead_here(node):
                ended = await self.store.leases.release_all(node)
                log.info("node %s ran on this machine and is gone: its %d lease(s) ended", node, ended)

    async def _prove_secret(self) -> None:
        """The cluster's key check value is this node's (`command_seal.key_check`), or is written now; another one
        refuses the start while a node that wrote it runs (it would refuse every command this node seals, and this
        node every one it sealed). With none running, the secret was changed on purpose: this node's is the
        cluster's from now on."""
        assert self.store is not None
        mine = key_check(self.secret)
        await self.store.write("INSERT INTO cluster_key (id, check_value, node, set_at) VALUES (1, ?, ?, ?) "
                               "ON CONFLICT (id) DO NOTHING", (mine, self.node, time.time()))
        row = await self.store.fetchone("SELECT check_value, node FROM cluster_key WHERE id = 1")
        if row is None or hmac.compare_digest(str(row[0]), mine):
            return
        running = [name for name, _ in await self.store.leases.live_nodes(self.lease_ttl) if name != self.node]
        if running:
            raise ClusterRefused(
                f"cluster_secret is not the one the running node(s) {', '.join(running[:3])} use (its key check "
                "differs): give this node the cluster's cluster_secret")
        await self.store.write("UPDATE cluster_key SET check_value = ?, node = ?, set_at = ? WHERE id = 1",
                               (mine, self.node, time.time()))
        log.warning("node %s: cluster_secret differs from the one node %s last used, and no node runs: this node's "
                    "is the cluster's from now on (commands sealed with the old one are refused)", self.node, row[1])

    async def _check_clock(self) -> None:
        """This node's clock is within `CLOCK_SLACK` of the database's: commands are sealed to expire, and a node
        whose clock is far behind would take expired ones for fresh (one far ahead, fresh ones for expired)."""
        assert self.store is not None
        row = await self.store.fetchone("SELECT extract(epoch from clock_timestamp())")
        off = time.time() - float(row[0]) if row else 0.0
        self.clock_fault = None if abs(off) <= CLOCK_SLACK else (
            f"this node's clock is {abs(off):.1f} s {'ahead of' if off > 0 else 'behind'} the database's (at most "
            f"{CLOCK_SLACK:g} s): set it right (NTP)")
        if self.clock_fault is not None:
            raise ClusterRefused(self.clock_fault)

    async def start(self, run_forwarded: Handler) -> None:
        if self.store is None:
            return
        self.forwarder = Forwarder(self.store, self.node, run_forwarded, self.secret,
                                   claim_timeout=self.forward_timeout)
        await self.forwarder.start()
        self._renewing = asyncio.ensure_future(self._renew_forever())

    async def close(self, keep: frozenset[str] = frozenset()) -> None:
        """Hand every lease back at once (a clean stop: no node waits for expiry), stop forwarding. `keep`: sessions
        whose agents stay running in their hosts for this node's next incarnation: their leases are left to expire
        (no other node starts a second agent for them meanwhile)."""
        if self.store is None:
            return
        if self._renewing is not None:
            self._renewing.cancel()
        if self.forwarder is not None:
            await self.forwarder.close()
        with contextlib.suppress(Exception):
            if keep:
                for session_id, epoch in self.held.items():
                    if session_id not in keep:
                        await self.store.leases.release(session_id, self.node, epoch)
            else:
                await self.store.leases.release_all(self.node)
            await self.store.leases.gone(self.node)
        self.held.clear()

    # -- leases --------------------------------------------------------------------------------------------
    async def acquire(self, session_id: str) -> None:
        """Hold the session's lease (taking it if free or expired); HeldElsewhere names the node that holds it."""
        if self.store is None or session_id in self.held:
            return
        lease = await self.store.leases.acquire(session_id, self.node, self.lease_ttl)
        if lease is None:
            holder = await self.store.leases.holder(session_id)
            if holder is not None and await self._dead_here(holder.node):  # a crashed process on this machine
                await self.store.leases.end(session_id, holder.node)
                holder = None
            if holder is None:  # it expired (or was ended) just now: try once more
                lease = await self.store.leases.acquire(session_id, self.node, self.lease_ttl)
            if lease is None:
                raise HeldElsewhere(holder.node if holder else "?")
        self.held[session_id] = lease.epoch

    async def take_back(self, session_id: str) -> None:
        """Hold the session's lease, ending one an earlier incarnation of this same node holds (its agent is kept
        running in a host that this incarnation attaches to): a new fencing token, so the earlier one can write
        nothing more. HeldElsewhere when another node holds it."""
        try:
            await self.acquire(session_id)
        except HeldElsewhere as held:
            if self.store is None or held.node.split("/")[0] != self.node.split("/")[0]:
                raise
            await self.store.leases.end(session_id, held.node)
            await self.acquire(session_id)

    async def release(self, session_id: str) -> None:
        epoch = self.held.pop(session_id, None)
        if self.store is not None and epoch is not None:
            with contextlib.suppress(Exception):
                await self.store.leases.release(session_id, self.node, epoch)

    async def holder(self, session_id: str) -> str | None:
        """The other node that holds the session's unexpired lease, if any (None: free, or held here)."""
        if self.store is None or session_id in self.held:
            return None
        lease = await self.store.leases.holder(session_id)
        if lease is None or lease.node == self.node or await self._dead_here(lease.node):
            return None
        return lease.node

    async def running_elsewhere(self, session_ids: list[str]) -> set[str]:
        """Those of the sessions whose agent runs on another node (one read for a whole list)."""
        if self.store is None:
            return set()
        held = await self.store.leases.held([sid for sid in session_ids if sid not in self.held])
        running = {node for node in set(held.values()) if node != self.node and not await self._dead_here(node)}
        return {sid for sid, node in held.items() if node in running}  # each node looked at once, not per session

    async def node_for(self, owner: str, cwd: str) -> str | None:
        """Another live node whose workspace roots hold `cwd` for this owner: where a session this node may not run
        (its workspace is not one of this node's) runs instead. None when no such node is up."""
        if self.store is None:
            return None
        for node, roots in await self.store.leases.live_nodes(self.lease_ttl):
            if node == self.node or await self._dead_here(node):
                continue
            if any(within(Path(cwd), Path(root)) for root in roots.get(owner, roots.get("*", []))):
                return node
        return None

    async def _alive(self, node: str) -> bool:
        assert self.store is not None
        seen = {name for name, _ in await self.store.leases.live_nodes(self.lease_ttl)}
        return node in seen and not await self._dead_here(node)

    async def _dead_here(self, node: str) -> bool:
        """A node whose process ran on this machine (this boot) and is gone — a gateway restarted after `kill -9`,
        say: its leases need not be waited out. Nodes elsewhere are known dead only by their leases' expiry."""
        assert self.store is not None
        process = await self.store.leases.node_process(node)
        if process is None:
            return False
        pid, start, boot = process
        return boot is not None and boot == reaper.boot_id() and (
            start is None or reaper.process_start(pid) != start)

    async def _renew_forever(self) -> None:
        assert self.store is not None
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            held = dict(self.held)
            try:
                await self.store.leases.seen(self.node)
                kept = await self.store.leases.renew(self.node, held, self.lease_ttl)
                with contextlib.suppress(ClusterRefused):  # said by /healthz: this node's sessions go on
                    await self._check_clock()
            except Exception as exc:
                self.lease_failure = f"renewing leases failed: {exc}"
                log.warning("node %s: %s", self.node, self.lease_failure)
                continue  # they may still be held: the next round tries again before they expire
            self.lease_failure = None
            for session_id in set(held) - kept:
                if self.held.get(session_id) == held[session_id]:
                    del self.held[session_id]
                    log.warning("node %s lost the lease of session %s: stopping its agent here", self.node,
                                session_id, extra={"session_id": session_id})
                    task = asyncio.ensure_future(self.on_lost(session_id))
                    self._lost.add(task)
                    task.add_done_callback(self._lost.discard)

    # -- forwarding ------------------------------------------------------------------------------------------
    async def forward(self, node: str, session_id: str, agent: str, request: dict[str, Any],
                      placed: bool = False) -> Any:
        """Run a command on the node holding the session; its answer or its error, as it gave them. If that node
        stops holding the session before it answers (it died, and its agent with it), the caller is told as of an
        agent that exited mid-call: -32015, the session needing a resume."""
        assert self.forwarder is not None

        async def still_there() -> bool:
            if await self.holder(session_id) == node:
                return True
            # sent for its workspaces (it takes the session up when it runs the command): alive is enough
            return placed and await self._alive(node)

        try:
            return await self.forwarder.call(node, request, still_there)
        except TargetGone:
            raise agent_failed(session_id, agent, f"node {node}, which ran the agent of session {session_id}, "
                               f"stopped before it answered {request.get('method')}; the session is kept: resume "
                               "it to continue", None, True) from None
        except ForwardFailed as failed:
            raise agent_failed(session_id, agent, f"session {session_id}: {failed}", None, False) from None
