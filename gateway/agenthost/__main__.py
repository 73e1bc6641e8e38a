"""`python -m gateway.agenthost SPEC`: an agent host, detached (docs/agent-hosts.md).

The gateway starts this in a session of its own with stdout a pipe; it reads its spec file (and deletes it), forks
and lets the parent exit at once, so the host is nobody's child but init's (or the subreaper's): the gateway holds
no zombie and may die without it. The host says `ready <host pid> <agent pid>` (or `error <why>`) on that pipe
once its socket listens, then lets go of it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from .host import run
from .spec import take_spec


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m gateway.agenthost SPEC_FILE", file=sys.stderr)
        return 2
    os.umask(0o077)  # the socket and the spool are the host's alone from their first byte
    try:
        spec = take_spec(Path(argv[0]))
    except (OSError, ValueError, TypeError) as exc:
        print(f"error the host's spec cannot be read: {exc}", flush=True)
        return 1
    if os.fork() != 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    log = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if spec.log_path else null
    os.dup2(log, 2)
    ready_pipe = os.dup(1)
    os.dup2(null, 1)

    def ready(message: str) -> None:
        os.write(ready_pipe, message.encode() + b"\n")
        os.close(ready_pipe)

    asyncio.run(run(spec, ready))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
