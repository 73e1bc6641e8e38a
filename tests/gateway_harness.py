"""A real gateway process for tests: start, kill -9, restart; plus agent profiles written for each test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import sqlite3
import sys
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, ClassVar

import orjson

from gateway.clients.client import GatewayClient
from gateway.store import journal_frames

TOKEN = "test-token-aaaaaaaaaaaaaaaa"
CLUSTER_SECRET = "the-test-clusters-shared-secret-0123456789"
ALICE, BOB = "alice-token-0123456789abcdef", "bob-token-0123456789abcdefgh"


def reference_profile(agents_dir: Path, agent_state: Path, agent_id: str, *flags: str, native: bool = True,
                      history: bool = False, log: Path | None = None, extra: str = "") -> None:
    """A profile running the reference agent with `flags`; `extra` is more of the profile's TOML, appended."""
    command = [sys.executable, "-m", "agents.reference", "--state-dir", str(agent_state), *flags]
    if log is not None:
        command += ["--log", str(log)]
    (agents_dir / f"{agent_id}.toml").write_text(
        f'id = "{agent_id}"\ncommand = {orjson.dumps(command).decode()}\n'
        f"native_session_resume = {str(native).lower()}\nhistory_context_injection = {str(history).lower()}\n"
        + extra)


class GatewayProcess:
    # Every gateway a test started: after the test, none may have logged a traceback (see conftest).
    started: ClassVar[list[GatewayProcess]] = []
    # Gateways kept across the tests of a module (tests/support/world.py): not killed after each test; what each
    # logged during a test is checked after it.
    kept: ClassVar[list[GatewayProcess]] = []

    def __init__(self, state_dir: Path, agents_dir: Path, *extra: str, token: str | None = TOKEN,
                 config: Path | None = None, port: int = 0) -> None:
        GatewayProcess.started.append(self)
        self.fixed_port = port
        self.state_dir = state_dir
        self.agents_dir = agents_dir
        self.extra = list(extra)
        self.token = token  # what clients present
        self.cli_token = token  # what `serve --token` is given
        self.config = config
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self.stderr_lines: list[str] = []
        self.checked = 0  # how many of `stderr_lines` were checked for a traceback (`unchecked_traceback`)
        self.env: dict[str, str] = {}  # set in its environment at the next start (e.g. ACP_GATEWAY_FAILPOINT)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/rpc"

    def argv(self) -> list[str]:
        # Tests keep their workspaces beside the state directory, in their own tmp directory (not under HOME).
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(self.fixed_port),
                "--state-dir", str(self.state_dir), "--workspace-root", str(self.state_dir.parent),
                "--agents-dir", str(self.agents_dir), *self.extra]
        if self.cli_token:
            argv += ["--token", self.cli_token]
        config = self.config
        if config is None:
            # not *.toml: a test may use this directory as its agents directory
            config = self.state_dir.parent / f"{self.state_dir.name}-harness.conf"
            config.write_text("")
        # Agents are the gateway's children unless a test opts into agent hosts (`host_linger`, default 900 s): a
        # test's gateway stopped with hosts left lingering would leave its agents running long after the test.
        needed = {"host_linger": "host_linger = 0\n"}
        if any(arg.startswith("postgresql://") for arg in self.extra):  # a cluster node: the nodes' shared secret
            needed["cluster_secret"] = f'cluster_secret = "{CLUSTER_SECRET}"\n'
        for key, line in needed.items():
            if key not in config.read_text():
                config.write_text(line + config.read_text())
        argv += ["--config", str(config)]
        return argv

    async def start(self) -> GatewayProcess:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("ACP_GATEWAY_")}, **self.env}
        self.proc = await asyncio.create_subprocess_exec(*self.argv(), stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.PIPE, env=env)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._stderr_task = asyncio.ensure_future(self._drain(self.proc.stderr))
        while True:
            line = (await asyncio.wait_for(self.proc.stdout.readline(), 30)).decode()
            if not line:
                await asyncio.sleep(0)
                raise RuntimeError(f"gateway exited before listening: {''.join(self.stderr_lines)[-2000:]}")
            match = re.search(r"listening on ws://127\.0\.0\.1:(\d+)/rpc", line)
            if match:
                self.port = int(match.group(1))
                break
        self._stdout_task = asyncio.ensure_future(self._drain(self.proc.stdout))
        return self

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.stderr_lines.append(line.decode(errors="replace"))

    async def client(self, token: str | None = None) -> GatewayClient:
        return await GatewayClient.connect(self.url, token or self.token)

    async def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        await self._drained()

    async def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.returncode is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            rc = await self.proc.wait()
        await self._drained()
        return rc

    async def _drained(self) -> None:
        """Everything the process wrote is in `stderr_lines` (its pipes close when it exits)."""
        for task in (getattr(self, "_stderr_task", None), getattr(self, "_stdout_task", None)):
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(task), 5)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def unchecked_traceback(self) -> str | None:
        """A traceback in what the gateway logged since the last check, with what led to it (the log's tail may be
        far past it), or None; what it logged so far counts as checked from now on."""
        log = "".join(self.stderr_lines[self.checked:])
        self.checked = len(self.stderr_lines)
        at = log.find("Traceback")
        return None if at < 0 else log[max(0, at - 1500):at + 4000]


def two_owner_gateway(tmp_path: Path, config: str = "", bob: str = "") -> GatewayProcess:
    """A gateway (not started) for owners alice and bob, the reference agent as `ref`, and `tmp_path/work`.
    `config` is prepended to the configuration file; `bob` is appended to bob's token entry."""
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    path = tmp_path / "gw.toml"
    # Two owners, agents unconfined: accepted here (the tests of confinement say what that means, and use bwrap).
    unconfined = ("" if "sandbox" in config or "allow_unconfined_agents" in config
                  else "allow_unconfined_agents = true\n")
    path.write_text(f'{unconfined}{config}[[auth.tokens]]\ntoken = "{ALICE}"\nowner = "alice"\n'
                    f'[[auth.tokens]]\ntoken = "{BOB}"\nowner = "bob"\n{bob}')
    return GatewayProcess(tmp_path / "state", agents, token=None, config=path)


@contextlib.asynccontextmanager
async def running(gw: GatewayProcess) -> AsyncIterator[GatewayProcess]:
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


async def subscribed(gw: GatewayProcess, since: int | None = None, *, token: str | None = None,
                     **extra: Any) -> tuple[GatewayClient, EventLog]:
    """A new client of `gw` (with `token`, or the gateway's), subscribed (after `since`, with `extra` params) and
    caught up."""
    client = await gw.client(token)
    log = EventLog(client)
    params: dict[str, Any] = dict(extra)
    if since is not None:
        params["since"] = since
    result = await client.call("task.session.subscribe", params)
    await log.wait(lambda e: e["type"] == "caught_up" and e["data"]["subscription_id"] == result["subscription_id"])
    return client, log


async def metrics_text(port: int, token: str) -> tuple[str, str]:
    """`GET /metrics` of a gateway with a token: (the response's head, its body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                 "Connection: close\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.decode(), body.decode()


def end_model_run(loop: asyncio.AbstractEventLoop, gateway: GatewayProcess | None,
                  closing: list[Coroutine[Any, Any, Any]]) -> None:
    """A model-based test's teardown: its clients closed (`closing`), its gateway stopped — whose log holds no
    traceback —, its event loop closed."""
    try:
        for close in closing:
            loop.run_until_complete(asyncio.wait_for(close, 60))
        if gateway is not None:
            loop.run_until_complete(asyncio.wait_for(gateway.stop(), 60))
            log = "".join(gateway.stderr_lines)
            assert "Traceback" not in log, log[-4000:]
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def agent_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def journal_events(db: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every event in a gateway's journal (read straight from its database), as notification params."""
    rows = db.execute("SELECT spans, frames FROM journal ORDER BY rowid").fetchall()  # commit order
    return [orjson.loads(frame)["params"] for spans, frames in rows
            for frame in journal_frames(spans, frames, 0, 1 << 62, None)]


class EventLog:
    """Every `task.session.event` a client received, and a way to wait for the next that matches."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client
        self.events: list[dict[str, Any]] = []

    async def wait(self, predicate: Any, timeout: float = 15.0) -> dict[str, Any]:
        for event in self.events:
            if predicate(event):
                return event
        while True:
            note = await self.client.next_notification(timeout)
            if note.get("method") != "task.session.event":
                continue
            self.events.append(note["params"])
            if predicate(self.events[-1]):
                return self.events[-1]

    def of_type(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == type_]

    def ids(self) -> list[int]:
        return [e["id"] for e in self.events if e["id"] is not None]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeClock:
    """Time that moves only when a test says so; sleepers wake in deadline order."""

    def __init__(self) -> None:
        self.t = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.t + seconds, fut))
        await fut

    @property
    def sleeping(self) -> int:
        return sum(1 for _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        target = self.t + seconds
        while True:
            due = sorted(((d, f) for d, f in self._sleepers if d <= target and not f.done()), key=lambda x: x[0])
            if not due:
                break
            deadline, fut = due[0]
            self.t = max(self.t, deadline)
            fut.set_result(None)
            for _ in range(5):  # let the woken task run up to its next sleep
                await asyncio.sleep(0)
        self._sleepers = [(d, f) for d, f in self._sleepers if not f.done()]
        self.t = target


def frozen_websocket(port: int, token: str, requests: list[bytes]) -> socket.socket:
    """A WebSocket client that sends `requests` (one JSON-RPC text frame each) and then reads nothing at all (a
    frozen browser tab): a tiny receive buffer, so the gateway's outbox is what fills up."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /rpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                 f"Authorization: Bearer {token}\r\n\r\n".encode())
    for payload in requests:
        assert len(payload) < 65536
        mask = os.urandom(4)
        size = len(payload)
        length = bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + size.to_bytes(2, "big")
        sock.sendall(bytes([0x81]) + length + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    return sock


def processes_naming(text: str, also_environ: bool = False) -> list[str]:
    """The command lines of this machine's processes that name `text` (in their environment too, with
    `also_environ`): the agents a test started, found by the directory they were given."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = Path(f"/proc/{pid}/environ").read_bytes() if also_environ else b""
        except OSError:
            continue
        if text in cmdline or text.encode() in environ:
            found.append(cmdline)
    return found


async def agent_said(gw: GatewayProcess, token: str | None, sid: str, prompt: str, timeout: float = 20) -> str:
    """The agent's message text in the turn of `prompt`, read on a connection of its own (turns never mix)."""
    client = await gw.client(token)
    try:
        await client.call("task.session.subscribe", {"session_id": sid})
        await client.call("task.session.prompt", {"session_id": sid, "prompt": prompt})
        said: list[str] = []
        while True:
            event = (await client.next_notification(timeout))["params"]
            update = event["data"].get("update") or {} if event["type"] == "session_update" else {}
            if update.get("sessionUpdate") == "agent_message_chunk":
                said.append(update["content"]["text"])
            elif event["type"] == "turn_ended":
                return "".join(said)
    finally:
        await client.close()
