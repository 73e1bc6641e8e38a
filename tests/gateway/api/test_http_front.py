"""Which stack serves a connection on the gateway's port (gateway/api/http_front.py), FR-1 to FR-4 by table."""

from __future__ import annotations

import pytest

from gateway.api.http_front import MAX_HEAD, MAX_REQUEST_LINE, Stack, stack_for

UPGRADE = b"GET /acp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"


@pytest.mark.parametrize(("head", "stack"), [
    (b"", Stack.MORE),  # FR-1
    (b"POST /ac", Stack.MORE),
    (b"x" * MAX_REQUEST_LINE, Stack.WEBSOCKETS),  # no request line within the bound: websockets refuses it
    (b"POST /acp HTTP/1.1\r\nHost: x\r\nX-a: ", Stack.MORE),  # FR-1: the whole head first (a slow one times out)
    (b"POST /acp HTTP/1.1\r\nHost: x\r\n\r\n{", Stack.AIOHTTP),  # FR-2
    (b"DELETE /acp HTTP/1.1\r\n\r\n", Stack.AIOHTTP),
    (b"PUT /anything HTTP/1.1\r\n\r\n", Stack.AIOHTTP),  # aiohttp answers it (404, 405)
    (b"POST /acp HTTP/1.1\r\n" + b"X: y\r\n" * (MAX_HEAD // 6), Stack.WEBSOCKETS),  # a head that never ends
    (b"GET /acp HTTP/1.1\r\nHost: x\r\n", Stack.MORE),  # FR-3 waits for the headers
    (b"GET /acp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n", Stack.AIOHTTP),
    (b"GET /acp?token=t HTTP/1.1\r\nHost: x\r\n\r\n", Stack.AIOHTTP),
    (b"HEAD /acp HTTP/1.1\r\nHost: x\r\n\r\n", Stack.AIOHTTP),
    (UPGRADE, Stack.WEBSOCKETS),  # FR-4
    (UPGRADE.replace(b"Upgrade: websocket", b"upgrade:websocket"), Stack.WEBSOCKETS),
    (b"GET /rpc HTTP/1.1\r\n", Stack.WEBSOCKETS),  # other paths: at once, without the headers
    (b"GET / HTTP/1.1\r\n", Stack.WEBSOCKETS),
    (b"GET /acpx HTTP/1.1\r\n", Stack.WEBSOCKETS),
    (b"GET /acp HTTP/1.1\r\n" + b"X: y\r\n" * (MAX_HEAD // 6), Stack.WEBSOCKETS),  # endless headers
    (b"BREW /pot\r\n", Stack.WEBSOCKETS),  # not HTTP/1.x: websockets refuses it
    (b"GET /acp HTTP/2\r\n\r\n", Stack.WEBSOCKETS),
])
def test_which_stack_serves_a_connection(head: bytes, stack: Stack) -> None:
    assert stack_for(head) is stack
