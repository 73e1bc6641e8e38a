"""Durable baseline relay in its own process: the bare relay (bench/bare_relay.py) plus a commit before each send.

What a minimal relay that keeps what it relays does, and no more: it reads whatever the agent has written (a
chunk, split into lines), commits the batch to SQLite as one row, the lines joined by newlines (as the gateway's
journal writes one row per group commit), in WAL mode with `synchronous=NORMAL` (the gateway's journal settings,
gateway/store/journal.py), and only then broadcasts it: each line as its own WebSocket message, or, when the
client asked with "batch:N", the batch as one JSON array. No parsing, no ids, no retention, SQLite's own
checkpoints (every 1,000 pages, on the committing connection).

It starts `bench/flood_agent.py`, prints its WebSocket port, and for each text message "N" or "batch:N" a client
sends, prompts the agent for N updates and relays them.

Usage: python bench/durable_relay.py DATABASE AGENT_ARGV...
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from typing import Any

from bare_relay import (  # this directory is first on sys.path when run as a script
    send_prompt,
    serve_until_exit,
    start_agent,
)
from websockets.asyncio.server import broadcast

READ_CHUNK = 256 * 1024  # the gateway reads its agents' stdout in these (acp.framing.READ_CHUNK)


async def main(database: str, agent: list[str]) -> None:
    db = sqlite3.connect(database, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS journal (first_id INTEGER PRIMARY KEY, count INTEGER NOT NULL, "
               "frames BLOB NOT NULL)")
    proc, ids = await start_agent(agent)
    assert proc.stdin and proc.stdout
    stdin, stdout = proc.stdin, proc.stdout
    clients: set[Any] = set()
    turn = asyncio.Lock()
    next_row = 1

    async def handler(ws: Any) -> None:
        nonlocal next_row
        clients.add(ws)
        try:
            async for message in ws:
                text = str(message)
                batched = text.startswith("batch:")
                left = int(text.removeprefix("batch:"))
                async with turn:
                    send_prompt(stdin, ids, str(left))
                    partial, answered = b"", False
                    while not answered:
                        chunk = await stdout.read(READ_CHUNK)
                        if not chunk:
                            raise EOFError("the agent closed its stdout")
                        lines = (partial + chunk).split(b"\n")
                        partial = lines.pop()
                        answered = len(lines) > left  # the line after the N updates is the prompt's answer
                        updates = lines[:left]
                        if not updates:
                            continue
                        left -= len(updates)
                        db.execute("BEGIN")
                        db.execute("INSERT INTO journal VALUES (?, ?, ?)", (next_row, len(updates),
                                                                            b"\n".join(updates)))
                        db.execute("COMMIT")
                        next_row += len(updates)
                        if batched:
                            broadcast(clients, b"[" + b",".join(updates) + b"]", text=True)
                        else:
                            for line in updates:
                                broadcast(clients, line, text=True)
        finally:
            clients.discard(ws)

    await serve_until_exit(handler, proc)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
