"""Start a coroutine eagerly: its first step runs now, and only a coroutine that suspends becomes a task.

What Python 3.12's `asyncio.eager_task_factory` does, for the one place that needs it on 3.11: most calls a
frontend makes (status, get, list of live sessions) finish without ever suspending, and the task each frame
used to get cost ~15% of a status call's CPU (measured with py-spy under 8 concurrent clients).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any


def start_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run `coro` up to its first suspension; None if it finished, else the task that goes on with it.
    An exception raised before the first suspension propagates to the caller."""
    try:
        first = coro.send(None)
    except StopIteration:
        return None
    return asyncio.ensure_future(_Continued(coro, first))


class _Continued:
    """Awaitable that hands the loop what the coroutine yielded at its first suspension, then drives it on."""

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, None]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # cancellation or an exception thrown in by the task
                try:
                    value = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    value = coro.send(sent)
                except StopIteration:
                    return
