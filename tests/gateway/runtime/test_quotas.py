"""gateway.runtime.quotas: per-owner caps on stored sessions and history, and the start rate — the pure decisions by
table, then a real gateway where one owner at its caps is refused while another works normally."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.clients.client import RpcCallError
from gateway.runtime.quotas import Quotas, StartRate, journal_share
from tests.gateway_harness import ALICE, BOB, running, two_owner_gateway

QUOTAS = Quotas(max_sessions=3, max_history_bytes=1000, starts_per_minute=60)

REFUSALS = [
    # sessions, history bytes, starting -> the refused limit's name, or None
    (0, 0, True, None),
    (2, 999, True, None),
    (3, 0, True, "max_sessions_per_owner"),
    (3, 0, False, None),  # a turn of an owner at its session cap is fine
    (0, 1000, True, "max_history_bytes_per_owner"),
    (0, 1000, False, "max_history_bytes_per_owner"),
    (5, 5000, True, "max_sessions_per_owner"),
]


@pytest.mark.parametrize(("sessions", "history", "starting", "refused"), REFUSALS)
def test_refusal(sessions: int, history: int, starting: bool, refused: str | None) -> None:
    error = QUOTAS.refusal(sessions, history, starting=starting)
    assert (error.data["name"] if error is not None and error.data else None) == refused
    if error is not None:
        assert error.code == -32014 and "delete sessions" in error.message


def test_a_capped_store_keeps_a_reserve_no_owner_can_take() -> None:
    assert Quotas(max_history_bytes=1 << 30).within_store(0).max_history_bytes == 1 << 30
    assert Quotas(max_history_bytes=1 << 30).within_store(100 << 20).max_history_bytes == 50 << 20
    assert journal_share(256 << 20, 100 << 20) == 25 << 20
    assert journal_share(256 << 20, 0) == 256 << 20


def test_start_rate_is_a_bucket_per_owner() -> None:
    rate = StartRate(per_minute=2)
    assert rate.take("alice", 0.0) is None and rate.take("alice", 0.1) is None
    wait = rate.take("alice", 0.2)
    assert wait is not None and 29.0 < wait <= 30.0  # one start every 30 s
    assert rate.take("bob", 0.2) is None  # another owner's bucket
    assert rate.take("alice", 30.2) is None  # refilled
    assert rate.take("alice", 30.3) is not None


async def test_an_owner_at_its_caps_is_refused_while_another_works(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config="max_sessions_per_owner = 3\nmax_history_bytes_per_owner = 65536\n")
    async with running(gw):
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        start = {"agent": "ref", "cwd": str(tmp_path / "work"), "wait_ready": True}
        views = [await alice.call("task.session.start", start) for _ in range(3)]
        with pytest.raises(RpcCallError) as full:
            await alice.call("task.session.start", start)
        assert (full.value.code, full.value.data["name"], full.value.data["limit"]) == (
            -32014, "max_sessions_per_owner", 3)
        # Alice's history grows past her cap: her next turn is refused, her sessions stay readable.
        first = views[0]["session_id"]
        await alice.call("task.session.prompt", {"session_id": first, "prompt": "/huge 70000"})
        with pytest.raises(RpcCallError) as history:
            await alice.call("task.session.prompt", {"session_id": first, "prompt": "more"})
        assert (history.value.code, history.value.data["name"]) == (-32014, "max_history_bytes_per_owner")
        assert (await alice.call("task.session.history", {"session_id": first}))["entries"]
        # Bob starts, prompts and stores normally all the while.
        theirs = await bob.call("task.session.start", start)
        answer = await bob.call("task.session.prompt", {"session_id": theirs["session_id"], "prompt": "hello"})
        assert answer["stop_reason"] == "end_turn"
        assert len((await bob.call("task.session.history", {"session_id": theirs["session_id"]}))["entries"]) >= 2
        # Deleting what she no longer needs gives her room again.
        await alice.call("task.session.delete", {"session_id": first})
        again = await alice.call("task.session.prompt", {"session_id": views[1]["session_id"], "prompt": "hi"})
        assert again["stop_reason"] == "end_turn"
        assert (await alice.call("task.session.start", start))["state"] == "WAITING_FOR_INPUT"
        await alice.close()
        await bob.close()


async def test_starts_are_rate_limited_per_owner(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config="max_starts_per_minute_per_owner = 2\n")
    async with running(gw):
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        start = {"agent": "ref", "cwd": str(tmp_path / "work")}
        for _ in range(2):
            await alice.call("task.session.start", start)
        with pytest.raises(RpcCallError) as info:
            await alice.call("task.session.start", start)
        assert (info.value.code, info.value.data["name"]) == (-32014, "max_starts_per_minute_per_owner")
        assert 0 < info.value.data["retry_after"] <= 30
        assert (await bob.call("task.session.start", start))["session_id"]  # his own bucket
        await alice.close()
        await bob.close()
