"""After a restart, the event stream says which sessions need a resume (issue 45, item 5): a frontend that
resubscribes from its cursor gets a `session_status` per session whose agent was running — `is_agent_running: false`,
`needs_resume`, `resume_reason` — whether the gateway stopped cleanly or was killed; and every `session_status`
carries those two fields (one shape)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway_harness import GatewayProcess, reference_profile, running, subscribed


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    gw = GatewayProcess(tmp_path / "state", agents)
    async with running(gw):
        yield gw


def needs_resume(sid: str) -> Any:
    return lambda e: (e["type"] == "session_status" and e["session_id"] == sid
                      and e["data"]["is_agent_running"] is False and e["data"]["needs_resume"] is True)


@pytest.mark.parametrize("how", ["stop", "kill9"])
async def test_a_resubscriber_learns_which_sessions_need_a_resume(gateway: GatewayProcess, tmp_path: Path,
                                                                  how: str) -> None:
    client, log = await subscribed(gateway)
    sids = [(await client.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                      "wait_ready": True}))["session_id"] for _ in range(2)]
    await client.call("task.session.prompt", {"session_id": sids[0], "prompt": "hello"})
    # Every session_status has the one shape, a live session's too.
    running_status = await log.wait(lambda e: e["type"] == "session_status" and e["session_id"] == sids[0]
                                    and e["data"]["is_agent_running"])
    assert (running_status["data"]["needs_resume"], running_status["data"]["resume_reason"]) == (False,
                                                                                                "agent_running")
    cursor = (await client.call("task.session.list", {}))["event_cursor"]
    await client.close()
    if how == "stop":
        await gateway.stop()
    else:
        await gateway.kill9()
    await gateway.start()
    again, after = await subscribed(gateway, cursor)
    for sid in sids:
        said = await after.wait(needs_resume(sid))
        assert said["data"]["resume_reason"] == "agent_not_running"
        assert said["data"]["state"] == "WAITING_FOR_INPUT"
    status = await again.call("task.session.status", {"session_id": sids[1]})
    assert (status["needs_resume"], status["resume_reason"]) == (True, "agent_not_running")  # as the events said
    # and the list says it of every session, so a frontend's list shows which need a resume without opening each
    listed = {s["session_id"]: s for s in (await again.call("task.session.list", {}))["sessions"]}
    assert all((listed[sid]["needs_resume"], listed[sid]["resume_reason"]) == (True, "agent_not_running")
               for sid in sids)
    await again.close()
