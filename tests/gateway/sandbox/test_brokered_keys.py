"""Brokered keys: a profile's model-API key stays in the gateway. The agent, in every network mode and unconfined,
gets a base URL of the gateway's key proxy and a stand-in; what it sends with the stand-in reaches a local upstream
stand-in carrying the real key, streamed back as it comes. Its environment, every process it can see in `/proc`,
the events, the history, the store and the log hold no real key; a stand-in ends with its agent."""

from __future__ import annotations

import asyncio
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from gateway.runtime.key_rules import STAND_IN_PREFIX
from tests.gateway.agenthost.test_gateway_restart import agent_pids
from tests.gateway_harness import BOB, GatewayProcess, agent_said, reference_profile, running, two_owner_gateway

REAL_KEY = "sk-ant-dummy-REAL-KEY-0123456789abcdef"
CALL = """import os, urllib.request
base, key = os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"]
request = urllib.request.Request(base + "/v1/messages?beta=true", data=b'{"model": "m"}', method="POST",
                                 headers={"x-api-key": key, "content-type": "application/json"})
with urllib.request.urlopen(request, timeout=20) as answer:
    print("status", answer.status, answer.headers["content-type"], answer.read().decode().replace(chr(10), "|"))
"""


class Upstream:
    """A model API's stand-in on loopback: records what reaches it, answers with an event stream in chunks."""

    def __init__(self) -> None:
        self.seen: list[dict[str, object]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append({"method": request.method, "path": request.path_qs, "headers": dict(request.headers),
                          "body": (await request.read()).decode()})
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for word in ("one", "two", "three"):
            await response.write(f"data: {word}\n\n".encode())
        await response.write_eof()
        return response


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    stand_in = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stand_in.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    stand_in.url = f"http://127.0.0.1:{port}"
    yield stand_in
    await runner.cleanup()


def brokered_gateway(tmp_path: Path, upstream: Upstream, sandbox: str, network: str | None,
                     config: str = "") -> tuple[GatewayProcess, Path]:
    """A gateway whose `ref` profile brokers an Anthropic key (the gateway's DUMMY_VENDOR_KEY) to `upstream`, and the
    workspace holding call.py (one model call with what the agent was given)."""
    unconfined = "allow_unconfined_agents = true\n" if sandbox == "none" else ""
    gw = two_owner_gateway(tmp_path, config=f'{unconfined}sandbox = "{sandbox}"\n{config}')
    extra = (f'network = "{network}"\n' if network else "") + (
        f'[[brokered]]\napi = "anthropic"\nkey = {{ env = "DUMMY_VENDOR_KEY" }}\nupstream = "{upstream.url}"\n')
    reference_profile(gw.agents_dir, tmp_path / "agent-state", "ref", extra=extra)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "call.py").write_text(CALL)
    return gw, work


async def refused_after_exit(socket_path: Path, stand_in: str) -> tuple[int, str]:
    """What the proxy answers a stand-in whose agent has gone (asked on its socket, as a relay would)."""
    connector = aiohttp.UnixConnector(path=str(socket_path))
    async with aiohttp.ClientSession(connector=connector) as http, \
            http.post("http://proxy/v1/messages", headers={"x-api-key": stand_in}, data=b"{}") as answer:
        return answer.status, await answer.text()


@pytest.mark.parametrize(("sandbox", "network"), [("bwrap", "none"), ("bwrap", "outbound"), ("bwrap", "host"),
                                                  ("none", None)])
async def test_the_agent_calls_its_api_through_the_proxy_and_never_holds_the_key(
        tmp_path: Path, upstream: Upstream, sandbox: str, network: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert shutil.which("bwrap"), "make test installs bubblewrap"
    monkeypatch.setenv("DUMMY_VENDOR_KEY", REAL_KEY)  # the gateway's own environment: named by the profile
    gw, work = brokered_gateway(tmp_path, upstream, sandbox, network)
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await bob.call("task.session.start", {"agent": "ref", "cwd": str(work), "wait_ready": True}))[
            "session_id"]
        said = await agent_said(gw, BOB, sid, "/sh python3 call.py")
        assert "status 200 text/event-stream data: one||data: two||data: three||" in said, said
        environment = await agent_said(gw, BOB, sid, "/sh env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'")
        stand_in = next(line.split("=", 1)[1] for line in environment.splitlines()
                        if line.startswith("ANTHROPIC_API_KEY="))
        assert stand_in.startswith(STAND_IN_PREFIX), environment
        assert "ANTHROPIC_BASE_URL=http://127.0.0.1:" in environment, environment
        events = orjson.dumps(await bob.call("task.session.events", {"session_id": sid})).decode()
        history = orjson.dumps(await bob.call("task.session.history", {"session_id": sid})).decode()
        await bob.call("task.session.cancel", {"session_id": sid})  # its agent stops: the stand-in ends
        status, text = await refused_after_exit(gw.state_dir / "run" / "keys" / "keys.sock", stand_in)
        assert status == 401 and "no longer" in text and stand_in not in text, (status, text)
        await bob.close()
    [call] = upstream.seen
    headers = {k.lower(): v for k, v in call["headers"].items()}  # type: ignore[attr-defined]
    assert call["path"] == "/v1/messages?beta=true" and call["body"] == '{"model": "m"}', call
    assert headers["x-api-key"] == REAL_KEY and stand_in not in str(headers), headers
    store = b"".join(p.read_bytes() for p in gw.state_dir.rglob("*") if p.is_file())
    for where, text in (("the agent's environment and /proc", environment), ("events", events),
                        ("history", history), ("log", "".join(gw.stderr_lines)), ("state directory", store.decode(
                            errors="replace"))):
        assert REAL_KEY not in text, where


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
async def test_a_hosted_agent_keeps_its_stand_in_across_a_gateway_kill(tmp_path: Path, upstream: Upstream,
                                                                       sandbox: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent with a brokered key runs in an agent host and outlives a gateway `kill -9`: the next gateway grants
    the stand-in it holds again (derived from its execution, the real key read again), on a socket it still reaches."""
    monkeypatch.setenv("DUMMY_VENDOR_KEY", REAL_KEY)
    gw, work = brokered_gateway(tmp_path, upstream, sandbox, None, "host_linger = 60\n")
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await bob.call("task.session.start", {"agent": "ref", "cwd": str(work), "wait_ready": True}))[
            "session_id"]
        assert "status 200 text/event-stream" in await agent_said(gw, BOB, sid, "/sh python3 call.py")
        before = agent_pids(tmp_path / "agent-state")  # the agent, and the key relay it runs under
        assert before
        await bob.close()
        await gw.kill9()
        await gw.start()
        bob = await gw.client(BOB)
        said = await agent_said(gw, BOB, sid, "/sh python3 call.py")
        assert "status 200 text/event-stream data: one||data: two||data: three||" in said, said
        assert agent_pids(tmp_path / "agent-state") == before  # the same agent process
        await bob.call("task.session.cancel", {"session_id": sid})
        await bob.close()
    assert len(upstream.seen) == 2
    for call in upstream.seen:
        headers = {k.lower(): v for k, v in call["headers"].items()}  # type: ignore[attr-defined]
        assert headers["x-api-key"] == REAL_KEY, headers
    secret = gw.state_dir / "run" / "stand-ins.secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    store = b"".join(p.read_bytes() for p in gw.state_dir.rglob("*") if p.is_file())
    assert REAL_KEY.encode() not in store and REAL_KEY not in "".join(gw.stderr_lines)


async def test_a_request_without_a_stand_in_is_refused_and_reaches_no_upstream(tmp_path: Path,
                                                                               upstream: Upstream) -> None:
    from gateway.runtime.key_proxy import KeyProxy

    proxy = KeyProxy(tmp_path)
    await proxy.start()
    try:
        assert oct(proxy.socket_path.stat().st_mode & 0o777) == "0o600"
        assert oct(proxy.socket_path.parent.stat().st_mode & 0o777) == "0o700"
        status, text = await refused_after_exit(proxy.socket_path, "not-a-stand-in")
        assert status == 401 and "no stand-in" in text, text
    finally:
        await proxy.close()
    assert not upstream.seen
    assert not proxy.socket_path.exists()
    with socket.socket(socket.AF_UNIX) as probe, pytest.raises(OSError):
        probe.connect(str(proxy.socket_path))
    await asyncio.sleep(0)
