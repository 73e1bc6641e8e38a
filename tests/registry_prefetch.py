"""The registry agents the install tests need, installed in the background from the start of the test run.

Installing minion-code (a 700 MB venv) takes over a minute, mostly pip unpacking wheels while the rest of the
suite waits on its own subprocesses. The run's first process (pytest itself, or the controller of pytest-xdist's
workers) starts the installs when it is configured, where the run includes tests/agents/test_registry_installs.py, and
says where in the environment its workers inherit; the install tests wait for the result file (with a timeout).
The installs are the same `acp-gateway agents add` a user runs; the tests assert on their outcome."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("claude-acp@0.101.0", "minion-code@0.1.45")
TEST_FILE = "tests/agents/test_registry_installs.py"
STATE_ENV = "ACP_TEST_REGISTRY_STATE"
RESULT = "prefetch.json"  # written last, in the state directory: the installs are done

_thread: threading.Thread | None = None


def _wanted(args: list[str]) -> bool:
    """The run includes the install tests: no path given (testpaths), or one that holds the file."""
    paths = [a.split("::", 1)[0] for a in args if not a.startswith("-")]
    if not paths:
        return True
    target = (ROOT / TEST_FILE).resolve()
    return any(target == Path(p).resolve() or Path(p).resolve() in target.parents for p in paths)


def start(config: Any) -> None:
    """At configure time of the run's first process (never of an xdist worker; never for the run of the `serial`
    tests alone or of the unit tests (`make check`), which hold no install test)."""
    global _thread
    if (hasattr(config, "workerinput") or STATE_ENV in os.environ or not _wanted(list(config.args))
            or config.getoption("markexpr", "").strip() in ("serial", "unit")):
        return
    state = Path(tempfile.mkdtemp(prefix="acp-registry-state-"))
    os.environ[STATE_ENV] = str(state)
    _thread = threading.Thread(target=_install, args=(state,), name="registry-prefetch", daemon=True)
    _thread.start()


def _install(state: Path) -> None:
    results = {}
    for spec in SPECS:
        done = subprocess.run([sys.executable, "-m", "gateway", "agents", "add", spec, "--no-probe", "--state-dir",
                               str(state)], capture_output=True, text=True, timeout=900, cwd=ROOT)
        results[spec] = {"returncode": done.returncode, "output": (done.stdout + done.stderr)[-4000:]}
    temporary = state / f".{RESULT}"
    temporary.write_bytes(orjson.dumps(results))
    temporary.replace(state / RESULT)


def state_dir() -> Path:
    """The state directory of the installs; started here and now when the run did not (a worker of another run)."""
    if STATE_ENV not in os.environ:
        state = Path(tempfile.mkdtemp(prefix="acp-registry-state-"))
        os.environ[STATE_ENV] = str(state)
        _install(state)
    return Path(os.environ[STATE_ENV])


def wait(timeout: float = 900) -> dict[str, Any]:
    """What each install did, once all are done (polled: another process may be installing)."""
    result = state_dir() / RESULT
    deadline = time.monotonic() + timeout
    while not result.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the registry installs were not done after {timeout:.0f} s")
        time.sleep(0.5)
    data: dict[str, Any] = orjson.loads(result.read_bytes())
    return data


def finish(config: Any) -> None:
    """At the end of the run's first process: the installs removed (their trees are read-only)."""
    if hasattr(config, "workerinput") or STATE_ENV not in os.environ:
        return
    if _thread is not None:
        _thread.join(900)
    from agents.registry.manifest import make_writable

    state = Path(os.environ.pop(STATE_ENV))
    make_writable(state)
    shutil.rmtree(state, ignore_errors=True)
