"""A stand-in gateway for the agent host's tests, run as its own process so a test can kill -9 it while attached:
reads the secret from stdin (never argv), attaches, asks the agent for a flood, and prints `<offset>` for each line
it has processed (its "commit"), acking every 50; past `stall_at` lines it reads no more (a hung gateway, killed
mid-flood)."""

from __future__ import annotations

import asyncio
import sys

from gateway.agenthost.client import HostConnection


async def main(socket_path: str, incarnation: int, flood: int, stall_at: int) -> None:
    secret = sys.stdin.readline().strip()
    connection = await HostConnection.attach(socket_path, secret, incarnation, 0)
    connection.send(f"flood {flood}".encode())
    while (item := await connection.next_line()) is not None:
        offset, _ = item
        print(offset, flush=True)
        if offset % 50 == 0:
            connection.ack(offset)
        if offset == stall_at:
            await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
