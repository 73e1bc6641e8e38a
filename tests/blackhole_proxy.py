"""A TCP proxy that can stop forwarding: a link that silently stops delivering (sockets stay open, nothing moves),
which a closed socket does not imitate. The Node tests have the same in clients/typescript/test/harness.mjs."""

from __future__ import annotations

import asyncio
import contextlib


class BlackholeProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> BlackholeProxy:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def url(self, path: str = "/rpc") -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def blackhole(self) -> None:
        """Nothing is delivered any more, either way; nothing is closed."""
        self.flowing.clear()

    def restore(self) -> None:
        self.flowing.set()

    async def close(self) -> None:
        for writer in list(self.writers):
            writer.close()
        if self.server is not None:
            self.server.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        self.writers -= {writer, up_writer}

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await self.flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                await self.flowing.wait()  # read while it flowed, held while it does not
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()
