"""acp.offload: file work runs off the loop on bounded daemon threads, and a hung call stops being waited for."""

from __future__ import annotations

import threading

import pytest

from acp.errors import RpcError
from acp.offload import Offloader


async def test_results_and_errors_come_back() -> None:
    files = Offloader()
    assert await files.run("adding", lambda a, b: a + b, 2, 3) == 5

    def boom() -> None:
        raise RpcError(-32602, "file not found: x")

    with pytest.raises(RpcError, match="file not found"):
        await files.run("reading x", boom)


async def test_a_hung_call_times_out_and_holds_its_slot_until_it_returns() -> None:
    release = threading.Event()
    files = Offloader(slots=1, timeout=0.05)
    with pytest.raises(RpcError, match=r"no answer from the file system within 0\.05s"):
        await files.run("reading slow", release.wait)
    # Its thread still hangs: the session's one slot is taken, and the next call says so at once.
    with pytest.raises(RpcError, match="too many file operations"):
        await files.run("reading other", lambda: "x")
    release.set()  # the file system answers at last: the slot comes back
    for thread in threading.enumerate():
        if thread.name == "acp-file":
            thread.join(5)
    assert await files.run("reading other", lambda: "x") == "x"
