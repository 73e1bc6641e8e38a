"""Every module stays on its floor (docs/architecture.md: Layers): acp/ below agents/ below gateway/; in gateway/
api → runtime → journal → store, clients beside them knowing only the wire, code run inside a sandbox knowing
nothing, errors/config/metrics at the base, app and cli on top; no import circles; the pure rule modules free of
I/O."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOT = REPO / "gateway"

# wing -> the gateway modules (first component under gateway/) it must not import
FORBIDDEN = {
    "store": {"journal", "runtime", "api", "clients", "app", "cli"},
    "journal": {"runtime", "api", "clients", "app", "cli"},
    "runtime": {"api", "clients", "app", "cli"},
    "api": {"clients", "app", "cli"},
    "clients": {"api", "runtime", "journal", "store", "app", "errors", "config", "cli"},
    "sandboxed": {"api", "runtime", "journal", "store", "clients", "app", "errors", "error_codes", "config", "cli",
                  "metrics", "memory", "ui"},
    # the agent host outlives the gateway and runs its own small process: nothing of the service's state is in it
    "agenthost": {"api", "runtime", "journal", "store", "clients", "app", "cli", "errors", "error_codes", "config",
                  "metrics", "memory", "ui", "sandboxed"},
}
# The wiring modules gateway/ may hold beside its wings (the bound: eight). `error_codes` is the wire's
# vocabulary, importing only acp/errors.py: the clients, which may import no other of these, use it too.
TOP_LEVEL = {"__init__", "__main__", "app", "config", "error_codes", "errors", "memory", "metrics"}
# Decide-and-perform: the rule modules decide from data alone; sockets, processes, files and the store are for the
# modules that perform what they decide.
PURE_RULES = ["gateway/agenthost/protocol.py", "gateway/agenthost/ledger.py",
              "acp/restore.py", "acp/session_config.py", "acp/replay/rules.py", "acp/replay/script.py",
              "gateway/runtime/states.py", "gateway/runtime/commands.py", "gateway/runtime/status.py",
              "gateway/runtime/history.py", "gateway/runtime/resume_context.py", "gateway/runtime/permissions.py",
              "gateway/runtime/key_rules.py", "gateway/runtime/sign_in_rules.py", "gateway/runtime/sign_in_needs.py",
              "gateway/journal/phases.py", "gateway/store/command_seal.py", "gateway/cli/form_rules.py",
              "gateway/api/acp_server/protocol.py", "gateway/api/liveness.py", "gateway/clients/policy.py"]
IO_MODULES = {"asyncio", "os", "subprocess", "socket", "sqlite3", "aiosqlite", "asyncpg", "websockets", "aiohttp",
              "shutil", "pathlib"}


def gateway_imports(path: Path) -> set[str]:
    """The first component under `gateway.` of every module `path` imports (relative imports resolved)."""
    package = path.relative_to(ROOT.parent).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            parts = base + (node.module.split(".") if node.module else [])
            names = [[*parts, alias.name] for alias in node.names] if not node.module else [parts]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        else:
            continue
        found.update(name[1] for name in names if len(name) > 1 and name[0] == "gateway")
    return found


@pytest.mark.parametrize("wing", sorted(FORBIDDEN))
def test_wing_imports_only_floors_below(wing: str) -> None:
    offenders = {str(path.relative_to(ROOT)): sorted(gateway_imports(path) & FORBIDDEN[wing])
                 for path in (ROOT / wing).rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_gateway_top_level_holds_only_its_wiring() -> None:
    loose = {path.stem for path in ROOT.glob("*.py")}
    assert loose <= TOP_LEVEL, f"move these into a wing: {sorted(loose - TOP_LEVEL)}"


# The wire-only verbs (cli/frontend.py) and the modules they are made of: the terminal's asking (cli/questions.py),
# the form's checks (cli/form_rules.py) and the verbs of a session's files in git (cli/git_verbs.py).
WIRE_ONLY_CLI = ("frontend", "questions", "form_rules", "git_verbs")


@pytest.mark.parametrize("module", WIRE_ONLY_CLI)
def test_the_wire_only_cli_verbs_import_only_the_clients(module: str) -> None:
    """The client library and the wire's error codes; of the command line, only each other and its argument
    vocabulary (cli/argspec.py), which imports nothing of the gateway."""
    path, argspec = ROOT / "cli" / f"{module}.py", ROOT / "cli" / "argspec.py"
    cli = {name for name in imported_names(path) if name.split(".")[:2] == ["gateway", "cli"]}
    assert gateway_imports(path) - {"cli"} <= {"clients", "error_codes", "__version__"}
    assert cli <= {"gateway.cli.argspec", *(f"gateway.cli.{other}" for other in WIRE_ONLY_CLI)}
    assert gateway_imports(argspec) == set()


def imported_names(path: Path) -> set[str]:
    """Every absolute module name `path` imports, wherever the import sits (relative imports resolved)."""
    base = ROOT.parent
    package = list(path.relative_to(base).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            parts = package[: len(package) - node.level + 1] if node.level else []
            found.add(".".join(parts + (node.module.split(".") if node.module else [])))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("package,forbidden", [("acp", ("agents", "gateway")), ("agents", ("gateway",))])
def test_lower_packages_import_nothing_above_them(package: str, forbidden: tuple[str, ...]) -> None:
    offenders = {str(path.relative_to(ROOT.parent)): sorted(name for name in imported_names(path)
                                                            if name.split(".")[0] in forbidden)
                 for path in (ROOT.parent / package).rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("module", PURE_RULES)
def test_pure_rule_modules_do_no_io(module: str) -> None:
    names = imported_names(ROOT.parent / module)
    io = sorted(name for name in names if name.split(".")[0] in IO_MODULES)
    store = sorted(name for name in names if name.startswith("gateway.store") and name not in {
        "gateway.store.rows"} and not name.endswith("command_seal"))
    assert (io, store) == ([], [])


def module_graph() -> dict[str, set[str]]:
    """Each module of acp/, agents/ and gateway/ -> the modules of them it imports anywhere: at the top, inside a
    function or under TYPE_CHECKING (a circle hidden in a function is still a circle a reader must untangle)."""
    base = ROOT.parent
    modules: dict[str, Path] = {}
    for package in ("acp", "agents", "gateway"):
        for path in (base / package).rglob("*.py"):
            name = ".".join(path.relative_to(base).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                parts = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join(parts + (node.module.split(".") if node.module else []))
                found.update(f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = module_graph()
    circles = []
    for start in graph:  # a path from a module's imports back to itself is a circle
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == start:
                circles.append(start)
                break
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
    assert circles == [], f"modules in an import circle: {sorted(circles)}"
