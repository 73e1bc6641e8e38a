"""What tests read back from a running gateway: what a command wrote in an agent's terminal, and `/healthz`."""

from __future__ import annotations

import asyncio

from tests.gateway_harness import GatewayProcess


async def terminal_said(gw: GatewayProcess, token: str | None, sid: str, command: str) -> str:
    """What `command` wrote in a terminal the agent asked for (its `terminal_output` events)."""
    client = await gw.client(token)
    try:
        await client.call("task.session.subscribe", {"session_id": sid})
        await client.call("task.session.prompt", {"session_id": sid, "prompt": f"/term {command}"})
        out: list[str] = []
        while True:
            event = (await client.next_notification(20))["params"]
            if event["type"] == "terminal_output":
                out.append(event["data"]["text"])
            elif event["type"] == "turn_ended":
                return "".join(out)
    finally:
        await client.close()


async def healthz(port: int) -> str:
    """The status line of a gateway's `GET /healthz`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    status = (await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)).decode().strip()
    writer.close()
    return status
