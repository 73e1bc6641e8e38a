"""The gateway's JSON-RPC error codes (DESIGN §5) and the one exception that carries them to clients."""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
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
