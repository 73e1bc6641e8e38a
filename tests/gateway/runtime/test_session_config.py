"""A session's configuration against a real gateway and the reference agent: what the agent offers is kept and shown
(live and stored), changed by `set_config_option` / `set_mode` (relayed the way the agent understands, refused up
front with a typed error that changes nothing), chosen at start (and by profiles), re-applied after every restore
whatever the agent forgets, refuses or no longer offers, and followed when the agent changes its own mode."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.clients.client import GatewayClient, RpcCallError
from tests.gateway_harness import EventLog, GatewayProcess, agent_log, reference_profile, subscribed


@pytest.fixture
def paths(tmp_path: Path) -> dict[str, Path]:
    p = {"state": tmp_path / "state", "agents": tmp_path / "agents", "work": tmp_path / "work",
         "agent_state": tmp_path / "agent-state", "log": tmp_path / "agent.log"}
    p["agents"].mkdir()
    p["work"].mkdir()
    reference_profile(p["agents"], p["agent_state"], "ref", log=p["log"])
    reference_profile(p["agents"], p["agent_state"], "legacy", "--config-style", "legacy", log=p["log"])
    reference_profile(p["agents"], p["agent_state"], "ref-load", "--no-resume", "--forget-config", log=p["log"])
    reference_profile(p["agents"], p["agent_state"], "picky", "--refuse-value", "model=ref-large", log=p["log"])
    reference_profile(p["agents"], p["agent_state"], "defaults", log=p["log"],
                      extra='[config]\neffort = "high"\nmodel = "ref-large"\n')
    return p


@contextlib.asynccontextmanager
async def serving(paths: dict[str, Path]) -> AsyncIterator[GatewayProcess]:
    gw = GatewayProcess(paths["state"], paths["agents"])
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


@pytest.fixture
async def gw(paths: dict[str, Path]) -> AsyncIterator[GatewayProcess]:
    async with serving(paths) as gateway:
        yield gateway


def current(view: dict[str, Any]) -> dict[str, Any]:
    """Each option's current value, as the agent last reported it."""
    return {o["id"]: o["currentValue"] for o in view["config"]["options"]}


def chosen(view: dict[str, Any]) -> dict[str, Any]:
    return {k: (c["value"], c["by"]) for k, c in view["config"]["chosen"].items()}


async def says(client: GatewayClient, log: EventLog, sid: str, prompt: str) -> str:
    """What the agent itself answers to a prompt (`/config` makes the reference agent say its own values)."""
    mark = len(log.events)
    assert (await client.call("task.session.prompt", {"session_id": sid, "prompt": prompt}))["stop_reason"] == \
        "end_turn"
    await log.wait(lambda e: e["type"] == "turn_ended" and e["session_id"] == sid and e in log.events[mark:])
    return "".join(e["data"]["update"]["content"]["text"] for e in log.events[mark:]
                   if e["type"] == "session_update" and e["session_id"] == sid
                   and e["data"]["update"]["sessionUpdate"] == "agent_message_chunk")


def set_calls(path: Path, method: str) -> list[dict[str, Any]]:
    return [m["params"] for m in agent_log(path) if m["method"] == method]


async def test_what_the_agent_offers_is_kept_and_shown_live_and_stored(gw: GatewayProcess,
                                                                       paths: dict[str, Path]) -> None:
    client, log = await subscribed(gw)
    view = await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]), "wait_ready": True})
    sid = view["session_id"]
    assert current(view) == {"mode": "code", "model": "ref-small", "effort": "medium", "verbose": False}
    assert [o["category"] for o in view["config"]["options"]][:3] == ["mode", "model", "thought_level"]
    assert view["config"]["modes"]["currentModeId"] == "code"  # raw, as the agent sent it
    assert view["config"]["chosen"] == {} and view["config"]["unapplied"] == []
    await log.wait(lambda e: e["type"] == "session_update" and e["data"]["update"]["sessionUpdate"]
                   == "available_commands_update")
    assert "usage" not in await says(client, log, sid, "hello")  # a turn: the agent reports its usage after it
    status = await client.call("task.session.status", {"session_id": sid})
    assert {c["name"] for c in status["config"]["commands"]} >= {"mode", "config", "hang"}
    assert status["config"]["usage"]["size"] == 200_000 and status["config"]["usage"]["used"] > 0
    await client.close()
    await gw.stop()  # no agent runs: the stored session shows the same
    await gw.start()
    client = await gw.client()
    stored = await client.call("task.session.get", {"session_id": sid})
    assert stored["is_agent_running"] is False
    assert stored["config"] == status["config"]
    assert (await client.call("task.session.status", {"session_id": sid}))["config"] == status["config"]
    await client.close()


async def test_changes_are_relayed_kept_and_seen_by_every_subscriber(gw: GatewayProcess,
                                                                     paths: dict[str, Path]) -> None:
    client, log = await subscribed(gw)
    watcher, watched = await subscribed(gw)
    view = await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]), "wait_ready": True})
    sid = view["session_id"]
    view = await client.call("task.session.set_config_option", {"session_id": sid, "config_id": "model",
                                                                "value": "ref-large"})
    assert current(view)["model"] == "ref-large" and chosen(view) == {"model": ("ref-large", "user")}
    view = await client.call("task.session.set_mode", {"session_id": sid, "mode_id": "plan"})
    assert current(view)["mode"] == "plan" and view["config"]["modes"]["currentModeId"] == "plan"
    view = await client.call("task.session.set_config_option", {"session_id": sid, "config_id": "verbose",
                                                                "value": True})
    assert current(view)["verbose"] is True
    assert chosen(view) == {"model": ("ref-large", "user"), "mode": ("plan", "user"), "verbose": (True, "user")}
    # The agent was asked the ACP way: set_config_option for options (booleans typed), here both forms of the mode.
    assert [(p["configId"], p["value"], p.get("type")) for p in set_calls(paths["log"], "session/set_config_option")
            ] == [("model", "ref-large", None), ("mode", "plan", None), ("verbose", True, "boolean")]
    # The agent itself reports the values, and every subscriber saw each change.
    assert await says(client, log, sid, "/config") == "config: mode=plan model=ref-large effort=medium verbose=true"
    for events in (log, watched):
        await events.wait(lambda e: e["type"] == "turn_ended")  # the /config turn came after the changes
        changes = [e for e in events.events if e["type"] == "session_config" and e["data"]["cause"] == "set"]
        assert len(changes) == 3
        assert {o["id"]: o["currentValue"] for o in changes[-1]["data"]["options"]}["verbose"] is True

    # The agent changes its own mode mid-turn: an event everyone sees, and the session's choice now.
    assert await says(client, log, sid, "/mode ask") == "switched to mode ask"
    own = await watched.wait(lambda e: e["type"] == "session_config" and e["data"]["cause"] == "agent")
    assert own["data"]["chosen"]["mode"] == {"value": "ask", "by": "agent"}
    assert chosen(await client.call("task.session.get", {"session_id": sid}))["mode"] == ("ask", "agent")
    for c in (client, watcher):
        await c.close()


async def test_refusals_are_typed_name_what_is_offered_and_change_nothing(gw: GatewayProcess,
                                                                          paths: dict[str, Path]) -> None:
    client, log = await subscribed(gw)
    sid = (await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]),
                                                    "wait_ready": True}))["session_id"]
    # The agent announces its slash commands just after its answer: "before" is read once they are in.
    await log.wait(lambda e: e["session_id"] == sid and e["type"] == "session_update"
                   and e["data"]["update"]["sessionUpdate"] == "available_commands_update")
    before = await client.call("task.session.get", {"session_id": sid})
    assert before["config"]["commands"]
    cases = [
        ({"config_id": "temperature", "value": "hot"}, "option_not_offered", ["mode", "model", "effort", "verbose"]),
        ({"config_id": "model", "value": "ref-huge"}, "value_not_offered", ["ref-small", "ref-large"]),
        ({"config_id": "verbose", "value": "yes"}, "wrong_type", []),
        ({"config_id": "model", "value": True}, "wrong_type", ["ref-small", "ref-large"]),
    ]
    for params, reason, offered in cases:
        with pytest.raises(RpcCallError) as refused:
            await client.call("task.session.set_config_option", {"session_id": sid, **params})
        assert refused.value.code == -32017 and refused.value.data is not None
        assert (refused.value.data["reason"], refused.value.data["offered"]) == (reason, offered)
        assert refused.value.data["config_id"] == params["config_id"] and sid in refused.value.message
    with pytest.raises(RpcCallError) as mode:
        await client.call("task.session.set_mode", {"session_id": sid, "mode_id": "yolo"})
    assert mode.value.data == {"session_id": sid, "config_id": "mode", "value": "yolo", "reason": "value_not_offered",
                               "offered": ["ask", "code", "plan"], "agent_error": None}
    with pytest.raises(RpcCallError) as bad:  # the shape of a value is the contract's
        await client.call("task.session.set_config_option", {"session_id": sid, "config_id": "model", "value": 3})
    assert bad.value.code == -32602 and bad.value.data == {"field": "value"}
    with pytest.raises(RpcCallError) as bad_start:
        await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]), "config": {"model": 3}})
    assert bad_start.value.code == -32602 and bad_start.value.data == {"field": "config.model"}
    assert await client.call("task.session.get", {"session_id": sid}) == before  # nothing changed
    assert set_calls(paths["log"], "session/set_config_option") == []  # nothing reached the agent
    assert not log.of_type("session_config")[1:]  # only the launch's
    # The agent refuses a value it offers: its own error, under the same code.
    picky = (await client.call("task.session.start", {"agent": "picky", "cwd": str(paths["work"]),
                                                      "wait_ready": True}))["session_id"]
    with pytest.raises(RpcCallError) as agent:
        await client.call("task.session.set_config_option", {"session_id": picky, "config_id": "model",
                                                             "value": "ref-large"})
    assert agent.value.code == -32017 and agent.value.data is not None
    assert agent.value.data["reason"] == "agent_refused" and agent.value.data["agent_error"]["code"] == -32602
    assert chosen(await client.call("task.session.get", {"session_id": picky})) == {}
    # An ended session's configuration no longer changes.
    await client.call("task.session.cancel", {"session_id": sid})
    with pytest.raises(RpcCallError) as ended:
        await client.call("task.session.set_mode", {"session_id": sid, "mode_id": "plan"})
    assert ended.value.code == -32013
    await client.close()


async def test_choices_at_start_and_profile_defaults_are_what_the_agent_reports(gw: GatewayProcess,
                                                                                paths: dict[str, Path]) -> None:
    client, log = await subscribed(gw)
    view = await client.call("task.session.start", {
        "agent": "ref", "cwd": str(paths["work"]), "wait_ready": True,
        "config": {"mode": "plan", "model": "ref-large", "verbose": True, "colour": "blue"}})
    sid = view["session_id"]
    assert current(view) == {"mode": "plan", "model": "ref-large", "effort": "medium", "verbose": True}
    # A choice the agent does not offer is kept, and said — not an error, not silently dropped.
    assert [(u["id"], u["reason"]) for u in view["config"]["unapplied"]] == [("colour", "option_not_offered")]
    assert await says(client, log, sid, "/config") == "config: mode=plan model=ref-large effort=medium verbose=true"
    said = {e["data"]["level"]: e["data"]["text"] for e in log.events
            if e["type"] == "session_message" and e["session_id"] == sid}
    assert said == {"info": "Chosen for this session and set on its agent: model = \"ref-large\", "
                            "mode = \"plan\", verbose = true.",
                    "warning": "Not everything chosen for this session could be given to its agent: the agent offers "
                               "no option \"colour\"; it offers mode, model, effort, verbose."}
    # A choice given up (value null) is no longer re-applied nor listed; the agent keeps its own value.
    view = await client.call("task.session.set_config_option", {"session_id": sid, "config_id": "colour",
                                                                "value": None})
    assert "colour" not in view["config"]["chosen"] and view["config"]["unapplied"] == []
    view = await client.call("task.session.set_config_option", {"session_id": sid, "config_id": "verbose",
                                                                "value": None})
    assert "verbose" not in view["config"]["chosen"] and current(view)["verbose"] is True
    # The profile's defaults, under the start's own choices.
    view = await client.call("task.session.start", {"agent": "defaults", "cwd": str(paths["work"]),
                                                    "wait_ready": True, "config": {"model": "ref-small"}})
    assert (current(view)["effort"], current(view)["model"]) == ("high", "ref-small")
    assert chosen(view) == {"effort": ("high", "profile"), "model": ("ref-small", "user")}
    await client.close()


async def test_a_stored_session_is_resumed_by_a_change_but_not_by_a_refused_one(paths: dict[str, Path]) -> None:
    async with serving(paths) as gw:
        client = await gw.client()
        sid = (await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]),
                                                        "wait_ready": True}))["session_id"]
        await client.close()
    async with serving(paths) as gw:
        client = await gw.client()
        with pytest.raises(RpcCallError) as refused:  # checked against the stored offer: no agent is started for it
            await client.call("task.session.set_config_option", {"session_id": sid, "config_id": "model",
                                                                 "value": "ref-huge"})
        assert refused.value.code == -32017
        assert (await client.call("task.session.status", {"session_id": sid}))["is_agent_running"] is False
        view = await client.call("task.session.set_config_option", {"session_id": sid, "config_id": "effort",
                                                                    "value": "low"})
        assert view["is_agent_running"] is True and current(view)["effort"] == "low"
        await client.close()


async def test_choices_come_back_after_every_kind_of_restore(paths: dict[str, Path]) -> None:
    """kill -9, then resume (the agent forgets nothing), load (it forgets everything), a fresh session (it lost the
    session): each time the agent reports the choices again, by its own answers."""
    async with serving(paths) as gw:
        client = await gw.client()
        picks = {"mode": "plan", "model": "ref-large", "effort": "high", "verbose": True}
        by_resume = (await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]),
                                                              "wait_ready": True, "config": picks}))["session_id"]
        by_load = (await client.call("task.session.start", {"agent": "ref-load", "cwd": str(paths["work"]),
                                                             "wait_ready": True, "config": picks}))["session_id"]
        by_new = (await client.call("task.session.start", {"agent": "legacy", "cwd": str(paths["work"]),
                                                            "wait_ready": True,
                                                            "config": {"mode": "ask", "model": "ref-large"}}))
        await client.close()
        await gw.kill9()
        # The legacy agent lost its sessions: its restore falls back to a fresh one.
        for state in paths["agent_state"].glob(f"{by_new['acp_session_id']}*"):
            state.unlink()
        await gw.start()
        client, log = await subscribed(gw)
        expected = "config: mode=plan model=ref-large effort=high verbose=true"
        for sid in (by_resume, by_load):
            view = await client.call("task.session.resume", {"session_id": sid})
            assert current(view) == picks and view["config"]["unapplied"] == []
            assert await says(client, log, sid, "/config") == expected
        sets = set_calls(paths["log"], "session/set_config_option")
        assert {p["configId"] for p in sets if p["sessionId"] != by_new["acp_session_id"]} == set(picks)
        view = await client.call("task.session.resume", {"session_id": by_new["session_id"]})
        assert view["acp_session_id"] != by_new["acp_session_id"]  # a fresh ACP session...
        assert (current(view)["mode"], current(view)["model"]) == ("ask", "ref-large")  # ...with the same choices
        assert [p["modelId"] for p in set_calls(paths["log"], "session/set_model")][-1] == "ref-large"
        assert await says(client, log, by_new["session_id"], "/config") == \
            "config: mode=ask model=ref-large effort=medium verbose=false"
        restored = [e for e in log.events if e["type"] == "session_config" and e["data"]["cause"] == "restore"]
        assert {e["session_id"] for e in restored} == {by_resume, by_load, by_new["session_id"]}
        await client.close()


async def test_what_cannot_be_reapplied_is_shown_never_a_failed_restore(paths: dict[str, Path]) -> None:
    """After a restart the agent refuses a chosen value and no longer offers a chosen option: the restore succeeds,
    the rest is re-applied, and the two are said (an event, a message, the view) and kept for next time."""
    async with serving(paths) as gw:
        client = await gw.client()
        sid = (await client.call("task.session.start", {
            "agent": "ref", "cwd": str(paths["work"]), "wait_ready": True,
            "config": {"model": "ref-large", "verbose": True, "mode": "plan"}}))["session_id"]
        await client.close()
        await gw.kill9()
        reference_profile(paths["agents"], paths["agent_state"], "ref", "--forget-config", "--refuse-value",
                          "model=ref-large", "--drop-option-after-restart", "verbose", log=paths["log"])
        await gw.start()
        client, log = await subscribed(gw)
        view = await client.call("task.session.resume", {"session_id": sid})
        assert view["is_agent_running"] and view["state"] == "WAITING_FOR_INPUT" and view["error_message"] is None
        assert current(view) == {"mode": "plan", "model": "ref-small", "effort": "medium"}
        assert [(u["id"], u["reason"]) for u in view["config"]["unapplied"]] == [("model", "agent_refused"),
                                                                                 ("verbose", "option_not_offered")]
        assert chosen(view) == {"model": ("ref-large", "user"), "verbose": (True, "user"), "mode": ("plan", "user")}
        event = await log.wait(lambda e: e["type"] == "session_config" and e["data"]["cause"] == "restore")
        assert [u["id"] for u in event["data"]["unapplied"]] == ["model", "verbose"]
        note = await log.wait(lambda e: e["type"] == "session_message" and e["data"]["level"] == "warning")
        assert "refuses model = ref-large" in note["data"]["text"] and "verbose" in note["data"]["text"]
        # The agent offers the value again after the next restart: the kept choice is applied then.
        await client.close()
        await gw.kill9()
        reference_profile(paths["agents"], paths["agent_state"], "ref", "--forget-config", log=paths["log"])
        await gw.start()
        client = await gw.client()
        view = await client.call("task.session.resume", {"session_id": sid})
        assert current(view) == {"mode": "plan", "model": "ref-large", "effort": "medium", "verbose": True}
        assert view["config"]["unapplied"] == []
        await client.close()


async def test_additional_directories_pass_the_workspace_rules_and_reach_the_agent(gw: GatewayProcess,
                                                                                   paths: dict[str, Path]) -> None:
    extra = paths["work"].parent / "docs"
    extra.mkdir()
    (extra / "notes.md").write_text("shared notes\n")
    client, log = await subscribed(gw)
    view = await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]), "wait_ready": True,
                                                    "additional_directories": [str(extra)]})
    sid = view["session_id"]
    assert view["config"]["additional_directories"] == [str(extra)]
    assert await says(client, log, sid, "/dirs") == f"dirs: {extra}"
    # The agent's file methods reach them too, and nothing else outside its cwd.
    assert "shared notes" in await says(client, log, sid, f"/read {extra / 'notes.md'}")
    assert "refused" in await says(client, log, sid, f"/read {paths['state']}/gateway.db")
    reference_profile(paths["agents"], paths["agent_state"], "no-dirs", "--no-additional-directories")
    refusals = [
        ({"additional_directories": ["relative/dir"]}, "ref", -32602),
        ({"additional_directories": ["/etc"]}, "ref", -32011),
        ({"additional_directories": [str(paths["state"])]}, "ref", -32011),  # the gateway's own files
        ({"additional_directories": [str(paths["work"].parent / "missing")]}, "ref", -32011),
    ]
    listed = len((await client.call("task.session.list", {}))["sessions"])
    for params, agent, code in refusals:
        with pytest.raises(RpcCallError) as refused:
            await client.call("task.session.start", {"agent": agent, "cwd": str(paths["work"]), **params})
        assert refused.value.code == code, params
    assert len((await client.call("task.session.list", {}))["sessions"]) == listed  # no session was made
    await client.close()


async def test_an_agent_that_takes_no_directories_is_refused_them_clearly(paths: dict[str, Path]) -> None:
    reference_profile(paths["agents"], paths["agent_state"], "no-dirs", "--no-additional-directories")
    (paths["work"].parent / "docs").mkdir()
    async with serving(paths) as gw:
        client = await gw.client()
        with pytest.raises(RpcCallError) as refused:  # asked of the agent before the session exists
            await client.call("task.session.start", {"agent": "no-dirs", "cwd": str(paths["work"]),
                                                     "additional_directories": [str(paths["work"].parent / "docs")]})
        assert refused.value.code == -32602 and "additionalDirectories" in refused.value.message
        assert (await client.call("task.session.list", {}))["sessions"] == []
        await client.close()
    # A directory given to a session is checked again at every launch: one deleted since is left out, and said.
    async with serving(paths) as gw:
        client = await gw.client()
        sid = (await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]), "wait_ready": True,
                                                        "additional_directories": [
                                                            str(paths["work"].parent / "docs")]}))["session_id"]
        await client.close()
        await gw.kill9()
        shutil.rmtree(paths["work"].parent / "docs")
        await gw.start()
        client = await gw.client()
        view = await client.call("task.session.resume", {"session_id": sid})
        assert view["is_agent_running"]
        assert [(u["kind"], u["reason"]) for u in view["config"]["unapplied"]] == [("directory", "refused")]
        await client.close()


async def test_concurrent_changes_and_a_restart_leave_the_agent_where_the_view_says(gw: GatewayProcess,
                                                                                    paths: dict[str, Path]) -> None:
    client = await gw.client()
    sid = (await client.call("task.session.start", {"agent": "ref", "cwd": str(paths["work"]),
                                                    "wait_ready": True}))["session_id"]
    values = ["low", "high", "medium", "high", "low"]
    await asyncio.gather(*(client.call("task.session.set_config_option", {"session_id": sid, "config_id": "effort",
                                                                          "value": v}) for v in values))
    view = await client.call("task.session.get", {"session_id": sid})
    sent = [p["value"] for p in set_calls(paths["log"], "session/set_config_option")]
    assert sent[-1] == current(view)["effort"] == chosen(view)["effort"][0]  # one at a time; the last one stands
    await client.close()
