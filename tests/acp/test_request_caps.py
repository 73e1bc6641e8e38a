"""An agent's requests waiting for answers are bounded per session and per owner (acp/budget.py): past the cap a
request is answered at once with -32014 and nothing of it is kept; a cancel with the cap's worth waiting ends within
its grace; another owner is served meanwhile."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp.budget import RequestBudget
from tests.gateway_harness import ALICE, BOB, EventLog, running, two_owner_gateway

CAP = 16
FLOOD = 300


@pytest.mark.unit
@pytest.mark.parametrize(("count", "nbytes", "parent", "sizes", "refused_at"), [
    (3, 1000, None, [10, 10, 10, 10], 3),  # the fourth request waits past the count
    (10, 25, None, [10, 10, 10], 2),  # the third passes the bytes
    (10, 1000, (2, 1000), [10, 10, 10], 2),  # the owner's count holds however much the session may
])
def test_a_budget_refuses_past_its_count_or_bytes_or_its_parents(count: int, nbytes: int,
                                                                 parent: tuple[int, int] | None, sizes: list[int],
                                                                 refused_at: int) -> None:
    owner = RequestBudget(*parent, "owner o", "max_agent_requests_per_owner") if parent else None
    session = RequestBudget(count, nbytes, "session s", "max_agent_requests_per_session", owner)
    said = [session.take(size) for size in sizes]
    assert [s is None for s in said] == [i < refused_at for i in range(len(sizes))]
    assert said[refused_at] is not None and "waiting for answers" in said[refused_at]
    for size in sizes[:refused_at]:
        session.give(size)
    assert (session.taken, session.taken_bytes) == (0, 0)
    assert owner is None or (owner.taken, owner.taken_bytes) == (0, 0)


@pytest.mark.unit
@pytest.mark.parametrize(("session_rate", "owner_rate", "refusals", "delays"), [
    (100, 0, [(0.0, 10), (0.0, 1)], [0.0, 0.01]),  # a tenth of a second's worth at once, then the pace
    (100, 0, [(0.0, 30)], [0.2]),  # past the burst: the time the rest take at the rate
    (100, 0, [(0.0, 10), (1.0, 10), (1.0, 1)], [0.0, 0.0, 0.01]),  # the burst refills, never past its size
    (0, 0, [(0.0, 10_000)], [0.0]),  # unpaced
    (1000, 100, [(0.0, 30)], [0.2]),  # the owner's pace holds however fast the session's may go
])
def test_refusals_are_read_at_their_pace(session_rate: float, owner_rate: float, refusals: list[tuple[float, int]],
                                         delays: list[float]) -> None:
    owner = RequestBudget(256, 1 << 20, "owner o", "max_agent_requests_per_owner", refusal_rate=owner_rate)
    session = RequestBudget(64, 1 << 20, "session s", "max_agent_requests_per_session", owner,
                            refusal_rate=session_rate)
    assert [session.paced(now, n) for now, n in refusals] == pytest.approx(delays)


async def test_a_question_flood_is_capped_and_its_cancel_ends_in_time(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=f"max_agent_requests_per_session = {CAP}\ncancel_grace = 2.0\n"
                                            "stop_grace = 2.0\n")
    async with running(gw):
        bob, alice = await gw.client(BOB), await gw.client(ALICE)
        log = EventLog(bob)
        await bob.call("task.session.subscribe", {})
        sid = (await bob.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                     "wait_ready": True}))["session_id"]
        other = (await alice.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                         "wait_ready": True}))["session_id"]
        turn = asyncio.ensure_future(bob.call("task.session.prompt", {"session_id": sid,
                                                                      "prompt": f"/permissions {FLOOD}"}))
        def said(text: str) -> Any:
            def matches(e: dict[str, Any]) -> bool:
                update = e["data"].get("update") or {} if e["type"] == "session_update" else {}
                return text in ((update.get("content") or {}).get("text") or "")
            return matches
        # The agent says so once every one of its requests has gone out (the gateway read them all before this).
        await log.wait(said(f"asked {FLOOD} permissions"), 30)
        # Another owner is answered meanwhile.
        assert (await alice.call("task.session.status", {"session_id": other}))["session_id"] == other
        asked = [e for e in log.events if e["type"] == "permission_requested" and e["session_id"] == sid]
        assert len(asked) <= CAP
        started = time.monotonic()
        await bob.call("task.session.cancel_turn", {"session_id": sid})
        assert await asyncio.wait_for(turn, 2.0 + 2.0 + 5) == {"stop_reason": "cancelled"}
        took = time.monotonic() - started
        tallied = (await log.wait(said("permissions: "), 10))["data"]["update"]["content"]["text"]
        tally = orjson.loads(tallied.split("permissions: ", 1)[1])
        # Past the cap: refused at once, nothing kept; those that waited were answered cancelled.
        assert tally.get("error -32014", 0) == FLOOD - CAP, (tallied, took)
        assert tally.get("cancelled", 0) == CAP, tallied
        assert len([e for e in log.events if e["type"] == "permission_requested" and e["session_id"] == sid]) == CAP
        await bob.close()
        await alice.close()
