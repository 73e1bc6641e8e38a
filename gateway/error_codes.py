"""The gateway's JSON-RPC error codes, bare: the wire's vocabulary, each code defined once, for both sides of it.

The server's errors (gateway/errors.py) give each code its message and `data` shape; the clients (gateway/clients/,
the CLI's wire-only verbs) compare answers with the same names. This module imports nothing but the ACP side's own
codes (acp/errors.py, the standard library only), so a client may import it and nothing of the server comes along.
The TypeScript client's copy (clients/typescript/src/codes.ts) is held equal to this one by
tests/gateway/test_errors.py.
"""

from __future__ import annotations

# The standard JSON-RPC codes, and the limit code both sides share, are the ACP side's; the gateway adds its own.
from acp.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, LIMIT_EXCEEDED, METHOD_NOT_FOUND, PARSE_ERROR

__all__ = [
    "AGENT_FAILED", "ALREADY_TERMINAL", "BUSY", "CONFIG_REFUSED", "GIT_REFUSED", "INTERNAL_ERROR", "INVALID_PARAMS",
    "INVALID_REQUEST", "LIMIT_EXCEEDED", "METHOD_NOT_FOUND", "NOT_FOUND", "NOT_RESUMABLE", "PARSE_ERROR",
    "RESYNC_REQUIRED", "STORAGE_FAILED", "UNAUTHORIZED", "WORKSPACE_MISSING",
]

UNAUTHORIZED = -32001
NOT_FOUND = -32002
ALREADY_TERMINAL = -32009  # "treat as success": a second cancel, a permission or question already answered
BUSY = -32010
WORKSPACE_MISSING = -32011
RESYNC_REQUIRED = -32012
NOT_RESUMABLE = -32013
AGENT_FAILED = -32015  # the agent answered the turn with an error, or exited during it
STORAGE_FAILED = -32016  # the gateway's store refused a write (disk full, I/O error): nothing acknowledged is lost
CONFIG_REFUSED = -32017  # a configuration value the agent does not offer, of the wrong type, or that it refused
GIT_REFUSED = -32018  # git could not do it for the session: no repository, a merge's conflicts, a rewind refused
