"""The wings of gateway/ import only the floors below them: api → runtime → store, clients beside them
knowing only the wire, errors/config/run at the base, app and cli on top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "gateway"

# wing -> the gateway modules (first component under gateway/) it must not import
FORBIDDEN = {
    "store": {"runtime", "api", "clients", "app", "cli"},
    "runtime": {"api", "clients", "app", "cli"},
    "api": {"clients", "app", "cli"},
    "clients": {"api", "runtime", "store", "app", "events", "errors", "config"},
}


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


def module_graph() -> dict[str, set[str]]:
    """Each module of acp/, agents/ and gateway/ -> the modules of them it imports when it is imported (its top-level
    imports; not those inside functions or under TYPE_CHECKING)."""
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
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
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
