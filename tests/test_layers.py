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


def test_deprecated_client_module_still_works() -> None:
    with pytest.warns(DeprecationWarning, match="gateway.clients.client"):
        import importlib
        import sys
        sys.modules.pop("gateway.client", None)
        module = importlib.import_module("gateway.client")
    assert module.OwnerSessionClient.__module__ == "gateway.clients.client"
