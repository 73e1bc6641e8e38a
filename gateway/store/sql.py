"""The SQL surface a repository needs of a store, as protocols: the repositories (`repos.py`, `leases.py`,
`commands.py`) are written against these, not against the stores that build them, so no store module imports back
the one that imports it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from .journal import PruneGoal
from .rows import EventGroup


class Tx(Protocol):
    """The statements of one transaction."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int: ...  # rows changed

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...


class Database(Protocol):
    """A store as its repositories use it: statements, one at a time or in a transaction."""

    kind: str  # "sqlite" or "postgresql"

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    async def write(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    def transaction(self) -> contextlib.AbstractAsyncContextManager[Tx]: ...

    def reclaim_soon(self) -> None: ...

    async def read_journal(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    def can_append_now(self) -> bool: ...

    def append_now(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]: ...

    async def append(self, group: EventGroup, prune: Mapping[str, PruneGoal] | None) -> dict[str, int]: ...

    async def prune(self, prune: Mapping[str, PruneGoal]) -> dict[str, int]: ...
