"""The web UI's pure fold (gateway/ui/fold.js), tested by node's own test runner: `node --test tests/gateway/ui/`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent


def test_the_ui_fold_passes_its_node_tests() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node (>= 20) is needed for the web UI's unit tests (apt-get install nodejs)")
    done = subprocess.run([node, "--test", "--test-reporter=spec", str(HERE)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"node --test tests/gateway/ui/ failed:\n{done.stdout}\n{done.stderr}"
