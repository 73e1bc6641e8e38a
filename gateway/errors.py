"""The gateway's JSON-RPC error codes (DESIGN §5) and the one exception that carries them to clients."""

from __future__ import annotations

from typing import Any

# The standard JSON-RPC codes are the ACP side's; the gateway adds its own beside them.
from acp.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR

__all__ = ["ALREADY_TERMINAL", "BUSY", "INTERNAL_ERROR", "INVALID_PARAMS", "INVALID_REQUEST", "LIMIT_EXCEEDED",
           "METHOD_NOT_FOUND", "NOT_FOUND", "NOT_RESUMABLE", "PARSE_ERROR", "RESYNC_REQUIRED", "UNAUTHORIZED",
           "WORKSPACE_MISSING", "GatewayError", "not_found"]

UNAUTHORIZED = -32001
NOT_FOUND = -32002
ALREADY_TERMINAL = -32009
BUSY = -32010
WORKSPACE_MISSING = -32011
RESYNC_REQUIRED = -32012
NOT_RESUMABLE = -32013
LIMIT_EXCEEDED = -32014


class GatewayError(Exception):
    """An error the client should see as is: a code, a message saying what to do, and data."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def not_found(session_id: str) -> GatewayError:
    # Foreign sessions answer exactly like missing ones: owners never learn what others have.
    return GatewayError(NOT_FOUND, f"session {session_id} not found", {"session_id": session_id})
