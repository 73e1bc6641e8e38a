"""How both API edges answer a call that failed: an exception as the JSON-RPC error a client is sent, one rule for both.

`/rpc` (gateway.api.rpc) and `/acp` (gateway.api.acp_server.connection) answer through here. A `GatewayError` is
what the client must know: it is answered as it is (its code, its message, written for the client, and its data).
No other exception's text ever reaches a client: `gateway.errors.unexpected` logs it and answers a fault of the store
as -32016, a write another node fenced off as -32013, and anything else (a bug) as -32603 whose only data is the
`error_id` its traceback is logged under, for the client to quote. A cancelled call is never answered here: its
`CancelledError` is no `Exception`, and goes on up.

Where the edges differ, a client can tell (docs/architecture.md: Errors): `/acp` answers a refused configuration
value (-32017) as -32602, ACP having no code of its own for it (`gateway.api.acp_server.protocol.acp_error_code`,
its rule E1).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from ..errors import GatewayError, unexpected


def failure(exc: Exception, log: logging.Logger, what: str) -> GatewayError:
    """The error a client is answered for `exc`, which its call raised; anything but a `GatewayError` is logged
    (`what` names the call there)."""
    if isinstance(exc, GatewayError):
        return exc
    return unexpected(log, what, exc)


def error_object(code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error object: `data` only when there is some."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error


def error_response(msg_id: int | str | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response to the request `msg_id` (None: a request whose id could not be read)."""
    return {"jsonrpc": "2.0", "id": msg_id, "error": error_object(code, message, data)}


def error_frame(msg_id: int | str | None, code: int, message: str, data: Any = None) -> bytes:
    """`error_response` as the text frame it is sent in."""
    return orjson.dumps(error_response(msg_id, code, message, data))


def answer_frame(answer: Any, log: logging.Logger) -> bytes:
    """A response (or a batch of them) as its text frame. A result JSON cannot carry (a string that is no UTF-8) is a
    bug of the method's: its caller gets the -32603 with the error id, never a silence it would wait on forever."""
    try:
        return orjson.dumps(answer)
    except TypeError as exc:
        if isinstance(answer, list):
            return b"[" + b",".join(answer_frame(one, log) for one in answer) + b"]"
        error = unexpected(log, f"the answer to request {answer.get('id')!r} could not be written as JSON", exc)
        return error_frame(answer.get("id"), error.code, error.message, error.data)

