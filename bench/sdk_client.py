"""Baseline: the official Python ACP SDK's client (`agent-client-protocol`) receiving the same flood.

Runs in its own venv (its import name `acp` collides with ours). Prints one JSON line: updates, seconds.
"""

import asyncio
import json
import sys
import time

from acp.stdio import spawn_agent_process

from acp import text_block


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.done = asyncio.Event()
        self.want = 0

    async def session_update(self, session_id, update, **kwargs):
        self.n += 1
        if self.n >= self.want:
            self.done.set()

    async def request_permission(self, *args, **kwargs):
        raise NotImplementedError

    def __getattr__(self, name):
        async def missing(*args, **kwargs):
            raise NotImplementedError(name)
        return missing


async def main(count: int, agent: list[str]) -> None:
    counter = Counter()
    counter.want = count
    async with spawn_agent_process(lambda _agent: counter, agent[0], *agent[1:]) as (conn, _proc):
        await conn.initialize(protocol_version=1)
        session = await conn.new_session(cwd="/tmp", mcp_servers=[])
        start = time.perf_counter()
        await conn.prompt(session_id=session.session_id, prompt=[text_block(str(count))])
        deadline = 30 + count / 2000  # run.py's flood_deadline
        try:
            await asyncio.wait_for(counter.done.wait(), deadline)
        except TimeoutError:
            missed = f"subscriber 1 got {counter.n:,} of {count:,} updates (not within {deadline:.0f} s)"
            raise SystemExit(missed) from None
        print(json.dumps({"updates": counter.n, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2:]))
