"""Gateway worlds for the integration tests: a real gateway process made from a `Spec` (its agent profiles, its
configuration, its `serve` arguments) and configured with a pool of owners, each with a token of its own; a `World` is
one owner of it, with a directory of its own to run sessions in. Registered as a plugin by tests/conftest.py.

Two scopes, one kind of world:

- `world`: a fresh owner on the module's gateway (`module_gateway`, made from the module's `GATEWAY` spec once for
  all its tests). An owner sees only its own sessions and events, so the tests stay independent; after each test its
  clients are closed and its sessions deleted (their agents stopped). For tests that leave the gateway as it is.
- `gateway_world`: a factory, `await gateway_world(spec)`: a gateway of the test's own in its `tmp_path` (the layout
  of tests/gateway_harness.two_owner_gateway), stopped after the test. For a test that kills, crashes, restarts or
  reconfigures its gateway.

A module-scoped gateway's subprocess, and the tasks reading its output, belong to the event loop that started it and
run only while that loop runs; so every async test using either fixture runs on its module's event loop:
`pytest_collection_modifyitems` below marks those tests `asyncio(loop_scope="module")` (no `pytestmark` is needed, and
a module's sync tests stay unmarked), and the fixtures run on that loop too. An async fixture of a module's own that
such a test uses must say `@pytest_asyncio.fixture(loop_scope="module")`; one of the function's loop (conftest's
`launch`, say) is for nothing bound to a loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
import pytest
import pytest_asyncio

from gateway.clients.client import GatewayClient
from tests.gateway_harness import EventLog, GatewayProcess, reference_profile, subscribed

LOOP: Literal["module"] = "module"  # the event loop the worlds' tests and fixtures run on
WORLD_FIXTURES = frozenset({"world", "gateway_world", "module_gateway"})
OWN_OWNERS = 4  # owners of a test's own gateway: the test's, and a few more for `World.another`
SHARED_OWNERS = 64  # owners of a module's gateway: one for each of its tests (and their others), never taken twice


@dataclass(frozen=True)
class Layout:
    """Where a gateway world's files are: its state, its agent profiles and the agents' own state and log (shared by
    every owner of the gateway), its configuration file."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def agents(self) -> Path:
        return self.root / "agents"

    @property
    def agent_state(self) -> Path:
        return self.root / "agent-state"

    @property
    def log(self) -> Path:
        """The messages the reference agents given `log=layout.log` received, one JSON line each."""
        return self.root / "agent.log"

    @property
    def config(self) -> Path:
        return self.root / "gw.toml"


def reference_agent(at: Layout) -> None:
    """The default profiles: the reference agent as `ref`, logging to `at.log`."""
    reference_profile(at.agents, at.agent_state, "ref", log=at.log)


@dataclass(frozen=True)
class Spec:
    """What a gateway world is made of. `agents` writes its profiles into `layout.agents`; `config` is the top of its
    configuration file (TOML, before the owners' tokens; agents run unconfined unless it says `sandbox`); `args`
    are more `serve` arguments."""

    agents: Callable[[Layout], None] = reference_agent
    config: str = ""
    args: tuple[str, ...] = ()


def owner_token(owner: str) -> str:
    return f"{owner}-token-0123456789abcdef"


class Gateway:
    """A gateway process made from a `Spec` in `root` (not started), and its owners. A `shared` one (a module's) has
    an owner for each of the module's tests, each owner's workspace root a directory of its own
    (`root/owners/<owner>`); a test's own has a few, their workspace root `root`, as in two_owner_gateway."""

    def __init__(self, spec: Spec, root: Path, *, shared: bool) -> None:
        self.layout = at = Layout(root)
        self.shared = shared
        self.owners = [f"owner-{i:02d}" for i in range(SHARED_OWNERS if shared else OWN_OWNERS)]
        self._taken = 0
        at.agents.mkdir(parents=True)
        spec.agents(at)
        unconfined = ("" if "sandbox" in spec.config or "allow_unconfined_agents" in spec.config
                      else "allow_unconfined_agents = true\n")
        entries = []
        for owner in self.owners:
            entry = f'[[auth.tokens]]\ntoken = "{owner_token(owner)}"\nowner = "{owner}"\n'
            if shared:
                self.dir_of(owner).mkdir(parents=True)
                entry += f"workspace_roots = [{orjson.dumps(str(self.dir_of(owner))).decode()}]\n"
            entries.append(entry)
        at.config.write_text(unconfined + spec.config + "".join(entries))
        self.process = GatewayProcess(at.state, at.agents, *spec.args, token=None, config=at.config)

    def dir_of(self, owner: str) -> Path:
        """The directory `owner`'s sessions run under."""
        if self.shared:
            return self.layout.root / "owners" / owner
        return self.layout.root if owner == self.owners[0] else self.layout.root / owner

    def take(self) -> str:
        """An owner no world had yet."""
        if self._taken == len(self.owners):
            raise RuntimeError(f"all {len(self.owners)} owners of the gateway in {self.layout.root} are taken")
        self._taken += 1
        return self.owners[self._taken - 1]


class World:
    """One owner of a gateway: its token, a directory of its own (`dir`, its sessions' workspace root, with `work`
    made in it), and clients connected as it, closed after the test."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self.owner = gateway.take()
        self.token = owner_token(self.owner)
        self.dir = gateway.dir_of(self.owner)
        self.work = self.dir / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self._clients: list[GatewayClient] = []
        self._others: list[World] = []

    @property
    def gateway(self) -> GatewayProcess:
        """The gateway process: the module's, shared (never to be stopped), or the test's own."""
        return self._gateway.process

    @property
    def layout(self) -> Layout:
        return self._gateway.layout

    @property
    def shared(self) -> bool:
        return self._gateway.shared

    async def client(self) -> GatewayClient:
        """A new client, connected as this owner."""
        client = await self.gateway.client(self.token)
        self._clients.append(client)
        return client

    async def subscribed(self, since: int | None = None, **extra: Any) -> tuple[GatewayClient, EventLog]:
        """A new client, subscribed (after `since`, with `extra` params) and caught up."""
        client, log = await subscribed(self.gateway, since, token=self.token, **extra)
        self._clients.append(client)
        return client, log

    def another(self) -> World:
        """Another owner of the same gateway, fresh too (for what one owner must not see of another)."""
        other = World(self._gateway)
        self._others.append(other)
        return other

    async def close(self) -> None:
        """Its clients (and its others') closed; on a shared gateway, its sessions deleted, so that none of its agents
        runs on into the module's next tests."""
        for world in (self, *self._others):
            for client in world._clients:
                await client.close()
            if self.shared and self.gateway.running:
                await world._delete_sessions()

    async def _delete_sessions(self) -> None:
        client = await self.gateway.client(self.token)
        try:
            while sessions := (await client.call("task.session.list", {"limit": 500}))["sessions"]:
                for session in sessions:
                    await client.call("task.session.delete", {"session_id": session["session_id"]})
        finally:
            await client.close()


async def start(client: GatewayClient, cwd: Path, agent: str = "ref", **params: Any) -> dict[str, Any]:
    """`task.session.start` of `agent` in `cwd`, waiting until the agent is ready (`params` may say otherwise): the
    session's view."""
    view: dict[str, Any] = await client.call("task.session.start", {"agent": agent, "cwd": str(cwd),
                                                                    "wait_ready": True, **params})
    return view


class WorldFactory(Protocol):
    def __call__(self, spec: Spec = ..., /) -> Awaitable[World]: ...


@pytest_asyncio.fixture(loop_scope=LOOP)
async def gateway_world(tmp_path: Path) -> AsyncIterator[WorldFactory]:
    """`await gateway_world(spec)`: a started gateway of this test's own, made from `spec` in `tmp_path` (a second
    one in `tmp_path/gateway-1`), and the world of its first owner, whose directory is that one; the gateway is stopped
    after the test."""
    made: list[World] = []

    async def make(spec: Spec = Spec(), /) -> World:
        root = tmp_path / f"gateway-{len(made)}" if made else tmp_path
        gateway = Gateway(spec, root, shared=False)
        world = World(gateway)
        gateway.process.token = world.token  # the harness's helpers (`subscribed(gw)`, ...) are this owner's
        made.append(world)
        await gateway.process.start()
        return world

    yield make
    for world in made:
        await world.close()
        await world.gateway.stop()


@pytest_asyncio.fixture(scope="module", loop_scope=LOOP)
async def module_gateway(request: pytest.FixtureRequest,
                         tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    """The module's gateway, made from its `GATEWAY` spec (the default `Spec()` without one), shared by its tests."""
    spec = getattr(request.module, "GATEWAY", Spec())
    gateway = Gateway(spec, tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]), shared=True)
    GatewayProcess.kept.append(gateway.process)
    try:
        await gateway.process.start()
        yield gateway
    finally:
        await gateway.process.stop()
        GatewayProcess.kept.remove(gateway.process)
    traceback = gateway.process.unchecked_traceback()
    assert traceback is None, f"the module's gateway logged a traceback:\n{traceback}"


@pytest_asyncio.fixture(loop_scope=LOOP)
async def world(module_gateway: Gateway) -> AsyncIterator[World]:
    """A fresh owner of the module's gateway; its sessions are deleted after the test."""
    if not module_gateway.process.running:  # an earlier test failed with it: the next ones still get a gateway
        await module_gateway.process.start()
    owner = World(module_gateway)
    yield owner
    await owner.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """An async test of a world runs on its module's event loop, the loop its gateway belongs to."""
    for item in items:
        if pytest_asyncio.is_async_test(item) and WORLD_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.asyncio(loop_scope=LOOP), append=False)
