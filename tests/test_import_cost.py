"""A restart is quick (issue 46): `serve` imports what it needs to listen, and the rest of the gateway is imported
where it is first used. Held structurally, never by timing: a fresh interpreter imports a command's modules, and the
modules that must stay lazy are looked for in its `sys.modules` (`bench/sections/hosts.py` measures the time)."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from tests.support.paths import REPO

# What `acp-gateway serve` imports before it listens (bench/sections/hosts.py: IMPORTED).
SERVE = ("gateway.cli.main", "gateway.app")

# module (or package) -> the one path that needs it, where it is imported at its first use
LAZY_FOR_SERVE = {
    "aiohttp": "the key proxy, once a brokered-key profile runs (runtime/key_proxy.py)",
    "asyncpg": "a PostgreSQL store (store/postgres.py, opened by store.open_store)",
    "gateway.store.postgres": "a PostgreSQL store (runtime/cluster.py, runtime/forwarding.py)",
    "cryptography": "a cluster's sealed notices (store/notices.py, by the PostgreSQL store)",
    "acp.check.catalog": "`acp-gateway check` (an agent profile holds only acp.check.options)",
    "acp.check.framework": "`acp-gateway check`",
    "acp.replay.agent": "`acp-gateway replay` (the command line lists its flags from acp.replay.arguments)",
    "acp.replay.rules": "`acp-gateway replay`",
    "acp.replay.record": "a gateway recording its agents (record_dir, acp/replay/recording.py)",
    "jsonschema": "an agent's form question (acp/elicitation.py); jsonrpcserver's own validator is never loaded",
    "pythonjsonlogger": "log_format = \"json\" (app.serve_command)",
    "gateway.api.acp_server": "the first /acp connection (app.acp_endpoint)",
    "gateway.clients.client": "the wire-only verbs, when they run (cli/frontend.py, cli/questions.py)",
    "websockets.asyncio.client": "the wire-only verbs, when they run",
    "gateway.cli.agents": "`acp-gateway agents` (the command line lists its flags from cli/agents_arguments.py)",
    "agents.registry.installer": "`acp-gateway agents add|update`",
}

# What the command line alone imports (`--help`, the wire-only verbs, `hosts`, `doctor` before they run): nothing of
# the service a `serve` starts.
LAZY_FOR_THE_COMMAND_LINE = ("gateway.app", "gateway.runtime", "gateway.store", "gateway.api", "gateway.journal",
                             "pydantic", "websockets", "aiosqlite", "prometheus_client")


def imported_by(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement` (the repository's packages, as the CLI finds them)."""
    code = f"import sys, orjson\n{statement}\nsys.stdout.buffer.write(orjson.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, timeout=60, check=True)
    return set(orjson.loads(done.stdout))


def loaded(modules: set[str], name: str) -> bool:
    """`name`, or any module under it, was imported."""
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.fixture(scope="module")
def serve_modules() -> set[str]:
    return imported_by("import " + ", ".join(SERVE))


@pytest.mark.parametrize("module", sorted(LAZY_FOR_SERVE))
def test_serving_does_not_import_what_only_another_path_needs(serve_modules: set[str], module: str) -> None:
    assert not loaded(serve_modules, module), f"{module} is imported before `serve` listens; only " \
                                              f"{LAZY_FOR_SERVE[module]} needs it: import it there"


def test_serving_imports_its_own_runtime_and_edge(serve_modules: set[str]) -> None:
    """The test above means something: the modules `serve` does need are found by the same look."""
    assert {"gateway.runtime.manager", "gateway.api.server", "gateway.store", "pydantic"} <= serve_modules


def test_the_command_line_alone_imports_nothing_of_the_service() -> None:
    modules = imported_by("import gateway.cli.main")
    assert [name for name in LAZY_FOR_THE_COMMAND_LINE if loaded(modules, name)] == []


def test_doctor_reads_the_confinement_rules_without_the_runtime() -> None:
    """`gateway.runtime`'s package loads its manager at the first use of its names, not when a module of it is
    imported."""
    modules = imported_by("import gateway.cli.doctor")
    assert "gateway.runtime.confinement" in modules
    assert [m for m in ("gateway.runtime.manager", "gateway.app", "gateway.api") if loaded(modules, m)] == []


# The checker's registry (`framework.CHECKS`) in its order: every core check before the kit's first.
REGISTRY_ORDER = """
from acp.check import CHECKS, core, kit
order = [c.fn.__module__ for c in CHECKS]
assert core.__name__ in order and kit.__name__ in order, order
assert order.index(kit.__name__) > max(i for i, m in enumerate(order) if m == core.__name__), order
"""


def test_the_lazy_packages_still_give_every_name_they_list() -> None:
    """`acp.check`, `gateway.runtime` and `gateway.store` load their names at first use: each name of their
    `__all__` is there, and the checker's registry keeps its order (the core checks before the kit's)."""
    code = """
import acp.check, gateway.runtime, gateway.store
for package in (acp.check, gateway.runtime, gateway.store):
    for name in package.__all__:
        getattr(package, name)
assert gateway.store.Store is gateway.store.SqliteStore
"""
    subprocess.run([sys.executable, "-c", code + REGISTRY_ORDER], cwd=REPO, timeout=60, check=True)


def test_the_checker_registry_keeps_its_order_when_the_kit_is_imported_first() -> None:
    subprocess.run([sys.executable, "-c", "import acp.check.kit\n" + REGISTRY_ORDER], cwd=REPO, timeout=60,
                   check=True)


def test_serving_loads_jsonrpcservers_dispatch_without_its_validator() -> None:
    """`serve` loads jsonrpcserver's dispatch modules before it listens (a restarted gateway's first frame waits for
    no import), not its package's jsonschema validator and server."""
    modules = imported_by("from gateway.api import rpc\nrpc.load_dispatch()")
    assert loaded(modules, "jsonrpcserver.async_dispatcher")
    assert not loaded(modules, "jsonschema")
    assert "jsonrpcserver.main" not in modules


def test_jsonrpcserver_stays_whole_for_whoever_asks_the_package() -> None:
    code = ("from gateway.api import rpc\nrpc.load_dispatch()\n"
            "from jsonrpcserver import Success, dispatch\nassert Success is rpc.Success and callable(dispatch)\n"
            "import jsonrpcserver.main")
    modules = imported_by(code)
    assert loaded(modules, "jsonschema")  # the package's own __init__ ran when it was asked for its names
