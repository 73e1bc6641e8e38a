"""Bad input and owner isolation against a real gateway: every class of bad frame, every method."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from gateway.api.server import host_allowed, origin_allowed
from gateway.clients.client import GatewayClient, RpcCallError
from tests.gateway_harness import ALICE, BOB, EventLog, GatewayProcess, two_owner_gateway


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gw = two_owner_gateway(tmp_path, "max_frame_bytes = 65536\n")
    await gw.start()
    yield gw
    await gw.stop()


async def raw(ws: Any, frame: str) -> Any:
    await ws.send(frame)
    return orjson.loads(await asyncio.wait_for(ws.recv(), 10))


async def test_bad_frames_get_json_rpc_errors_and_the_connection_survives(gateway: GatewayProcess) -> None:
    async with connect(gateway.url, additional_headers={"Authorization": f"Bearer {ALICE}"}) as ws:
        assert (await raw(ws, "{not json"))["error"]["code"] == -32700
        assert (await raw(ws, '"just a string"'))["error"]["code"] == -32600
        assert (await raw(ws, '{"jsonrpc": "1.0", "id": 1, "method": "gateway.info"}'))["error"]["code"] == -32600
        assert (await raw(ws, '{"jsonrpc": "2.0", "id": 1, "method": 5}'))["error"]["code"] == -32600
        assert (await raw(ws, "[]"))["error"]["code"] == -32600
        unknown = await raw(ws, '{"jsonrpc": "2.0", "id": 7, "method": "task.session.nope"}')
        assert unknown["error"]["code"] == -32601 and unknown["id"] == 7
        assert unknown["error"]["data"] == {"method": "task.session.nope"}  # one object shape (api.md, Errors)
        missing = await raw(ws, '{"jsonrpc": "2.0", "id": 8, "method": "task.session.status", "params": {}}')
        assert missing["error"]["code"] == -32602 and missing["error"]["data"] == {"field": "session_id"}
        wrong = await raw(ws, '{"jsonrpc": "2.0", "id": 9, "method": "task.session.prompt", '
                              '"params": {"session_id": "s", "prompt": 5}}')
        assert wrong["error"]["code"] == -32602 and wrong["error"]["data"]["field"].startswith("prompt")
        extra = await raw(ws, '{"jsonrpc": "2.0", "id": 10, "method": "task.session.get", '
                              '"params": {"session_id": "s", "colour": 1}}')
        assert extra["error"]["code"] == -32602 and extra["error"]["data"] == {"field": "colour"}
        positional = await raw(ws, '{"jsonrpc": "2.0", "id": 11, "method": "task.session.get", "params": ["s"]}')
        assert positional["error"]["code"] == -32602
        for method in ("gateway.info", "task.session.list", "task.session.get"):  # `[]` is not "no params" either
            empty = await raw(ws, f'{{"jsonrpc": "2.0", "id": 15, "method": "{method}", "params": []}}')
            assert (empty["id"], empty["error"]["code"], empty["error"]["data"]) == (15, -32602, {"field": "params"})
        batch = await raw(ws, '[1, {"jsonrpc": "2.0", "id": 12, "method": "gateway.info"}, '
                              '{"jsonrpc": "2.0", "method": "gateway.info"}, {"jsonrpc": "2.0", "id": 13}]')
        assert [b["id"] for b in batch] == [None, 12, None]
        assert batch[0]["error"]["code"] == -32600 and "result" in batch[1] and batch[2]["error"]["code"] == -32600
        await ws.send('{"jsonrpc": "2.0", "method": "gateway.info"}')  # a notification: no answer
        info = await raw(ws, '{"jsonrpc": "2.0", "id": 14, "method": "gateway.info"}')
        assert info["id"] == 14 and info["result"]["owner"] == "alice"
        for answer in (missing, wrong, extra, unknown):
            assert "Traceback" not in orjson.dumps(answer).decode()


async def test_oversized_frame_closes_1009_others_unaffected(gateway: GatewayProcess) -> None:
    other = await gateway.client(ALICE)
    async with connect(gateway.url, additional_headers={"Authorization": f"Bearer {ALICE}"}) as ws:
        await ws.send("x" * 100_000)
        with pytest.raises(ConnectionClosed) as info:
            await asyncio.wait_for(ws.recv(), 10)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    assert (await other.call("gateway.info"))["owner"] == "alice"
    await other.close()


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789", ALICE[:-1]])
async def test_bad_token_refused_at_handshake(gateway: GatewayProcess, token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with pytest.raises(InvalidStatus) as info:
        async with connect(gateway.url, additional_headers=headers):
            pass
    assert info.value.response.status_code == 401


async def test_token_in_query_and_foreign_origin(gateway: GatewayProcess) -> None:
    async with connect(f"{gateway.url}?token={ALICE}", origin=f"http://127.0.0.1:{gateway.port}") as ws:  # type: ignore[arg-type]
        assert (await raw(ws, '{"jsonrpc": "2.0", "id": 1, "method": "gateway.info"}'))["result"]["owner"] == "alice"
    with pytest.raises(InvalidStatus) as info:
        async with connect(f"{gateway.url}?token={ALICE}", origin="http://evil.example"):  # type: ignore[arg-type]
            pass
    assert info.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as info:  # the gateway's host and port, but another scheme
        async with connect(f"{gateway.url}?token={ALICE}", origin=f"https://127.0.0.1:{gateway.port}"):  # type: ignore[arg-type]
            pass
    assert info.value.response.status_code == 403


async def test_healthz(gateway: GatewayProcess) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 200")
    writer.close()


SESSION_METHODS: list[tuple[str, dict[str, Any]]] = [
    ("task.session.status", {}), ("task.session.resume", {}), ("task.session.recover", {"action": "retry"}),
    ("task.session.prompt", {"prompt": "hi"}), ("task.session.cancel_turn", {}), ("task.session.get", {}),
    ("task.session.history", {}), ("task.session.set_title", {"title": "mine now"}), ("task.session.delete", {}),
]


async def test_owner_isolation_for_every_method(gateway: GatewayProcess, tmp_path: Path) -> None:
    alice = await GatewayClient.connect(gateway.url, ALICE)
    bob = await GatewayClient.connect(gateway.url, BOB)
    view = await alice.call("task.session.start",
                            {"agent": "ref", "cwd": str(tmp_path / "work"), "wait_ready": True})
    sid = view["session_id"]
    for method, params in SESSION_METHODS:
        with pytest.raises(RpcCallError) as info:
            await bob.call(method, {"session_id": sid, **params})
        assert info.value.code == -32002, method
        assert info.value.message == f"session {sid} not found"
        with pytest.raises(RpcCallError) as unknown:
            await bob.call(method, {"session_id": "s-does-not-exist", **params})
        assert unknown.value.code == -32002  # foreign and missing look the same
    assert (await bob.call("task.session.list"))["sessions"] == []
    assert [s["session_id"] for s in (await alice.call("task.session.list"))["sessions"]] == [sid]
    # Task ids are per owner: naming Alice's task id gives Bob a task of his own, exactly as naming an id that
    # nobody uses does, so the answer tells him nothing of hers.
    for task_id in (view["task_id"], "t-nobody-uses-this"):
        bobs = await bob.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                     "task_id": task_id, "description": "bob's"})
        assert bobs["task_id"] == task_id and bobs["session_id"] != sid
        await bob.call("task.session.delete", {"session_id": bobs["session_id"]})
    assert (await alice.call("task.session.get", {"session_id": sid}))["title"] is None
    assert [s["session_id"] for s in (await alice.call("task.session.list"))["sessions"]] == [sid]
    await alice.close()
    await bob.close()


async def test_oversized_integers_are_bad_params(gateway: GatewayProcess) -> None:
    """SQLite's integers end at 2**63 - 1: a larger cursor used to overflow in the store (-32603, a traceback)."""
    async with connect(gateway.url, additional_headers={"Authorization": f"Bearer {ALICE}"}) as ws:
        for method, params, field in [
            ("task.session.history", f'{{"session_id": "s", "after": {2**70}}}', "after"),
            ("task.session.subscribe", f'{{"since": {2**64}}}', "since"),
            ("task.session.list", '{"cursor": "' + "9" * 30 + '"}', "cursor"),
            ("task.session.list", '{"cursor": "-1"}', "cursor"),
        ]:
            answer = await raw(ws, f'{{"jsonrpc": "2.0", "id": 1, "method": "{method}", "params": {params}}}')
            assert (answer["error"]["code"], answer["error"]["data"]["field"]) == (-32602, field), (method, answer)


@pytest.mark.parametrize("header", ["Authorization", "Origin", "Host"])
async def test_a_duplicate_header_is_a_bad_request(gateway: GatewayProcess, header: str) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    value = {"Authorization": f"Bearer {ALICE}", "Origin": f"http://127.0.0.1:{gateway.port}",
             "Host": f"127.0.0.1:{gateway.port}"}[header]
    lines = ["GET /rpc HTTP/1.1", f"Host: 127.0.0.1:{gateway.port}", "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
             f"Authorization: Bearer {ALICE}", f"{header}: {value}"]
    if header == "Origin":
        lines.append(f"Origin: {value}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode()
    assert head.startswith("HTTP/1.1 400"), head
    writer.close()
    client = await gateway.client(ALICE)  # and everyone else is still served
    assert (await client.call("gateway.info"))["owner"] == "alice"
    await client.close()


async def test_a_batch_over_the_cap_is_refused_whole(gateway: GatewayProcess) -> None:
    async with connect(gateway.url, additional_headers={"Authorization": f"Bearer {ALICE}"}) as ws:
        batch = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": "gateway.info"} for i in range(101)]).decode()
        answer = await raw(ws, batch)
        assert answer["error"]["code"] == -32600 and "at most 100" in answer["error"]["message"]
        assert len(await raw(ws, batch[: batch.rindex(",{")] + "]")) == 100  # 100 members: all answered


async def test_another_owner_is_served_while_a_huge_batch_runs(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, "max_batch = 20000\n")
    await gw.start()
    try:
        bob = await gw.client(BOB)
        alice = await gw.client(ALICE)
        session = await alice.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work")})
        log = EventLog(alice)
        sub = await alice.call("task.session.subscribe", {})
        await log.wait(lambda e: e["type"] == "caught_up" and e["data"]["subscription_id"] == sub["subscription_id"])
        async with connect(gw.url, additional_headers={"Authorization": f"Bearer {ALICE}"}, max_size=None) as ws:
            order: list[str] = []
            # The batch's first member renames Alice's session, which her subscriber sees as soon as that member
            # has run; only then does Bob call. 19,998 members follow. Run one at a time, Bob is answered between
            # them, before the batch's answer; run all at once (as `asyncio.gather` did), they were all done in
            # the loop pass that ran the first, and the answer left before Bob's call could arrive.
            batch = [{"jsonrpc": "2.0", "id": 0, "method": "task.session.set_title",
                      "params": {"session_id": session["session_id"], "title": "renamed"}},
                     *({"jsonrpc": "2.0", "method": "gateway.info"} for _ in range(19_998)),
                     {"jsonrpc": "2.0", "id": 1, "method": "gateway.info"}]
            await ws.send(orjson.dumps(batch).decode())

            async def batch_answer() -> None:
                answer = orjson.loads(await ws.recv())
                assert [a["id"] for a in answer] == [0, 1] and answer[0]["result"]["title"] == "renamed"
                order.append("batch")

            async def bobs_call() -> None:
                await log.wait(lambda e: e["type"] == "session_title", timeout=60)
                assert (await bob.call("gateway.info"))["owner"] == "bob"
                order.append("bob")

            await asyncio.wait_for(asyncio.gather(batch_answer(), bobs_call()), 60)
            assert order == ["bob", "batch"]  # served between the batch's members, not after its last
        await bob.close()
        await alice.close()
    finally:
        await gw.stop()


@pytest.mark.parametrize(("host", "bind", "allowed"), [
    ("127.0.0.1:8765", "127.0.0.1", True),
    ("localhost:8765", "127.0.0.1", True),
    ("[::1]:8765", "::1", True),
    ("LOCALHOST", "127.0.0.1", True),
    (None, "127.0.0.1", False),  # no Host at all: HTTP/1.1 requires one (the server answers 400 first)
    ("attacker.example:8765", "127.0.0.1", False),  # DNS rebinding: a page on a name resolving to loopback
    ("127.0.0.1.attacker.example", "127.0.0.1", False),
    ("gateway.lan:8765", "0.0.0.0", True),  # bound beyond loopback, reached by the names its users give it
])
def test_host_allowed(host: str | None, bind: str, allowed: bool) -> None:
    assert host_allowed(host, bind) is allowed


async def _http_status(port: int, request: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request.encode())
    await writer.drain()
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode()
    writer.close()
    return head.split("\r\n")[0]


async def test_metrics_need_a_token_and_foreign_host_names_are_refused(gateway: GatewayProcess) -> None:
    port = gateway.port
    assert await _http_status(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") == "HTTP/1.1 401 Unauthorized"
    ok = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALICE}\r\n\r\n"
    assert await _http_status(port, ok) == "HTTP/1.1 200 OK"
    rebound = "GET / HTTP/1.1\r\nHost: attacker.example\r\n\r\n"
    assert await _http_status(port, rebound) == "HTTP/1.1 421 Misdirected Request"
    for path in ("/", "/healthz", "/rpc"):  # no Host at all: refused everywhere, before anything else is looked at
        assert await _http_status(port, f"GET {path} HTTP/1.1\r\n\r\n") == "HTTP/1.1 400 Bad Request"


@pytest.mark.parametrize(("origin", "host", "allowed"), [
    (None, "127.0.0.1:8765", True),  # not a browser
    ("http://127.0.0.1:8765", "127.0.0.1:8765", True),  # the gateway's own page
    ("HTTP://127.0.0.1:8765", "127.0.0.1:8765", True),
    ("http://localhost:8765", "LOCALHOST:8765", True),
    ("http://[::1]:8765", "[::1]:8765", True),
    ("http://127.0.0.1", "127.0.0.1:80", True),  # the default port, said or not
    ("https://127.0.0.1:8765", "127.0.0.1:8765", False),  # another scheme is another origin
    ("http://127.0.0.1:8766", "127.0.0.1:8765", False),  # another port too
    ("http://127.0.0.1", "127.0.0.1:8765", False),
    ("http://evil.example:8765", "127.0.0.1:8765", False),
    ("http://127.0.0.1:8765", None, False),  # nothing to compare with
    ("null", "127.0.0.1:8765", False),  # a sandboxed iframe, a file: page
    ("https://ui.example.com", "127.0.0.1:8765", True),  # configured
    ("https://ui.example.com/", "127.0.0.1:8765", True),
    ("http://ui.example.com", "127.0.0.1:8765", False),  # configured with https only
])
def test_origin_allowed(origin: str | None, host: str | None, allowed: bool) -> None:
    assert origin_allowed(origin, host, ["https://ui.example.com"]) is allowed
