"""What a Streamable HTTP request to `/acp` means, decided without I/O (the remote-transport RFD's HTTP mode).

`http_endpoint.py` performs what these rules decide; `http_streams.py` routes what the gateway sends into the
connection's event streams. The WebSocket rules (the token, a browser's Origin, the Host) come first and are shared.

Rows (tests/gateway/api/test_acp_http_rules.py holds them as a table):
  HT-1  POST without `Acp-Connection-Id`: an `initialize` request          -> a new connection; its answer is the
                                                                            response body, with `Acp-Connection-Id`
  HT-2  POST without `Acp-Connection-Id`: anything else                    -> 400, "initialize first"
  HT-3  a request naming a connection this gateway does not know, or another owner's -> 404 (initialize again)
  HT-4  POST whose body is not `application/json`                           -> 415
  HT-5  POST of one JSON-RPC message on a known connection                  -> 202; the message is the connection's
                                                                            (answers come on its event streams)
  HT-6  GET without `Accept: text/event-stream`                             -> 406
  HT-7  GET without `Acp-Connection-Id`                                     -> 400
  HT-8  GET with `Acp-Connection-Id` (and `Acp-Session-Id`)                 -> the connection's (or that session's)
                                                                            event stream; a later GET of the same
                                                                            stream takes over from the earlier one
  HT-9  GET of a session's stream with `Last-Event-ID: N`                   -> the session's updates after N first
                                                                            (resumption, ahead of the RFD)
  HT-10 DELETE with `Acp-Connection-Id`                                     -> 204; the connection ends (its
                                                                            sessions do not)
  HT-11 any other method                                                    -> 405
  HT-12 a body over the frame size limit                                    -> 413
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus

HEADER_CONNECTION_ID = "Acp-Connection-Id"
HEADER_SESSION_ID = "Acp-Session-Id"
EVENT_STREAM = "text/event-stream"
JSON = "application/json"


class HttpAction(Enum):
    INITIALIZE = "initialize"  # HT-1
    MESSAGE = "message"  # HT-5
    STREAM = "stream"  # HT-8, HT-9
    END = "end"  # HT-10


@dataclass(frozen=True)
class HttpRequest:
    """What the rules look at of a request (its body is looked at only for HT-1/HT-2: `is_initialize`)."""

    method: str
    connection_id: str | None
    connection_known: bool  # a connection of this gateway, and of the token's owner
    content_type: str | None = None
    accept: str | None = None
    body_bytes: int = 0
    is_initialize: bool = False


@dataclass(frozen=True)
class HttpRefusal:
    rule: str
    status: HTTPStatus
    text: str


def decide_http(request: HttpRequest, max_body: int) -> HttpAction | HttpRefusal:
    if request.method == "POST":
        if request.body_bytes > max_body:
            return HttpRefusal("HT-12", HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                               f"a message is at most {max_body} bytes (max_frame_bytes)")
        if (request.content_type or "").split(";")[0].strip().lower() != JSON:
            return HttpRefusal("HT-4", HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                               "POST one JSON-RPC message as Content-Type: application/json")
        if request.connection_id is None:
            if request.is_initialize:
                return HttpAction.INITIALIZE
            return HttpRefusal("HT-2", HTTPStatus.BAD_REQUEST, "no Acp-Connection-Id: POST an initialize request "
                               "first; its answer names the connection")
        if not request.connection_known:
            return _unknown()
        return HttpAction.MESSAGE
    if request.method in ("GET", "HEAD"):
        if EVENT_STREAM not in (request.accept or ""):
            return HttpRefusal("HT-6", HTTPStatus.NOT_ACCEPTABLE,
                               "GET /acp is the connection's event stream: send Accept: text/event-stream")
        if request.connection_id is None:
            return HttpRefusal("HT-7", HTTPStatus.BAD_REQUEST, "GET /acp needs the Acp-Connection-Id that "
                               "initialize answered (or a WebSocket upgrade)")
        if not request.connection_known:
            return _unknown()
        return HttpAction.STREAM
    if request.method == "DELETE":
        if request.connection_id is None or not request.connection_known:
            return _unknown()
        return HttpAction.END
    return HttpRefusal("HT-11", HTTPStatus.METHOD_NOT_ALLOWED, "/acp takes POST, GET (event streams), DELETE and "
                       "WebSocket upgrades")


def _unknown() -> HttpRefusal:
    return HttpRefusal("HT-3", HTTPStatus.NOT_FOUND, "no such connection (it ended, the gateway restarted, or it is "
                       "not yours): POST initialize again, then session/resume or session/load")


def last_event_id(value: str | None) -> int | None:
    """HT-9: the cursor a `Last-Event-ID` names; None when absent or not a journal id (a stream without ids so far)."""
    if value is None or not (value.strip().isascii() and value.strip().isdigit()) or len(value.strip()) > 18:
        return None  # `isdigit` alone takes `²` and other digits `int` does not
    return int(value.strip())


def sse_event(frame: bytes, event_id: int | None) -> bytes:
    """One JSON-RPC message as a server-sent event (`id:` the journal id of a session's update)."""
    head = b"id: %d\n" % event_id if event_id is not None else b""
    return head + b"data: " + frame + b"\n\n"
