"""The floor under a cold start: the gateway's chosen stack alone (asyncio, websockets, pydantic with one model,
aiosqlite, orjson, prometheus_client), a WebSocket server listening, nothing of the gateway. bench/sections/hosts.py
times it from process start to its line, as it times the gateway's start to "listening"."""

import asyncio

import aiosqlite  # noqa: F401
import orjson  # noqa: F401
import prometheus_client  # noqa: F401
from pydantic import BaseModel, Field
from websockets.asyncio.server import ServerConnection, serve


class Settings(BaseModel):  # the first model built pays pydantic's own start, as the gateway's configuration does
    port: int = Field(default=0, ge=0)
    host: str = "127.0.0.1"


async def main() -> None:
    settings = Settings()

    async def handler(connection: ServerConnection) -> None:
        await connection.close()

    async with serve(handler, settings.host, settings.port) as server:
        port = server.sockets[0].getsockname()[1]
        print(f"listening on ws://{settings.host}:{port}/", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
