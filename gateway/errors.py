"""The gateway's JSON-RPC errors (docs/architecture.md: Errors): each code (gateway/error_codes.py) with one fixed
`data` shape, and the exception that carries them to clients.

Every error a client can cause is raised through one of the constructors below, so a code always comes with
the same `data` keys (`ERROR_DATA` lists them; a table test holds each constructor to it). `-32603` is left
for real bugs: its only data is the `error_id` under which the log has the traceback.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import uuid
from typing import Any

from pydantic import ValidationError

from acp.models import field_path

# The codes themselves are the wire's (gateway/error_codes.py, which the clients import too); here each gets its
# `data` shape, its meaning and its constructor.
from .error_codes import (
    AGENT_FAILED,
    ALREADY_TERMINAL,
    BUSY,
    CONFIG_REFUSED,
    GIT_REFUSED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LIMIT_EXCEEDED,
    METHOD_NOT_FOUND,
    NOT_FOUND,
    NOT_RESUMABLE,
    PARSE_ERROR,
    RESYNC_REQUIRED,
    STORAGE_FAILED,
    UNAUTHORIZED,
    WORKSPACE_MISSING,
)

__all__ = [
    "AGENT_FAILED",
    "ALREADY_TERMINAL",
    "BUSY",
    "CONFIG_REFUSED",
    "ERROR_DATA",
    "ERROR_MEANINGS",
    "GIT_REFUSED",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LIMIT_EXCEEDED",
    "METHOD_NOT_FOUND",
    "NOT_FOUND",
    "NOT_RESUMABLE",
    "PARSE_ERROR",
    "RESYNC_REQUIRED",
    "STORAGE_FAILED",
    "UNAUTHORIZED",
    "WORKSPACE_MISSING",
    "GatewayError",
    "agent_failed",
    "already_terminal",
    "busy",
    "config_refused",
    "git_refused",
    "internal_error",
    "invalid_params",
    "is_storage_error",
    "limit_exceeded",
    "log_fault",
    "not_found",
    "not_resumable",
    "params_refused",
    "permission_not_found",
    "resync_required",
    "storage_failed",
    "subscription_not_found",
    "unexpected",
    "workspace_missing",
    "workspace_refused",
]

# code -> the shapes its `data` may have: the keys always present (a key whose value is unknown is null).
ERROR_DATA: dict[int, tuple[frozenset[str], ...]] = {
    INVALID_PARAMS: (frozenset({"field"}),),
    INTERNAL_ERROR: (frozenset({"error_id"}),),
    NOT_FOUND: (frozenset({"session_id"}), frozenset({"session_id", "request_id"}), frozenset({"subscription_id"})),
    ALREADY_TERMINAL: (frozenset({"session_id", "state"}),),
    BUSY: (frozenset({"session_id", "state"}),),
    WORKSPACE_MISSING: (frozenset({"session_id", "cwd"}), frozenset({"session_id", "cwd", "rule"})),
    RESYNC_REQUIRED: (frozenset({"reason", "head", "oldest"}),),
    NOT_RESUMABLE: (frozenset({"session_id", "state", "reason"}),),
    LIMIT_EXCEEDED: (frozenset({"limit", "name"}), frozenset({"limit", "name", "retry_after"})),
    AGENT_FAILED: (frozenset({"session_id", "agent", "agent_error", "needs_resume"}),),
    STORAGE_FAILED: (frozenset({"reason"}),),
    CONFIG_REFUSED: (frozenset({"session_id", "config_id", "value", "reason", "offered", "agent_error"}),),
    GIT_REFUSED: (frozenset({"session_id", "reason", "files"}),),
}

# code -> what it means, in one line (the OpenRPC document's errors; docs/api.md says the same at length)
ERROR_MEANINGS: dict[int, str] = {
    PARSE_ERROR: "Parse error: the frame is not JSON",
    INVALID_REQUEST: "Invalid request (or an empty or oversized batch)",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params: data.field names the param",
    INTERNAL_ERROR: "Internal error: a bug; data.error_id finds the traceback in the log",
    UNAUTHORIZED: "Unauthorized",
    NOT_FOUND: "Not found (another owner's ids too)",
    ALREADY_TERMINAL: "Already terminal: treat as success",
    BUSY: "Busy: a turn is running",
    WORKSPACE_MISSING: "Workspace missing or refused (data.rule)",
    RESYNC_REQUIRED: "Resync required: subscribe from task.session.list's event_cursor",
    NOT_RESUMABLE: "Not resumable",
    LIMIT_EXCEEDED: "A limit was reached",
    AGENT_FAILED: "The agent failed the turn",
    STORAGE_FAILED: "The store refused a write: free space, then retry",
    CONFIG_REFUSED: "The option or value is not offered, of the wrong type, or refused by the agent (data.offered)",
    GIT_REFUSED: "Git could not do it for the session (no repository, a merge's conflicts: data.files)",
}


class GatewayError(Exception):
    """An error the client should see as is: a code, a message saying what to do, and data."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def invalid_params(field: str, message: str) -> GatewayError:
    return GatewayError(INVALID_PARAMS, message, {"field": field})


def params_refused(exc: ValidationError, prefix: tuple[str, ...] = ()) -> GatewayError:
    """The first thing pydantic refused in a request's params, as -32602 naming its field by its dotted path
    (`prefix` first: where the validated object sits in the params)."""
    first = exc.errors()[0]
    where = ".".join(p for p in (*prefix, field_path(first["loc"])) if p) or "params"
    return invalid_params(where, f"Invalid params: {where}: {first['msg']}")


def internal_error(error_id: str) -> GatewayError:
    return GatewayError(INTERNAL_ERROR, f"Internal error: the gateway's log has the details under {error_id}",
                        {"error_id": error_id})


def not_found(session_id: str) -> GatewayError:
    # Foreign sessions answer exactly like missing ones: owners never learn what others have.
    return GatewayError(NOT_FOUND, f"session {session_id} not found", {"session_id": session_id})


def permission_not_found(session_id: str, request_id: str) -> GatewayError:
    return GatewayError(NOT_FOUND, f"permission request {request_id} not found in session {session_id}",
                        {"session_id": session_id, "request_id": request_id})


def subscription_not_found(subscription_id: str) -> GatewayError:
    return GatewayError(NOT_FOUND, f"subscription {subscription_id} not found", {"subscription_id": subscription_id})


def already_terminal(session_id: str, state: str, what: str | None = None) -> GatewayError:
    return GatewayError(ALREADY_TERMINAL, what or f"session {session_id} is already {state}",
                        {"session_id": session_id, "state": state})


def busy(session_id: str, state: str) -> GatewayError:
    return GatewayError(BUSY, f"session {session_id} is busy with a turn: wait for it to end, or cancel it "
                        f"(task.session.cancel_turn; acp-gateway cancel-turn {session_id})",
                        {"session_id": session_id, "state": state})


def workspace_missing(session_id: str | None, cwd: str) -> GatewayError:
    if session_id is None:
        message = f"workspace {cwd} does not exist: create it first"
    else:
        message = f"workspace {cwd} of session {session_id} no longer exists: restore the directory, then resume"
    return GatewayError(WORKSPACE_MISSING, message, {"session_id": session_id, "cwd": cwd})


def workspace_refused(session_id: str | None, cwd: str, rule: str, message: str) -> GatewayError:
    """A workspace that exists but may not be used (`rule` says which rule refused it)."""
    return GatewayError(WORKSPACE_MISSING, message, {"session_id": session_id, "cwd": cwd, "rule": rule})


def not_resumable(session_id: str, state: str | None, reason: str) -> GatewayError:
    """`reason` is the whole message: what happened and what the user can do next."""
    return GatewayError(NOT_RESUMABLE, reason, {"session_id": session_id, "state": state, "reason": reason})


def agent_failed(session_id: str | None, agent: str, message: str, agent_error: dict[str, Any] | None,
                 needs_resume: bool) -> GatewayError:
    """The agent answered the turn with an error (`agent_error`, its own error object), or exited during it."""
    return GatewayError(AGENT_FAILED, message, {"session_id": session_id, "agent": agent, "agent_error": agent_error,
                                                "needs_resume": needs_resume})


def is_storage_error(exc: BaseException) -> bool:
    """A fault of the disk under the store, as opposed to a bug: full, I/O error, read-only, gone."""
    if isinstance(exc, OSError):
        # ECONNREFUSED: the PostgreSQL server is not there (nothing else the gateway's store code connects to)
        return exc.errno in (errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT, errno.ECONNREFUSED)
    if isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError):
        text = str(exc).lower()
        return any(s in text for s in ("full", "disk i/o", "readonly", "unable to open", "no such file"))
    sqlstate = getattr(exc, "sqlstate", None)  # PostgreSQL (asyncpg's errors carry the SQLSTATE)
    if isinstance(sqlstate, str):
        # 53: insufficient resources (disk full), 08: connection, 57: operator intervention (shutdown),
        # 58: system error (I/O), 25006: a read-only transaction (a standby)
        return sqlstate[:2] in ("53", "08", "57", "58") or sqlstate == "25006"
    # asyncpg's errors of a connection the server ended carry no SQLSTATE: "connection is closed", and the protocol
    # confusion of asyncpg#1069 ("cannot switch to state 12") on the next use of an idle connection it ended
    return type(exc).__module__.startswith("asyncpg") and type(exc).__name__ in (
        "ConnectionDoesNotExistError", "InterfaceError", "InternalClientError")


def is_fenced(exc: BaseException) -> bool:
    """The database refused a write for a session another node of the cluster holds now (SQLSTATE AL001)."""
    return getattr(exc, "sqlstate", None) == "AL001"


def log_fault(log: logging.Logger, what: str, exc: BaseException) -> None:
    """A storage fault is the disk's, and a fenced write the cluster's doing, not bugs: one line. Anything else:
    the traceback."""
    if is_storage_error(exc):
        log.error("%s: the store refused a write: %s", what, exc)
    elif is_fenced(exc):
        log.warning("%s: %s", what, exc)
    else:
        log.error("%s", what, exc_info=exc)


def unexpected(log: logging.Logger, what: str, exc: BaseException) -> GatewayError:
    """What a client gets for an exception no handler turned into a GatewayError: a storage fault is -32016; a
    fenced write -32013 (the session moved to another node); anything else is a bug, -32603 with the id its
    traceback is logged under."""
    if is_storage_error(exc):
        log_fault(log, what, exc)
        return storage_failed(exc)
    if is_fenced(exc):
        log_fault(log, what, exc)
        return not_resumable(getattr(exc, "detail", None) or "", None,
                             f"{exc}: the session runs on another node now; ask again")
    error_id = uuid.uuid4().hex[:12]
    log_fault(log, f"{what} failed (error id {error_id})", exc)
    return internal_error(error_id)


def storage_failed(exc: BaseException | str) -> GatewayError:
    return GatewayError(STORAGE_FAILED, f"the gateway could not write its state ({exc}): free space (or fix the disk) "
                        "under its state directory, or raise store_max_bytes if it is set, then try again; "
                        "nothing it acknowledged was lost",
                        {"reason": str(exc)})


def config_refused(session_id: str, config_id: str, value: Any, reason: str, message: str, offered: list[str],
                   agent_error: dict[str, Any] | None = None) -> GatewayError:
    """A configuration change refused: `reason` is option_not_offered, value_not_offered, wrong_type or
    agent_refused (with the agent's own error); `offered` lists the option ids or values there are."""
    return GatewayError(CONFIG_REFUSED, message, {"session_id": session_id, "config_id": config_id, "value": value,
                                                  "reason": reason, "offered": offered, "agent_error": agent_error})


def limit_exceeded(limit: int, message: str, name: str, retry_after: float | None = None) -> GatewayError:
    """-32014: `name` is the limit's setting (or the fixed limit's name), `limit` its value; `retry_after` (seconds)
    when waiting is enough."""
    data: dict[str, Any] = {"limit": limit, "name": name}
    if retry_after is not None:
        data["retry_after"] = round(retry_after, 3)
    return GatewayError(LIMIT_EXCEEDED, message, data)


def resync_required(reason: str, message: str, *, head: int | None = None, oldest: int | None = None) -> GatewayError:
    return GatewayError(RESYNC_REQUIRED, message, {"reason": reason, "head": head, "oldest": oldest})


def git_refused(session_id: str, message: str, files: list[str] | None = None, reason: str = "git") -> GatewayError:
    """What git could not do for a session's files: `message` says why and what to do; `reason` which case it is
    (`no_repository`: its directory is in none; `no_checkpoint`: none is there yet, or not that one; `merge_refused`;
    `git`: git itself failed); `files`, those in the way (a merge's conflicts), else empty."""
    return GatewayError(GIT_REFUSED, message, {"session_id": session_id, "reason": reason,
                                               "files": list(files or [])})
