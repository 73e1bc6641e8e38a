"""Baseline relay in its own process: an asyncio NDJSON reader feeding `websockets` broadcast, no gateway logic.

It runs as a separate process, like the gateway, so both relays sit between the same three parties
(agent → relay → subscriber) and pay the same process wake-ups. It starts `bench/flood_agent.py`,
prints its WebSocket port, and for each text message "N" or "lat:N" a client sends, prompts the agent
and broadcasts the N update lines it answers with, one WebSocket message per line.

Usage: python bench/bare_relay.py AGENT_ARGV...
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import orjson
from websockets.asyncio.server import broadcast, serve


async def start_agent(agent: list[str]) -> tuple[asyncio.subprocess.Process, Iterator[int]]:
    """The flood agent, initialized with a session: (its process, the ids of the requests to come)."""
    proc = await asyncio.create_subprocess_exec(*agent, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, limit=1 << 24)
    assert proc.stdin and proc.stdout
    ids = itertools.count()
    for method in ("initialize", "session/new"):
        proc.stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": next(ids), "method": method, "params": {}}) + b"\n")
        await proc.stdout.readline()
    return proc, ids


def send_prompt(stdin: asyncio.StreamWriter, ids: Iterator[int], text: str) -> None:
    """Ask the flood agent for a turn: `text` is "N" (N updates) or "lat:N" (N stamped ones)."""
    stdin.write(orjson.dumps({"jsonrpc": "2.0", "id": next(ids), "method": "session/prompt",
                              "params": {"prompt": [{"type": "text", "text": text}]}}) + b"\n")


async def serve_until_exit(handler: Callable[[Any], Awaitable[None]], proc: asyncio.subprocess.Process) -> None:
    """Serve WebSockets on a free loopback port, printed on stdout for the bench, until the agent exits."""
    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        print(next(iter(server.sockets)).getsockname()[1], flush=True)
        await proc.wait()


async def main(agent: list[str]) -> None:
    proc, ids = await start_agent(agent)
    assert proc.stdin and proc.stdout
    stdin, stdout = proc.stdin, proc.stdout
    clients: set[Any] = set()
    turn = asyncio.Lock()

    async def handler(ws: Any) -> None:
        clients.add(ws)
        try:
            async for message in ws:
                text = str(message)
                count = int(text.removeprefix("lat:"))
                async with turn:
                    send_prompt(stdin, ids, text)
                    for _ in range(count):
                        broadcast(clients, (await stdout.readline()).decode())
                    await stdout.readline()  # the prompt's answer
        finally:
            clients.discard(ws)

    await serve_until_exit(handler, proc)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
