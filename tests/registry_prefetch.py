"""The registry agents the install tests need, installed in the background from the start of the test run.

Installing minion-code (a 700 MB venv) takes over a minute, mostly pip unpacking wheels while the rest of the
suite waits on its own subprocesses: started when collection ends, it is done by the time
tests/test_registry_installs.py asks for it, which then waits for it (with a timeout) like for any event. The
install is the same `acp-gateway agents add` a user runs; the tests assert on its outcome."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("claude-acp@0.101.0", "minion-code@0.1.45")
TEST_FILE = "tests/test_registry_installs.py"


class Prefetch:
    def __init__(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="acp-registry-state-"))
        self.results: dict[str, subprocess.CompletedProcess[str]] = {}
        self._thread = threading.Thread(target=self._run, name="registry-prefetch", daemon=True)

    def start(self) -> Prefetch:
        self._thread.start()
        return self

    def _run(self) -> None:
        for spec in SPECS:
            self.results[spec] = subprocess.run(
                [sys.executable, "-m", "gateway", "agents", "add", spec, "--no-probe", "--state-dir", str(self.state)],
                capture_output=True, text=True, timeout=900, cwd=ROOT)

    def wait(self, timeout: float = 900) -> dict[str, subprocess.CompletedProcess[str]]:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the registry installs were not done after {timeout:.0f} s")
        return self.results

    def remove(self) -> None:
        from agents.registry.manifest import make_writable

        self._thread.join(900)
        make_writable(self.state)
        shutil.rmtree(self.state, ignore_errors=True)


started: Prefetch | None = None


def start_if_needed(nodeids: list[str]) -> None:
    global started
    if started is None and any(n.startswith(TEST_FILE) for n in nodeids):
        started = Prefetch().start()
