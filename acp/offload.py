"""Blocking file work off the event loop, bounded and timed: a few daemon threads per agent, never the loop's
shared executor.

A read that hangs (a network filesystem that stopped answering) must not hold a thread everyone else needs,
must not keep the turn waiting forever, and must not keep the process from exiting: each call gets a daemon
thread of its own, at most `slots` at a time per owner of an `Offloader`, and the caller stops waiting after
`timeout` with an error the agent can read.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import INTERNAL_ERROR, RpcError

T = TypeVar("T")


class Offloader:
    def __init__(self, slots: int = 4, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._slots = threading.BoundedSemaphore(slots)

    async def run(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        if not self._slots.acquire(blocking=False):
            raise RpcError(INTERNAL_ERROR, f"{what}: too many file operations of this session are still running "
                           "(a file system may be hanging); try again later")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)

        def work() -> None:
            try:
                result = fn(*args)
            except BaseException as exc:  # handed to the caller, whatever it is
                loop.call_soon_threadsafe(settle, None, exc)
            else:
                loop.call_soon_threadsafe(settle, result, None)
            finally:
                self._slots.release()

        threading.Thread(target=work, name="acp-file", daemon=True).start()
        try:
            return await asyncio.wait_for(asyncio.shield(done), self.timeout)
        except TimeoutError:
            raise RpcError(INTERNAL_ERROR, f"{what}: no answer from the file system within {self.timeout:g}s") from None
