"""Where the tests find the clients and agents someone else wrote, installed pinned by `make sdk` and `make interop`
(both part of `make test`); a bare `pytest` that runs before them makes them here."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTEROP = ROOT / ".interop" / "node_modules"


def sdk_python() -> Path:
    """The official Python SDK's venv (`make sdk`, pinned)."""
    if not (ROOT / ".sdk-venv" / ".installed").exists():
        subprocess.run(["make", "-s", "sdk"], cwd=ROOT, check=True, timeout=600)
    return ROOT / ".sdk-venv" / "bin" / "python"


def interop_node() -> Path:
    """Node.js with the official TypeScript SDK and the pinned third-party agents beside it (`make interop`)."""
    subprocess.run(["make", "-s", "interop"], cwd=ROOT, check=True, timeout=900)  # at once when nothing changed
    return INTEROP / ".bin" / "node"


def acpx() -> list[str]:
    """acpx, the headless ACP client, on its own Node 22 (`make acpx`, pinned): the argv that runs it."""
    subprocess.run(["make", "-s", "acpx"], cwd=ROOT, check=True, timeout=900)
    bin_dir = ROOT / ".interop-acpx" / "node_modules" / ".bin"
    return [str(bin_dir / "node"), str(ROOT / ".interop-acpx" / "node_modules" / "acpx" / "dist" / "cli.js")]
