"""The durable store (docs/architecture.md: The store and the journal, Cluster): SQLite by default, PostgreSQL for a
cluster; see `base` for the rules."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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
    return await SqliteStore.open(sqlite_path(url), max_bytes=max_bytes)
