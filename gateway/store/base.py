"""The store's interface: repositories over one backend, SQLite (embedded, the default) or PostgreSQL (a cluster).

Rules of this package (`base`, `sqlite`, `postgres`, `migrations`, `pg_migrations`, `rows`, `journal`, `repos`):
- All SQL of the gateway lives here; callers see repositories and row dataclasses.
- The repositories' SQL is written once, in the dialect both engines speak (`?` placeholders, which the PostgreSQL
  backend numbers); what differs (the journal's writes, connections, health, schema) is each backend's own.
- A write returns only after it is committed: what the gateway acknowledged survives `kill -9`.
- Multi-statement changes go through `transaction()`.
- Schema changes are numbered migrations, per backend.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .journal import JournalEntry, PruneGoal
from .repos import (
    CancelRepo,
    ConfigRepo,
    EventRepo,
    ExecutorRepo,
    HistoryRepo,
    HostRepo,
    InstanceRepo,
    PermissionRepo,
    SessionRepo,
    TaskRepo,
    WorkspaceRepo,
)
from .rows import EventGroup
from .sql import Tx


class StoreInUse(RuntimeError):
    """Another gateway serves this store, and this one may not share it."""


class StoreBase(abc.ABC):
    """What the repositories need of a backend, and the repositories themselves."""

    kind = ""  # "sqlite" or "postgresql": shown in /healthz and the logs
    # Other processes may write the journal (nodes on one PostgreSQL): event ids are given at commit (`append`
    # renumbers a group whose provisional ids another writer took), and `listen` says when they wrote.
    shared_journal = False

    def __init__(self) -> None:
        self.tasks = TaskRepo(self)
        self.sessions = SessionRepo(self)
        self.executors = ExecutorRepo(self)
        self.history = HistoryRepo(self)
        self.cancels = CancelRepo(self)
        self.events = EventRepo(self)
        self.permissions = PermissionRepo(self)
        self.instances = InstanceRepo(self)
        self.configs = ConfigRepo(self)
        self.hosts = HostRepo(self)
        self.workspaces = WorkspaceRepo(self)

    # -- statements ----------------------------------------------------------------------------------------
    @abc.abstractmethod
    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    @abc.abstractmethod
    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def read_journal(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A read of the event journal (a replay, a slow subscriber's next page): a backend may run it beside the
        other statements rather than among them."""
        return await self.fetchall(sql, params)

    @abc.abstractmethod
    async def write(self, sql: str, params: Sequence[Any] = ()) -> int:
        """One statement in a transaction of its own; the rows it changed."""

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractAsyncContextManager[Tx]: ...

    # -- the event journal ---------------------------------------------------------------------------------
    def can_append_now(self) -> bool:
        """True when `append_now` may write a group at once, synchronously (SQLite with the store free)."""
        return False

    def append_now(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]:
        raise RuntimeError(f"the {self.kind} store has no synchronous append: use append")

    @abc.abstractmethod
    async def append(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]:
        """Commit a group (one journal row per owner) and prune the owners named, in one transaction. Returns the
        bytes pruned per owner."""

    @abc.abstractmethod
    async def prune(self, prune: Mapping[str, PruneGoal]) -> dict[str, int]: ...

    @abc.abstractmethod
    async def listen(self, on_commit: Callable[[str, int, list[JournalEntry] | None], None]) -> None:
        """Call `on_commit(owner, last_id, entries)` when another process commits events (a wake-up only: it may
        come late, twice, or not at all). `entries` are the committed events themselves, (id, session id, frame) in id
        order, when they fitted in the notification; else None, and the journal has them. A store only this process
        writes has nothing to say."""

    # -- upkeep ----------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def health(self) -> str | None:
        """None while writes succeed; else the fault, until a write succeeds again."""

    @abc.abstractmethod
    async def claim(self) -> None:
        """Claim the store for this gateway process, or raise StoreInUse."""

    @abc.abstractmethod
    def reclaim_soon(self) -> None:
        """Give the space deletes freed back (SQLite: to the file system, a step at a time)."""

    @abc.abstractmethod
    async def close(self) -> None: ...
