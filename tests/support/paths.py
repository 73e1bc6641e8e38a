"""Where the tests find the repository: one constant, so a test file's place under tests/ never matters."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
