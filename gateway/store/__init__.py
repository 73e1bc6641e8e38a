"""The durable store (docs/architecture.md: The store and the journal, Cluster): SQLite by default, PostgreSQL for a
cluster; see `base` for the rules."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

# The package's names load their modules at first use, not when the package is imported: `acp-gateway hosts` reads
# a store URL's kind with the functions below, without the store (aiosqlite, the repositories).
if TYPE_CHECKING:
    from .base import StoreBase, StoreInUse
    from .journal import JournalEntry, JournalWriter, PruneGoal, journal_entries, journal_frames, journal_rows
    from .migrations import MIGRATIONS
    from .repos import REPLAY_PAGE
    from .rows import (
        ConfigRow,
        EventGroup,
        EventRow,
        ExecutorRow,
        HistoryEntry,
        HostRow,
        JournalHead,
        SessionRow,
        StoredHistory,
        TaskRow,
    )
    from .sql import Tx
    from .sqlite import SqliteStore

    Store = SqliteStore  # the embedded default, opened with `Store.open(path)`

# name -> the module of this package that holds it
_HOMES = {
    "StoreBase": "base", "StoreInUse": "base",
    "JournalEntry": "journal", "JournalWriter": "journal", "PruneGoal": "journal", "journal_entries": "journal",
    "journal_frames": "journal", "journal_rows": "journal",
    "MIGRATIONS": "migrations", "REPLAY_PAGE": "repos",
    "ConfigRow": "rows", "EventGroup": "rows", "EventRow": "rows", "ExecutorRow": "rows", "HistoryEntry": "rows",
    "HostRow": "rows", "JournalHead": "rows", "SessionRow": "rows", "StoredHistory": "rows", "TaskRow": "rows",
    "Tx": "sql", "SqliteStore": "sqlite",
}


def __getattr__(name: str) -> Any:
    if name == "Store":
        name = "SqliteStore"
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = [
    "MIGRATIONS",
    "REPLAY_PAGE",
    "ConfigRow",
    "EventGroup",
    "EventRow",
    "ExecutorRow",
    "HistoryEntry",
    "HostRow",
    "JournalEntry",
    "JournalHead",
    "JournalWriter",
    "PruneGoal",
    "SessionRow",
    "SqliteStore",
    "Store",
    "StoreBase",
    "StoreInUse",
    "StoredHistory",
    "TaskRow",
    "Tx",
    "journal_entries",
    "journal_frames",
    "journal_rows",
    "open_store",
    "redacted",
    "store_kind",
]


def store_kind(url: str) -> str:
    """`postgresql` for a `postgresql://` (or `postgres://`) URL; `sqlite` for a path or `sqlite:///path`."""
    return "postgresql" if url.startswith(("postgresql://", "postgres://")) else "sqlite"


def redacted(url: str) -> str:
    """The store URL as logs and errors may show it: without a password."""
    if store_kind(url) != "postgresql":
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def sqlite_path(url: str) -> Path:
    return Path(url[len("sqlite://"):]) if url.startswith("sqlite://") else Path(url)


async def open_store(url: str, max_bytes: int = 0, node: str | None = None,
                     journal_synchronous_commit: bool = True, cluster_secret: bytes = b"") -> StoreBase:
    """Open (creating and migrating) the store `url` names; on PostgreSQL, writing as `node` (fenced by leases), its
    journal commits waiting for the WAL flush unless `journal_synchronous_commit` is false, and its notifications
    carrying events sealed with `cluster_secret` (without one they only wake the other nodes)."""
    if store_kind(url) == "postgresql":
        from .postgres import PostgresStore

        return await PostgresStore.open(url, max_bytes=max_bytes, node=node,
                                        journal_synchronous_commit=journal_synchronous_commit,
                                        cluster_secret=cluster_secret)
    from .sqlite import SqliteStore

    return await SqliteStore.open(sqlite_path(url), max_bytes=max_bytes)
