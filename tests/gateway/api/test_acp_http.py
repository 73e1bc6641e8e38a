"""`/acp` over Streamable HTTP (the remote-transport RFD's HTTP mode), against a real gateway and the reference agent:
the official TypeScript SDK's HTTP client drives a session through it; a plain HTTP client (aiohttp's) resumes a
session's event stream cut mid-turn with `Last-Event-ID` and gets every update once; what is refused, and why."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.gateway_harness import ALICE, BOB, GatewayProcess, two_owner_gateway
from tests.third_party import ROOT, interop_node

JSON = {"Content-Type": "application/json"}


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gateway = two_owner_gateway(tmp_path, config='default_agent = "ref"\nmax_frame_bytes = 4096\n')
    await gateway.start()
    yield gateway
    await gateway.stop()


def url(gw: GatewayProcess) -> str:
    return f"http://127.0.0.1:{gw.port}/acp"


def auth(token: str = ALICE, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **more}


class Stream:
    """One GET event stream, read into `events` ((id, message)) as they come."""

    def __init__(self, http: aiohttp.ClientSession, gw: GatewayProcess, headers: dict[str, str]) -> None:
        self.http, self.gw, self.headers = http, gw, headers
        self.events: list[tuple[int | None, dict[str, Any]]] = []
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.opened = asyncio.Event()

    def start(self) -> Stream:
        self.task = asyncio.ensure_future(self._read())
        return self

    async def _read(self) -> None:
        async with self.http.get(url(self.gw), headers={**self.headers, "Accept": "text/event-stream"}) as response:
            assert response.status == 200, await response.text()
            self.opened.set()
            event: dict[str, str] = {}
            async for raw in response.content:
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    continue
                if line:
                    key, _, value = line.partition(": ")
                    event[key] = value
                    continue
                if "data" in event:
                    self.events.append((int(event["id"]) if "id" in event else None, json.loads(event["data"])))
                    self.changed.set()
                event = {}

    async def wait(self, predicate: Any, timeout: float = 30) -> dict[str, Any]:
        async def look() -> dict[str, Any]:
            while True:
                for _, message in self.events:
                    if predicate(message):
                        return message
                self.changed.clear()
                await self.changed.wait()
        return await asyncio.wait_for(look(), timeout)

    async def cut(self) -> None:
        """The client goes away from this stream (or finds it ended by the gateway)."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def post(http: aiohttp.ClientSession, gw: GatewayProcess, message: dict[str, Any],
               headers: dict[str, str]) -> aiohttp.ClientResponse:
    async with http.post(url(gw), headers={**JSON, **headers}, data=json.dumps(message)) as response:
        await response.read()
        return response


async def connect(http: aiohttp.ClientSession, gw: GatewayProcess, token: str = ALICE) -> str:
    async with http.post(url(gw), headers={**JSON, **auth(token)}, data=json.dumps(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})) as response:
        assert response.status == 200
        answer = await response.json()
        assert answer["result"]["agentCapabilities"]["loadSession"] is True
        return response.headers["Acp-Connection-Id"]


async def test_the_typescript_sdks_http_client_drives_a_session(gw: GatewayProcess, tmp_path: Path) -> None:
    home = tmp_path / "ts-client"
    home.mkdir()
    (home / "node_modules").symlink_to(interop_node().parent.parent)
    shutil.copy(ROOT / "tests" / "ts" / "acp_http_client.mjs", home / "acp_http_client.mjs")
    done = await asyncio.to_thread(subprocess.run, [str(interop_node()), str(home / "acp_http_client.mjs"), url(gw),
                                                    ALICE, str(tmp_path / "work")], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    result = json.loads(done.stdout.decode().splitlines()[-1])
    session = result["sessionId"]
    assert result["loadSession"] is True
    assert result["stops"] == ["end_turn", "end_turn", "end_turn"]
    assert result["asked"] == [session]  # the permission request reached it on the session's stream, and its answer
    assert result["listed"] == [session]
    said = [(u["update"]["sessionUpdate"], u["update"].get("title") or _text(u["update"].get("content")))
            for u in result["updates"]]
    assert ("tool_call", "search") in said and ("agent_message_chunk", "echo: hello") in said
    assert ("agent_message_chunk", 'permission: {"outcome":"selected","optionId":"allow-once"}') in said
    rpc = await gw.client(ALICE)
    history = await rpc.call("task.session.history", {"session_id": session})
    assert ("user_message", "hello") in [(e["kind"], e["content"]) for e in history["entries"]]
    await rpc.close()


def _text(content: Any) -> str | None:
    return content.get("text") if isinstance(content, dict) else None


async def test_a_session_stream_cut_mid_turn_resumes_with_last_event_id(gw: GatewayProcess, tmp_path: Path) -> None:
    gate = tmp_path / "work" / "gate"
    async with aiohttp.ClientSession() as http:
        cid = await connect(http, gw)
        own = auth(**{"Acp-Connection-Id": cid})
        connection = Stream(http, gw, own).start()
        await asyncio.wait_for(connection.opened.wait(), 10)
        assert (await post(http, gw, {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {
            "cwd": str(tmp_path / "work"), "mcpServers": []}}, own)).status == 202
        session = (await connection.wait(lambda m: m.get("id") == 1))["result"]["sessionId"]
        scoped = {**own, "Acp-Session-Id": session}
        first = Stream(http, gw, scoped).start()
        await asyncio.wait_for(first.opened.wait(), 10)
        await post(http, gw, {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
            "sessionId": session, "prompt": [{"type": "text", "text": f"/trickle {gate}"}]}}, scoped)
        await first.wait(lambda m: "chunk 3 " in json.dumps(m))
        await first.cut()  # mid-turn: what was in flight on that stream is lost to this client
        last = max(i for i, _ in first.events if i is not None)
        second = Stream(http, gw, {**scoped, "Last-Event-ID": str(last)}).start()
        await second.wait(lambda m: "chunk " in json.dumps(m))
        gate.touch()
        answer = await second.wait(lambda m: m.get("id") == 2)
        assert answer["result"] == {"stopReason": "end_turn"}
        await second.cut()
        await connection.cut()
        chunks = [m["params"]["update"]["content"]["text"] for _, m in first.events + second.events
                  if m.get("method") == "session/update"
                  and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk"]
        numbers = [int(c.split()[1]) for c in chunks]
        assert numbers == list(range(len(numbers))) and len(numbers) > 4  # every update once, in order
        ids = [i for i, _ in first.events + second.events if i is not None]
        assert ids == sorted(set(ids))  # the event ids of what it got: increasing, none twice
        async with http.delete(url(gw), headers=own) as response:
            assert response.status == 204


async def test_what_streamable_http_refuses(gw: GatewayProcess, tmp_path: Path) -> None:
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}}
    async with aiohttp.ClientSession() as http:
        cid = await connect(http, gw)
        cases: list[tuple[str, dict[str, str], Any, int]] = [
            ("POST", JSON, init, 401),  # no token
            ("POST", {**JSON, **auth(), "Origin": "http://evil.example"}, init, 403),
            ("POST", {**JSON, **auth()}, {"jsonrpc": "2.0", "id": 1, "method": "session/list", "params": {}}, 400),
            ("POST", {**JSON, **auth()}, {**init, "id": [1]}, 400),  # an initialize whose id is no id
            ("GET", {**auth(**{"Acp-Connection-Id": cid, "Acp-Session-Id": "s-x", "Last-Event-ID": "²"}),
                     "Accept": "text/event-stream"}, None, 200),  # not a cursor: a stream from now
            ("POST", {**JSON, **auth(**{"Acp-Connection-Id": "0" * 32})}, init, 404),  # unknown connection
            ("POST", {**JSON, **auth(BOB, **{"Acp-Connection-Id": cid})}, init, 404),  # alice's, to bob: unknown
            ("POST", {"Content-Type": "text/plain", **auth(**{"Acp-Connection-Id": cid})}, init, 415),
            ("POST", {**JSON, **auth(**{"Acp-Connection-Id": cid})}, "x" * 5000, 413),
            ("POST", {**JSON, **auth(**{"Acp-Connection-Id": cid})}, "{not json", 400),
            ("GET", auth(**{"Acp-Connection-Id": cid}), None, 406),  # not asking for an event stream
            ("GET", {**auth(), "Accept": "text/event-stream"}, None, 400),  # no connection named
            ("GET", {**auth(BOB, **{"Acp-Connection-Id": cid}), "Accept": "text/event-stream"}, None, 404),
            ("PUT", {**JSON, **auth(**{"Acp-Connection-Id": cid})}, init, 405),
            ("DELETE", auth(BOB, **{"Acp-Connection-Id": cid}), None, 404),
        ]
        for method, headers, body, status in cases:
            data = body if isinstance(body, str) else (json.dumps(body) if body is not None else None)
            async with http.request(method, url(gw), headers=headers, data=data) as response:
                text = "" if status == 200 else await response.text()  # a stream: its status is the answer
                assert response.status == status, (method, headers, body, status, response.status, text)
                assert ALICE not in text and BOB not in text
        # Refused requests changed nothing: alice's connection still works, and ends when she says so.
        stream = Stream(http, gw, auth(**{"Acp-Connection-Id": cid})).start()
        await asyncio.wait_for(stream.opened.wait(), 10)
        await post(http, gw, {"jsonrpc": "2.0", "id": 5, "method": "session/list", "params": {}},
                   auth(**{"Acp-Connection-Id": cid}))
        assert (await stream.wait(lambda m: m.get("id") == 5))["result"] == {"sessions": []}
        async with http.delete(url(gw), headers=auth(**{"Acp-Connection-Id": cid})) as response:
            assert response.status == 204
        assert (await post(http, gw, init, {**auth(), "Acp-Connection-Id": cid})).status == 404
        await stream.cut()
    rpc = await gw.client(ALICE)  # the WebSocket side of the same port is untouched
    assert (await rpc.call("task.session.list", {}))["sessions"] == []
    await rpc.close()


async def test_a_client_gone_mid_request_or_malformed_costs_nothing(gw: GatewayProcess) -> None:
    """A body cut short, a chunked body that breaks off, a header line too long: answered or dropped, never a traceback
    in the log (the harness fails the test on one), and the gateway goes on serving."""
    heads = [
        b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + ALICE.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"",
        b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + ALICE.encode()
        + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"jso",
        b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n",
    ]
    for head in heads:
        _reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(head)
        await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    async with aiohttp.ClientSession() as http:
        assert await connect(http, gw)  # still served


async def test_one_request_per_connection_and_bounded_resources(gw: GatewayProcess) -> None:
    """A kept-alive client's next request is looked at again (a GET of /healthz after a POST is websockets'); a head
    sent a byte at a time is closed as on the WebSocket side; made-up sessions' streams and large bodies at once are
    bounded; the answers say they are this gateway's."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        cid = await connect(http, gw)
        async with http.post(url(gw), headers={**JSON, **auth(**{"Acp-Connection-Id": cid})}, data="{}") as response:
            assert response.headers["Server"].startswith("acp-gateway/")
        async with http.get(f"http://127.0.0.1:{gw.port}/healthz") as response:
            assert response.status == 200
        async with http.get(f"http://127.0.0.1:{gw.port}/") as response:
            assert response.status == 200 and "html" in response.headers["Content-Type"]
        twice = [("Authorization", f"Bearer {ALICE}"), ("Authorization", f"Bearer {BOB}"), *JSON.items()]
        async with http.get(url(gw), headers=aiohttp.typedefs.CIMultiDict(twice)) as response:
            assert response.status == 400
    # a head that never ends: closed within websockets' open_timeout, like an upgrade that never comes
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    writer.write(b"POST /acp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ")
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 60) in (b"", b"HTTP/1.1 400")  # closed by the gateway
    writer.close()
    async with aiohttp.ClientSession() as http:
        cid = await connect(http, gw)
        own = auth(**{"Acp-Connection-Id": cid})
        statuses = []
        for i in range(70):  # GETs of made-up sessions' streams, each ended at once
            async with http.get(url(gw), headers={**own, "Accept": "text/event-stream",
                                                  "Acp-Session-Id": f"made-up-{i}"}) as response:
                statuses.append(response.status)
        assert statuses == [200] * 70  # each one's channel went with its stream: no bound reached
        held = [Stream(http, gw, {**own, "Acp-Session-Id": f"held-{i}"}).start() for i in range(64)]
        await asyncio.gather(*(asyncio.wait_for(s.opened.wait(), 30) for s in held))
        async with http.get(url(gw), headers={**own, "Accept": "text/event-stream",
                                              "Acp-Session-Id": "one-more"}) as response:
            assert response.status == 429
        for stream in held:
            await stream.cut()
