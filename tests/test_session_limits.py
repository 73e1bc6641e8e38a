"""The live-session limit against a real gateway and real agents: it holds under concurrent starts, counts
only the owner's own agents, and a lazy resume on prompt counts like any other launch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.clients.client import RpcCallError
from tests.gateway_harness import ALICE, BOB, GatewayProcess, two_owner_gateway


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gw = two_owner_gateway(tmp_path, "max_live_sessions_per_owner = 3\n")
    await gw.start()
    yield gw
    await gw.stop()


async def test_concurrent_starts_never_pass_the_limit_and_other_owners_are_unaffected(gateway: GatewayProcess,
                                                                                       tmp_path: Path) -> None:
    alice, bob = await gateway.client(ALICE), await gateway.client(BOB)
    start = {"agent": "ref", "cwd": str(tmp_path / "work"), "wait_ready": True}
    results = await asyncio.gather(*(alice.call("task.session.start", start) for _ in range(8)),
                                   return_exceptions=True)
    started = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, RpcCallError)]
    assert len(started) == 3 and len(refused) == 5
    assert {(e.code, e.data["limit"]) for e in refused} == {(-32014, 3)}
    listed = await alice.call("task.session.list", {})
    assert sum(s["is_agent_running"] for s in listed["sessions"]) == 3
    # Alice's three live agents do not count against Bob, nor does his refusal speak of her.
    assert (await bob.call("task.session.start", start))["is_agent_running"]
    await alice.close()
    await bob.close()


async def test_a_lazy_resume_on_prompt_counts(gateway: GatewayProcess, tmp_path: Path) -> None:
    alice = await gateway.client(ALICE)
    start = {"agent": "ref", "cwd": str(tmp_path / "work"), "wait_ready": True}
    views = [await alice.call("task.session.start", start) for _ in range(3)]
    await alice.close()
    await gateway.stop()  # every agent stops; the sessions wait to be resumed
    await gateway.start()
    alice = await gateway.client(ALICE)
    for view in views[:2]:
        await alice.call("task.session.resume", {"session_id": view["session_id"]})
    await alice.call("task.session.start", start)  # the third live agent
    with pytest.raises(RpcCallError) as info:
        await alice.call("task.session.prompt", {"session_id": views[2]["session_id"], "prompt": "hi"})
    assert info.value.code == -32014
    await alice.close()
