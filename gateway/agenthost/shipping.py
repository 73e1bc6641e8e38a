"""The agent host as one file to send where it runs (docs/agent-hosts.md): a zip application of its own modules
and the few of `acp` it imports, runnable as `python3 -I host.pyz SPEC` by a Python 3.11 or later with nothing
installed (orjson, where it is missing, is stood in for by `json_fallback`). Built in memory, the same bytes for the
same code (fixed times and order), so a remote copy can be known by its hash."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # the directory holding the `gateway` and `acp` packages
# The host's import closure (tests/gateway/agenthost/test_shipping.py runs the result where nothing else is).
MODULES = (
    "gateway/__init__.py", "gateway/agenthost/__init__.py", "gateway/agenthost/__main__.py",
    "gateway/agenthost/host.py", "gateway/agenthost/host_terminals.py", "gateway/agenthost/protocol.py",
    "gateway/agenthost/spec.py", "gateway/agenthost/spool.py", "gateway/agenthost/json_fallback.py",
    "acp/__init__.py", "acp/budget.py", "acp/errors.py", "acp/fs.py", "acp/process.py", "acp/proctree.py",
    "acp/terminals.py",
)
BOOTSTRAP = '''"""An ACP gateway agent host, shipped (gateway/agenthost/shipping.py): python3 -I host.pyz SPEC."""
import importlib
import importlib.util
import sys

if importlib.util.find_spec("orjson") is None:
    sys.modules["orjson"] = importlib.import_module("gateway.agenthost.json_fallback")
from gateway.agenthost.__main__ import main

sys.exit(main(sys.argv[1:]))
'''
FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def host_application() -> bytes:
    """The zip application's bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in [("__main__.py", BOOTSTRAP.encode()),
                           *((module, (ROOT / module).read_bytes()) for module in MODULES)]:
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def application_hash(application: bytes) -> str:
    return hashlib.sha256(application).hexdigest()[:16]
