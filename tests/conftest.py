"""Shared fixtures: the reference agent as a real subprocess, and an in-memory span exporter."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from acp.client import AcpClient
from tests.contract_check import ContractCheck

# The gateway worlds (`world`, `gateway_world`, `module_gateway`) and `start`: tests/support/world.py.
pytest_plugins = ["tests.support.world"]

_EXPORTER = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
trace.set_tracer_provider(_provider)


@pytest.fixture(autouse=True)
def gateway_logs_have_no_traceback() -> Iterator[None]:
    """A gateway's log holds no traceback after any test: a traceback is a bug, whatever the test provoked. A module's
    shared gateway (GatewayProcess.kept) is checked for what it logged during the test."""
    from tests.gateway_harness import GatewayProcess

    GatewayProcess.started.clear()
    yield
    for gw in GatewayProcess.started:  # a test that failed half-way leaves no gateway running behind it
        if gw not in GatewayProcess.kept and gw.proc is not None and gw.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(gw.proc.pid, signal.SIGKILL)
    for gw in dict.fromkeys([*GatewayProcess.started, *GatewayProcess.kept]):
        traceback = gw.unchecked_traceback()
        assert traceback is None, f"the gateway logged a traceback:\n{traceback}"


# The unit tests (`make check`): pure rules and in-process units, no agent process, gateway, database, browser,
# sandbox or network — the loop a contributor runs before every commit, in well under a minute. A module listed here
# holds only such tests; a test elsewhere may say so itself with `@pytest.mark.unit`.
UNIT_MODULES = frozenset({
    "test_acp_server_protocol", "test_command_seal", "test_commands", "test_docs_links", "test_eager", "test_errors",
    "test_fixture_diff", "test_framing_fs", "test_git_rules", "test_history", "test_key_rules", "test_launch_words",
    "test_layers",
    "test_offload",
    "test_permissions_policy", "test_registry_index", "test_replay_rules", "test_restore_rules",
    "test_resume_context", "test_session_config_rules", "test_spawn_env", "test_states", "test_status",
    "test_store_queries", "test_subscription_model", "test_subscription_states", "test_wire",
})


def pytest_configure(config: pytest.Config) -> None:
    """The registry agents the install tests need start installing now, in the background (tests/registry_prefetch)."""
    from tests import registry_prefetch

    config.addinivalue_line("markers", "unit: a pure or in-process test, run by `make check` (see UNIT_MODULES)")
    registry_prefetch.start(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in UNIT_MODULES:
            item.add_marker(pytest.mark.unit)


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests import registry_prefetch

    registry_prefetch.finish(config)


_CONTRACT = ContractCheck()


@pytest.fixture(autouse=True)
def traffic_matches_the_contract(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every answer, error and event a test's GatewayClient receives is validated against the OpenRPC document
    (but in tests marked `fake_gateway`, whose peer breaks the contract on purpose)."""
    from gateway.clients.client import GatewayClient, RpcCallError

    if request.node.get_closest_marker("fake_gateway") is not None:
        yield
        return

    call, dispatch = GatewayClient.call, GatewayClient._dispatch

    async def checked_call(self: GatewayClient, method: str, params: dict[str, Any] | None = None,
                           timeout: float | None = None) -> Any:
        try:
            result = await call(self, method, params, timeout)
        except RpcCallError as err:
            _CONTRACT.check_error(method, err.code, err.data)
            raise
        _CONTRACT.check_result(method, result)
        return result

    def checked_dispatch(self: GatewayClient, item: Any) -> None:
        if isinstance(item, dict) and item.get("method") == "task.session.event":
            _CONTRACT.check_event(item.get("params"))
        dispatch(self, item)

    monkeypatch.setattr(GatewayClient, "call", checked_call)
    monkeypatch.setattr(GatewayClient, "_dispatch", checked_dispatch)
    _CONTRACT.violations.clear()
    yield
    assert not _CONTRACT.violations, "\n".join(_CONTRACT.violations[:10])


@pytest.fixture
def spans() -> InMemorySpanExporter:
    _EXPORTER.clear()
    return _EXPORTER


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


@pytest.fixture
def agent_state(tmp_path: Path) -> Path:
    return tmp_path / "agent-state"


@pytest.fixture
def reference_argv(agent_state: Path) -> Callable[..., list[str]]:
    def build(*flags: str) -> list[str]:
        return [sys.executable, "-m", "agents.reference", "--state-dir", str(agent_state), *flags]

    return build


class Recorder:
    """Collects session/update params delivered to a client, with their replay flag."""

    def __init__(self) -> None:
        self.updates: list[tuple[dict[str, Any], bool]] = []
        self.changed = asyncio.Event()

    def __call__(self, params: dict[str, Any], replay: bool) -> None:
        self.updates.append((params, replay))
        self.changed.set()

    def texts(self, replay: bool | None = None) -> list[str]:
        out = []
        for params, rep in self.updates:
            if replay is not None and rep != replay:
                continue
            content = params.get("update", {}).get("content")
            if isinstance(content, dict) and "text" in content:
                out.append(content["text"])
        return out

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        async def loop() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), timeout)


@pytest.fixture
async def launch(workdir: Path, reference_argv: Callable[..., list[str]]) -> AsyncIterator[Callable[..., Any]]:
    """Launch the reference agent (or any argv) as a real subprocess; stopped at teardown."""
    clients: list[AcpClient] = []

    async def start(*flags: str, argv: list[str] | None = None, **kwargs: Any) -> AcpClient:
        client = await AcpClient.launch(argv or reference_argv(*flags), cwd=str(workdir), **kwargs)
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.stop()


def process_alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll a condition the OS does not signal (a process gone); fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A real PostgreSQL server for the whole run (see tests/pg_server.py: never a skip)."""
    from tests.pg_server import test_server

    with test_server() as url:
        yield url


@pytest.fixture
async def pg_url(pg_server: str) -> AsyncIterator[str]:
    """A database of this test's own on that server."""
    from tests.pg_server import fresh_database

    async with fresh_database(pg_server) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """The store, on each backend in turn: the store suite runs against both."""
    from gateway.store import open_store

    if request.param == "sqlite":
        store = await open_store(str(tmp_path / "gateway.db"))
        yield store
        await store.close()
        return
    server = request.getfixturevalue("pg_server")
    from tests.pg_server import fresh_database

    async with fresh_database(server) as url:
        store = await open_store(url)
        yield store
        await store.close()
