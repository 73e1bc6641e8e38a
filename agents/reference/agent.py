"""The reference agent: a real ACP v1 agent (stdio, NDJSON) with persistent sessions and fault flags.

It is the default agent of the gateway, the peer of most tests, and a worked example for agent
authors. Sessions are stored one JSON file each under `--state-dir`, so `session/load` (which
replays the history before answering) and `session/resume` (no replay) work across restarts.

Faults are chosen per method with `--fault METHOD=KIND` (see FAULTS), and per prompt with commands
at the start of the prompt text (see `commands.py`): `/read`, `/write`, `/call`, `/permission`, `/permissions N`,
`/tool`, `/sh CMD` (its own shell), `/fill BYTES`, `/plan A; B`, `/stream N`, `/huge N`, `/crash`, `/hang`, `/fail`,
`/unknown-update`, `/sleep S`, `/mode M` (the agent changes its own mode), `/config`, `/mcp`, `/dirs`,
`/term [--limit N] [--cwd DIR] [--keep] [--kill] CMD` (CMD in a terminal of the client's, embedded in a tool
call: a flooding `yes`, a `sleep` that never ends, a command that ignores SIGTERM are the faults to try),
`/termout ID` (asks for the output of a terminal by id, known or not), `/meta` (says the prompt's `_meta`; sends an
update with a `_meta` of its own), `/withdraw` (a permission request withdrawn with `$/cancel_request`) and
`/elicit form|url|bad` (a question for the person at the client: a form, a link to open — then
`elicitation/complete` —, or a form whose schema no client can take).

Sessions offer modes, models and config options (`agents.reference.options`; `--config-style` chooses the
shapes), slash commands (`available_commands_update` after every session set-up) and usage (`usage_update`
after every turn); with faults for the gateway's restore of choices: `--forget-config` (load and resume bring
back the defaults), `--refuse-value ID=VALUE`, `--drop-option-after-restart ID`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import orjson

from acp.jsonrpc import Connection

from .auth import login
from .cli_args import parse_args
from .config import BEHAVIOUR_FAULTS, ERROR_FAULTS, FAULTS, LOGGED_IN, QUIRKS, Config
from .example import ExampleAgent
from .faults import ReferenceAgent
from .store import Session

# What this module has always offered to import; the code behind these names lives in the modules named above.
__all__ = ["BEHAVIOUR_FAULTS", "ERROR_FAULTS", "FAULTS", "LOGGED_IN", "QUIRKS", "Config", "ExampleAgent",
           "QuirkyWriter", "ReferenceAgent", "Session", "login", "main", "parse_args", "serve"]


class QuirkyWriter:
    """The agent's stdout as its Connection writes it, with the response quirks of `--quirk` applied."""

    WIRE = frozenset({"string-id-null", "result-and-error", "multiline-errors"})

    def __init__(self, inner: asyncio.StreamWriter, quirks: frozenset[str]) -> None:
        self.inner = inner
        self.quirks = quirks & self.WIRE

    def write(self, data: bytes) -> None:
        if self.quirks:
            msg = orjson.loads(data)
            if "method" not in msg:
                if "string-id-null" in self.quirks and isinstance(msg.get("id"), str):
                    msg["id"] = None
                if "error" in msg and "result-and-error" in self.quirks:
                    msg["result"] = None
                if "error" in msg and "multiline-errors" in self.quirks:
                    msg["error"]["message"] += "\n    at handle (reference/agent.py)"
            data = orjson.dumps(msg) + b"\n"
        self.inner.write(data)

    async def drain(self) -> None:
        await self.inner.drain()

    def close(self) -> None:
        self.inner.close()

    def is_closing(self) -> bool:
        return self.inner.is_closing()


async def _stdio() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The process's stdin and stdout as asyncio streams (stdout through a copy of its descriptor)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    )
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)


def _start_up_faults(config: Config, writer: asyncio.StreamWriter) -> None:
    """What the flags make the process do before it reads a message: a grandchild left behind, stderr flooded,
    noise on stdout."""
    if config.grandchild_pidfile:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        Path(config.grandchild_pidfile).write_text(str(child.pid))
    if config.stderr_flood:
        line = b"reference agent stderr flood " + b"." * 70 + b"\n"
        for _ in range(config.stderr_flood // len(line) + 1):
            sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
    for _ in range(config.noise):
        writer.write(b"reference-agent noise: starting up\n")


async def serve(config: Config) -> None:
    """The agent on stdin and stdout until the client closes stdin (and on, with `--linger`)."""
    reader, writer = await _stdio()
    agent = ReferenceAgent(config)
    agent.stdout = writer
    _start_up_faults(config, writer)
    conn = Connection(reader, QuirkyWriter(writer, config.quirks), on_request=agent.handle,
                      on_notification=agent.on_notification, name="client")
    agent.conn = conn
    conn.start()
    await conn.wait_closed()
    if config.linger:
        await asyncio.sleep(3600)


def main(argv: list[str] | None = None) -> NoReturn:
    config = parse_args(argv, __doc__)
    if config.login:
        login(config)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config))
    sys.exit(0)
