"""JSON-RPC and ACP error codes, and the exceptions the client side raises."""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
REQUEST_CANCELLED = -32800
AUTH_REQUIRED = -32000
RESOURCE_NOT_FOUND = -32002
# A limit was reached (the gateway's API says the same with this code): a peer's requests past its budget.
LIMIT_EXCEEDED = -32014


class AcpError(Exception):
    """Base of every error raised by the ACP client side."""


class RpcError(AcpError):
    """A JSON-RPC error object answered by the peer (or to be answered to it)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err

    @classmethod
    def from_dict(cls, err: Any) -> RpcError:
        if not isinstance(err, dict):
            return cls(INTERNAL_ERROR, f"malformed error object: {err!r}")
        code = err.get("code")
        message = err.get("message")
        return cls(
            code if isinstance(code, int) else INTERNAL_ERROR,
            message if isinstance(message, str) else repr(message),
            err.get("data"),
        )


class TransportError(AcpError):
    """The agent process is gone or its pipe closed: no answer will ever come."""


class RequestTimeout(TransportError):
    """The agent did not answer in time. Treated like a transport failure by the restore rules."""


class ProtocolVersionError(AcpError):
    """The agent answered `initialize` with a protocol version this client does not speak."""
