"""Work in flight outlives the gateway with real third-party agents (issue 46): claude-agent-acp and opencode, pinned by
`make interop`, run with agent hosts (`host_linger`) and offline against a model endpoint this test serves on
127.0.0.1. The endpoint holds every model request until the test lets it go, so a turn is under way, for certain, when
the gateway is killed -9; it is let go only once a new gateway runs, so the turn's end can only reach a gateway through
the reattached host. The turn ends as the agent ends it (`end_turn`, not `interrupted`), once, in the same agent
process, which then takes the next prompt."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.gateway.agenthost.support import alive, gone
from tests.gateway.agenthost.test_gateway_restart import host_pids
from tests.gateway_harness import GatewayProcess, running, subscribed
from tests.third_party import INTEROP, interop_node

WAIT = 60.0  # a bound on every wait for an agent: a hung turn fails the test instead of hanging it
MARKER = "reattach-marker-46"  # in the prompt, so the endpoint knows the turn's own model request
ANSWER = "the held answer"
INSTALLED = {"claude": "@agentclientprotocol/claude-agent-acp/dist/index.js",  # under .interop/node_modules
             "opencode": "opencode-ai/bin/opencode.exe"}


class HeldModel:
    """A model endpoint on 127.0.0.1 speaking the Anthropic Messages API (`/v1/messages`, for claude) and OpenAI's
    chat completions (`/v1/chat/completions`, for opencode). Every model request waits until `release` is set, then
    gets a one-text answer that ends the turn; anything else (the CLI's reachability checks) is answered at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.prompted = asyncio.Event()  # a model request carrying the marker arrived: the turn is under way
        self.requests: list[str] = []  # what arrived, for a failure's message
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])

    async def under_way(self) -> None:
        """Until the turn's own model request arrived (the agent took the prompt and asked its model)."""
        try:
            await asyncio.wait_for(self.prompted.wait(), WAIT)
        except TimeoutError:
            raise AssertionError(f"the agent never asked its model for the turn; it asked: {self.requests}") from None

    async def close(self) -> None:
        self.release.set()  # a held request ends as the agent sees fit, not with a hung socket
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait_closed(), 10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            while True:  # keep-alive: one request after another on the connection
                head = await reader.readuntil(b"\r\n\r\n")
                method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.decode().partition(":") for line in head.split(b"\r\n")[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(f"{method} {target}")
                path = target.split("?", 1)[0]
                if method == "POST" and path in ("/v1/messages", "/v1/chat/completions"):
                    request = orjson.loads(body)
                    if MARKER.encode() in body:
                        self.prompted.set()
                    await self.release.wait()
                    kind, payload = (anthropic if path == "/v1/messages" else openai)(request)
                    status = "200 OK"
                else:
                    kind, payload, status = "application/json", b"{}", "404 Not Found"
                writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(payload)}\r\n\r\n"
                             .encode() + (b"" if method == "HEAD" else payload))
                await writer.drain()
        writer.close()


def sse(events: list[dict[str, Any]], named: bool) -> bytes:
    return b"".join((f"event: {e['type']}\n".encode() if named else b"") + b"data: " + orjson.dumps(e) + b"\n\n"
                    for e in events)


def anthropic(request: dict[str, Any]) -> tuple[str, bytes]:
    """A Messages API answer of one text block, `end_turn`: streamed when asked to be."""
    usage = {"input_tokens": 1, "output_tokens": 1}
    message = {"id": "msg_held", "type": "message", "role": "assistant", "model": request.get("model", "m"),
               "stop_sequence": None}
    if not request.get("stream"):
        return "application/json", orjson.dumps({**message, "content": [{"type": "text", "text": ANSWER}],
                                                 "stop_reason": "end_turn", "usage": usage})
    return "text/event-stream", sse([
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None, "usage": usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ANSWER}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 1}},
        {"type": "message_stop"}], named=True)


def openai(request: dict[str, Any]) -> tuple[str, bytes]:
    """A chat completion of one text, `stop`: streamed when asked to be."""
    base = {"id": "chatcmpl-held", "created": 0, "model": request.get("model", "m")}
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    if not request.get("stream"):
        return "application/json", orjson.dumps({**base, "object": "chat.completion", "usage": usage, "choices": [
            {"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}]})
    chunk = {**base, "object": "chat.completion.chunk"}
    return "text/event-stream", sse([
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ANSWER},
                               "finish_reason": None}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}],
        named=False) + b"data: [DONE]\n\n"


def profile(agent: str, port: int, home: Path) -> tuple[list[str], dict[str, str]]:
    """The agent's command and environment, its model at the held endpoint, with dummy keys."""
    if agent == "claude":
        # As root, its CLI needs IS_SANDBOX=1 to run with permission bypass at all.
        return ([str(interop_node()), str(INTEROP / INSTALLED["claude"])],
                {"HOME": str(home), "ANTHROPIC_API_KEY": "sk-ant-dummy-hosts-key",
                 "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}", "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"})
    # opencode: a provider of its own config (OPENCODE_CONFIG_CONTENT) through its bundled OpenAI-compatible client.
    config = {"model": "held/model", "provider": {"held": {
        "npm": "@ai-sdk/openai-compatible", "name": "Held",
        "options": {"baseURL": f"http://127.0.0.1:{port}/v1", "apiKey": "dummy-hosts-key"},
        "models": {"model": {"name": "Held model"}}}}}
    return ([str(INTEROP / INSTALLED["opencode"]), "acp"],
            {"HOME": str(home), "OPENCODE_CONFIG_CONTENT": orjson.dumps(config).decode()})


def parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def processes_of(home: Path) -> set[int]:
    """Every process of the agent this test started (its environment names the agent's home)."""
    found = set()
    needle = f"HOME={home}\0".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes():
                    found.add(int(entry.name))
    return found


class World:
    def __init__(self, tmp_path: Path, agent: str, port: int) -> None:
        self.agent = agent
        self.home = tmp_path / f"home-{agent}"
        self.home.mkdir()
        self.work = tmp_path / "work"
        self.work.mkdir()
        agents = tmp_path / "agents"
        agents.mkdir()
        command, env = profile(agent, port, self.home)
        env_toml = ", ".join(f"{k} = {orjson.dumps(v).decode()}" for k, v in env.items())
        (agents / f"{agent}.toml").write_text(
            f'id = "{agent}"\ncommand = {orjson.dumps(command).decode()}\nenv = {{ {env_toml} }}\n'
            "native_session_resume = true\n")
        config = tmp_path / "gateway.toml"
        config.write_text("host_linger = 60\n")
        self.gateway = GatewayProcess(tmp_path / "state", agents, config=config)

    def host_and_agent(self) -> tuple[int, int]:
        """The agent's process (the root of the processes of its home) and its parent: the agent host."""
        tree = processes_of(self.home)
        [agent] = [pid for pid in tree if parent(pid) not in tree]
        return parent(agent), agent


@pytest.fixture
async def model() -> AsyncIterator[HeldModel]:
    held = HeldModel()
    await held.start()
    yield held
    await held.close()


# (not `world`: tests/support/world.py, a plugin of every test, has a fixture of that name, on another event loop)
@pytest.fixture(params=["claude", "opencode"])
async def hosted_agent(request: pytest.FixtureRequest, tmp_path: Path, model: HeldModel) -> AsyncIterator[World]:
    agent = str(request.param)
    if not (INTEROP / INSTALLED[agent]).exists():
        pytest.fail(f"{agent} is not installed: `make interop` (part of `make test`) installs it")
    w = World(tmp_path, agent, model.port)
    try:
        async with running(w.gateway):
            yield w
    finally:
        # Nothing this test started runs on, even after a failure half-way: a host told SIGTERM stops its agent's
        # tree and exits (LG-2); what is left after that is killed.
        hosts = host_pids(w.gateway.state_dir)
        for pid in hosts:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in hosts:
            with contextlib.suppress(TimeoutError):
                await gone(pid, 30)
        for pid in host_pids(w.gateway.state_dir) | processes_of(w.home):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def said(events: list[dict[str, Any]], sid: str) -> str:
    return "".join(e["data"]["update"]["content"].get("text", "") for e in events
                   if e["type"] == "session_update" and e["session_id"] == sid
                   and e["data"]["update"].get("sessionUpdate") == "agent_message_chunk")


async def test_a_real_agents_turn_under_way_at_a_gateway_kill_ends_in_the_same_process(
        hosted_agent: World, model: HeldModel) -> None:
    client, log = await subscribed(hosted_agent.gateway)
    view = await client.call("task.session.start", {"agent": hosted_agent.agent, "cwd": str(hosted_agent.work),
                                                    "wait_ready": True}, timeout=WAIT)
    assert view["is_agent_running"], view["error_message"]
    sid = view["session_id"]
    host, agent = hosted_agent.host_and_agent()
    assert host_pids(hosted_agent.gateway.state_dir) == {host}
    prompt = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid,
                                                                         "prompt": f"{MARKER}: say hello"}))
    await log.wait(lambda e: e["type"] == "turn_started" and e["session_id"] == sid, WAIT)
    await model.under_way()
    await hosted_agent.gateway.kill9()
    await client.close()
    with contextlib.suppress(Exception):
        await prompt
    assert alive(host) and alive(agent)  # the agent runs on with no gateway, its model request held

    await hosted_agent.gateway.start()
    client, log = await subscribed(hosted_agent.gateway, 0)
    before = [e for e in log.events if e.get("session_id") == sid]
    assert [e["type"] for e in before].count("turn_started") == 1
    assert "turn_ended" not in [e["type"] for e in before]  # not closed as interrupted: the turn still runs
    assert hosted_agent.host_and_agent() == (host, agent)  # reattached to the same host and agent
    seen = len(log.events)
    model.release.set()  # only now can the agent's turn go on: its end reaches this gateway through the host
    ended = await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid, WAIT)
    assert ended["data"]["stop_reason"] == "end_turn", ended["data"]
    assert ANSWER in said(log.events[seen:], sid)  # the model's answer came after the restart
    events = [e for e in log.events if e.get("session_id") == sid]
    assert [e["type"] for e in events].count("turn_ended") == 1
    assert hosted_agent.host_and_agent() == (host, agent)  # the very same process ended it

    # the session goes on with the same agent process
    answer = await client.call("task.session.prompt", {"session_id": sid, "prompt": "hello again"}, timeout=WAIT)
    assert answer["stop_reason"] == "end_turn"
    await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid and e is not ended, WAIT)
    assert hosted_agent.host_and_agent() == (host, agent)
    await client.close()

