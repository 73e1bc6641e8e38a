"""The live-session limit against a real gateway and real agents: it holds under concurrent starts, counts
only the owner's own agents, and a lazy resume on prompt counts like any other launch."""

from __future__ import annotations

import asyncio

import pytest

from gateway.clients.client import RpcCallError
from tests.support.world import Spec, WorldFactory, start

# A gateway of each test's own: one test restarts it, and the other is the module's only other test (a shared
# gateway would save nothing).
GATEWAY = Spec(config="max_live_sessions_per_owner = 3\n")


async def test_concurrent_starts_never_pass_the_limit_and_other_owners_are_unaffected(
        gateway_world: WorldFactory) -> None:
    world = await gateway_world(GATEWAY)
    other = world.another()
    alice, bob = await world.client(), await other.client()
    results = await asyncio.gather(*(start(alice, world.work) for _ in range(8)), return_exceptions=True)
    started = [r for r in results if isinstance(r, dict)]
    refused = [r for r in results if isinstance(r, RpcCallError)]
    assert len(started) == 3 and len(refused) == 5
    assert {(e.code, e.data["limit"]) for e in refused} == {(-32014, 3)}
    listed = await alice.call("task.session.list", {})
    assert sum(s["is_agent_running"] for s in listed["sessions"]) == 3
    # Alice's three live agents do not count against Bob, nor does his refusal speak of her.
    assert (await start(bob, other.work))["is_agent_running"]


async def test_a_lazy_resume_on_prompt_counts(gateway_world: WorldFactory) -> None:
    world = await gateway_world(GATEWAY)
    alice = await world.client()
    views = [await start(alice, world.work) for _ in range(3)]
    await alice.close()
    await world.gateway.stop()  # every agent stops; the sessions wait to be resumed
    await world.gateway.start()
    alice = await world.client()
    for view in views[:2]:
        await alice.call("task.session.resume", {"session_id": view["session_id"]})
    await start(alice, world.work)  # the third live agent
    with pytest.raises(RpcCallError) as info:
        await alice.call("task.session.prompt", {"session_id": views[2]["session_id"], "prompt": "hi"})
    assert info.value.code == -32014
