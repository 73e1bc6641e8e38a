"""The agent host shipped as one file (gateway/agenthost/shipping.py), run by a Python that sees nothing installed
(this one, isolated and without its site-packages: no orjson, no gateway): it starts, relays the numbered agent's
lines to an attached gateway once and in order, takes the gateway's lines, and reattaches. The first step of hosts
on other machines (issue 47, remote hosts)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from gateway.agenthost.client import new_secret, start_host
from gateway.agenthost.shipping import application_hash, host_application

from .support import Started, numbered, numbered_spec, read_lines

BARE_PYTHON = [sys.executable, "-I", "-S"]  # isolated, no site-packages: the standard library alone


def test_the_application_is_the_same_bytes_for_the_same_code() -> None:
    assert host_application() == host_application()
    assert len(application_hash(host_application())) == 16


async def test_a_bare_python_runs_the_shipped_host(tmp_path: Path) -> None:
    bare = await asyncio.create_subprocess_exec(*BARE_PYTHON, "-c", "import orjson", stderr=asyncio.subprocess.DEVNULL)
    assert await bare.wait() != 0, "the bare Python sees orjson: the test would prove nothing"
    application = tmp_path / "host.pyz"
    application.write_bytes(host_application())
    secret, hashed = new_secret()
    spec = numbered_spec(tmp_path, hashed)
    started = Started(await start_host(spec, starter=[*BARE_PYTHON, str(application)]), secret, spec)
    try:
        assert Path(f"/proc/{started.handle.host_pid}/exe").resolve().name.startswith("python3")
        assert str(application) in Path(f"/proc/{started.handle.host_pid}/cmdline").read_bytes().decode()
        first = await started.attach(incarnation=1, committed=0)
        first.send(b"flood 300")
        seen = await read_lines(first, 120)
        first.ack(100)
        await first.close()
        second = await started.attach(incarnation=2, committed=100)
        rest = await read_lines(second, 200)
        assert [offset for offset, _ in rest] == list(range(101, 301)) and numbered(seen + rest)
        await second.close()
    finally:
        started.kill()
