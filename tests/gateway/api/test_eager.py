"""gateway.api.eager: a coroutine's first step runs at once; only one that suspends becomes a task, which carries on
with results, exceptions and cancellation exactly as a task from the start would."""

from __future__ import annotations

import asyncio

import pytest

from gateway.api.eager import start_eagerly


async def test_a_coroutine_that_never_suspends_runs_now_without_a_task() -> None:
    seen: list[str] = []

    async def quick() -> None:
        seen.append("ran")

    assert start_eagerly(quick()) is None
    assert seen == ["ran"]


async def test_a_suspending_coroutine_is_carried_on_by_a_task() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    seen: list[object] = []

    async def slow() -> None:
        seen.append("first step")
        seen.append(await gate)
        await asyncio.sleep(0)  # a bare yield to the loop
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eagerly(slow())
    assert task is not None and seen == ["first step"]
    gate.set_result(42)
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == ["first step", 42]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[-1] == "cancelled"


async def test_exceptions_reach_the_caller_or_the_task() -> None:
    async def fails_at_once() -> None:
        raise ValueError("now")

    with pytest.raises(ValueError, match="now"):
        start_eagerly(fails_at_once())

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("later")

    task = start_eagerly(fails_later())
    assert task is not None
    with pytest.raises(KeyError, match="later"):
        await task
