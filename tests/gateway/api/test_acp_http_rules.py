"""`/acp`'s Streamable HTTP rules (HT-1…12) and where the gateway's frames go (ST-1…4), without I/O."""

from __future__ import annotations

import asyncio
from http import HTTPStatus

import orjson
import pytest

from gateway.api.acp_server.http_rules import (
    HttpAction,
    HttpRefusal,
    HttpRequest,
    decide_http,
    last_event_id,
    sse_event,
)
from gateway.api.acp_server.http_streams import HttpOutbox

JSON = "application/json"
SSE = "text/event-stream"


@pytest.mark.parametrize(("request_", "expected"), [
    (HttpRequest("POST", None, False, JSON, is_initialize=True), HttpAction.INITIALIZE),  # HT-1
    (HttpRequest("POST", None, False, JSON), "HT-2"),
    (HttpRequest("POST", "c", False, JSON), "HT-3"),
    (HttpRequest("POST", "c", True, "text/plain"), "HT-4"),
    (HttpRequest("POST", "c", True, None), "HT-4"),
    (HttpRequest("POST", "c", True, "application/json; charset=utf-8"), HttpAction.MESSAGE),  # HT-5
    (HttpRequest("GET", "c", True, accept="application/json"), "HT-6"),
    (HttpRequest("GET", None, False, accept=SSE), "HT-7"),
    (HttpRequest("GET", "c", False, accept=SSE), "HT-3"),
    (HttpRequest("GET", "c", True, accept="text/event-stream, */*"), HttpAction.STREAM),  # HT-8
    (HttpRequest("DELETE", "c", True), HttpAction.END),  # HT-10
    (HttpRequest("DELETE", None, False), "HT-3"),
    (HttpRequest("PATCH", "c", True), "HT-11"),
    (HttpRequest("POST", "c", True, JSON, body_bytes=1025), "HT-12"),
])
def test_what_a_request_means(request_: HttpRequest, expected: HttpAction | str) -> None:
    decided = decide_http(request_, max_body=1024)
    if isinstance(expected, HttpAction):
        assert decided is expected
    else:
        assert isinstance(decided, HttpRefusal) and decided.rule == expected


def test_refusals_say_what_to_do() -> None:
    refused = decide_http(HttpRequest("POST", "gone", False, JSON), 1024)
    assert isinstance(refused, HttpRefusal) and refused.status is HTTPStatus.NOT_FOUND
    assert "initialize again" in refused.text


@pytest.mark.parametrize(("value", "cursor"), [(None, None), ("", None), ("12", 12), (" 7 ", 7), ("-1", None),
                                                ("abc", None), ("9" * 19, None), ("²", None), ("١٢", None)])
def test_last_event_id(value: str | None, cursor: int | None) -> None:
    assert last_event_id(value) == cursor


def test_an_sse_event_carries_its_journal_id() -> None:
    assert sse_event(b'{"a":1}', 5) == b'id: 5\ndata: {"a":1}\n\n'
    assert sse_event(b'{"a":1}', None) == b'data: {"a":1}\n\n'


def frame(message: dict[str, object]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **message})


async def test_frames_go_to_the_stream_of_their_session() -> None:
    ended: list[str] = []
    outbox = HttpOutbox(1 << 20, ended.append)
    init = outbox.capture(0)
    outbox.send(frame({"id": 0, "result": {"protocolVersion": 1}}))  # ST-4
    assert orjson.loads(await init)["result"] == {"protocolVersion": 1}
    outbox.request_in({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {"sessionId": "s-1"}})
    outbox.send_many([
        frame({"method": "session/update", "params": {"sessionId": "s-1", "update": {},
                                                       "_meta": {"acpGateway": {"eventId": 41}}}}),  # ST-2
        frame({"id": 3, "method": "session/request_permission", "params": {"sessionId": "s-1"}}),
        frame({"id": 7, "result": {"stopReason": "end_turn"}}),  # ST-1
        frame({"id": 8, "result": {"sessions": []}}),  # ST-3
        frame({"id": None, "error": {"code": -32700, "message": "Parse error"}}),
    ])
    session, own = outbox.channel("s-1"), outbox.channel(None)
    assert [(i, orjson.loads(f).get("id")) for i, f in session.frames] == [(41, None), (None, 3), (None, 7)]
    assert [orjson.loads(f).get("id") for _, f in own.frames] == [8, None]
    # A stream resumed from a cursor keeps only the answers: updates come again from the journal, questions again
    # from their broker.
    assert [orjson.loads(f)["id"] for f in session.keep_answers()] == [7]
    assert not ended


async def test_what_waits_unread_is_bounded_in_bytes() -> None:
    ended: list[str] = []
    outbox = HttpOutbox(4096, ended.append)
    big = frame({"method": "session/update", "params": {"sessionId": "s", "update": {"x": "y" * 1000}}})
    outbox.send(big)
    outbox.send(big)
    assert outbox.full() and not ended
    draining = asyncio.ensure_future(outbox.drain())
    await asyncio.sleep(0)
    assert not draining.done()
    outbox.send_many([big] * 3)  # past the bound: the connection ends, and whoever waited goes on
    assert ended and "bytes waiting" in ended[0]
    await asyncio.wait_for(draining, 5)
    assert outbox.size() == 0
