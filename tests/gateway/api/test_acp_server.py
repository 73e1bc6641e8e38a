"""ACP over WebSocket at `/acp`, against a real gateway process and the reference agent: every method, the order of
what a client is sent, several clients on one session, permissions, bad input and owners."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import websockets

from gateway.api.acp_server.updates import STATE_KINDS
from gateway.clients.client import RpcCallError
from tests.acp_wire import AcpWire, AcpWireError, is_response, is_update
from tests.gateway_harness import ALICE, BOB, EventLog, GatewayProcess, two_owner_gateway


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gateway = two_owner_gateway(tmp_path, config='default_agent = "ref"\ncancel_grace = 2.0\n')
    (gateway.agents_dir / "broken.toml").write_text('id = "broken"\ncommand = ["/bin/false"]\n')
    await gateway.start()
    yield gateway
    await gateway.stop()


def work(gw: GatewayProcess) -> str:
    return str(gw.state_dir.parent / "work")


async def new_session(wire: AcpWire, cwd: str, **meta: Any) -> str:
    params: dict[str, Any] = {"cwd": cwd, "mcpServers": []}
    if meta:
        params["_meta"] = {"acpGateway": meta}
    result = await wire.call("session/new", params)
    return str(result["sessionId"])


def text(t: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t}]


async def test_initialize_advertises_what_the_gateway_guarantees(gw: GatewayProcess) -> None:
    a = await AcpWire.connect(gw.port, ALICE, initialize=False)
    b = await AcpWire.connect(gw.port, ALICE)
    init = await a.call("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False}}})
    assert init["protocolVersion"] == 1
    caps = init["agentCapabilities"]
    assert caps["loadSession"] is True
    # The gateway's own session methods, and what the default agent takes (its own initialize says so).
    assert caps["sessionCapabilities"] == {"resume": {}, "list": {}, "close": {}, "additionalDirectories": {}}
    assert caps["mcpCapabilities"] == {"http": True, "sse": True}
    assert caps["promptCapabilities"] == {"image": False, "audio": False, "embeddedContext": False}  # ref's profile
    assert init["authMethods"] == []
    assert init["agentInfo"]["name"] == "acp-gateway"
    assert "ref" in init["_meta"]["acpGateway"]["agents"]
    # A client that speaks a newer version is told the one the gateway speaks.
    later = await AcpWire.connect(gw.port, ALICE, initialize=False)
    assert (await later.call("initialize", {"protocolVersion": 7}))["protocolVersion"] == 1
    # The RFD's connection id, one per connection.
    assert a.connection_id and b.connection_id and a.connection_id != b.connection_id
    for wire in (a, b, later):
        await wire.close()


async def test_new_prompt_load_resume_list_close(gw: GatewayProcess) -> None:
    cwd = work(gw)
    wire = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(wire, cwd, title="acp one")
    start = len(wire.frames)
    answer = await wire.request("session/prompt", {"sessionId": session, "prompt": text("/tool search found-it")})
    assert answer["result"] == {"stopReason": "end_turn"}
    # Every update of the turn came before its answer, and the client's own prompt is not echoed back to it.
    turn = wire.frames[start:wire.frames.index(answer)]
    kinds = [f["params"]["update"]["sessionUpdate"] for f in turn if f.get("method") == "session/update"]
    assert [k for k in kinds if k not in STATE_KINDS] == ["tool_call", "tool_call_update"]
    assert kinds[-1] == "usage_update"  # the agent's report of the turn's usage reaches the client too
    assert await wire.call("session/prompt", {"sessionId": session, "prompt": text("second")}) == {
        "stopReason": "end_turn"}

    # The session is a gateway session: in task.session.list and its history, under its one id.
    rpc = await gw.client(ALICE)
    listed = await rpc.call("task.session.list", {})
    assert session in [s["session_id"] for s in listed["sessions"]]
    history = await rpc.call("task.session.history", {"session_id": session})
    assert [e["kind"] for e in history["entries"]] == ["user_message", "tool_call", "tool_result", "user_message",
                                                       "agent_message"]

    # session/list: the owner's sessions as ACP SessionInfo; a cwd filter.
    infos = (await wire.call("session/list", {}))["sessions"]
    mine = next(i for i in infos if i["sessionId"] == session)
    assert mine["cwd"] == cwd and mine["title"] == "acp one" and mine["updatedAt"].endswith("Z")
    assert mine["_meta"]["acpGateway"]["agent"] == "ref"
    assert (await wire.call("session/list", {"cwd": "/nowhere"}))["sessions"] == []

    # session/load on a new connection: the whole conversation, in order, before its answer.
    other = await AcpWire.connect(gw.port, ALICE)
    loaded = await other.request("session/load", {"sessionId": session, "cwd": cwd, "mcpServers": []})
    # The answer says what the agent behind the session offers, as it said it (its config options and its modes);
    # its boolean option only to a client that takes booleans (this one did not say it does).
    assert set(loaded["result"]) == {"configOptions", "modes", "_meta"}
    # ...and the cursor of what it now has, to resume from after a lost connection (docs/acp.md)
    last_update = [f for f in other.frames[:other.frames.index(loaded)] if f.get("method") == "session/update"][-1]
    assert loaded["result"]["_meta"]["acpGateway"]["eventCursor"] >= last_update["params"]["_meta"]["acpGateway"][
        "eventId"]
    assert [(o["id"], o["currentValue"]) for o in loaded["result"]["configOptions"]] == [
        ("mode", "code"), ("model", "ref-small"), ("effort", "medium")]
    before = other.frames[:other.frames.index(loaded)]
    kinds = [f["params"]["update"]["sessionUpdate"] for f in before if f.get("method") == "session/update"]
    assert kinds == ["user_message_chunk", "tool_call", "tool_call_update", "user_message_chunk",
                     "agent_message_chunk"]  # the conversation: past reports of state are not replayed
    answered_at = other.frames.index(loaded)
    for kind in ("available_commands_update", "usage_update"):  # sent after the answer: waited for, not raced
        await other.wait_for(lambda f, kind=kind: f.get("method") == "session/update"
                             and f["params"]["update"]["sessionUpdate"] == kind, start=answered_at)
    after = [f["params"]["update"]["sessionUpdate"] for f in other.frames[answered_at:]
             if f.get("method") == "session/update"]
    assert sorted(after) == ["available_commands_update", "usage_update"]  # ... the latest of each follows
    assert other.texts() == [("user_message_chunk", "/tool search found-it"), ("user_message_chunk", "second"),
                             ("agent_message_chunk", "echo: second")]
    # ... and live after it: the first client's next turn reaches the second, the prompt included.
    mark = len(other.frames)
    await wire.call("session/prompt", {"sessionId": session, "prompt": text("third")})
    await other.wait_for(is_update("agent_message_chunk", "echo: third"), start=mark)
    assert other.texts(start=mark) == [("user_message_chunk", "third"), ("agent_message_chunk", "echo: third")]

    # session/resume: attached without a replay.
    third = await AcpWire.connect(gw.port, ALICE)
    resumed = await third.call("session/resume", {"sessionId": session, "cwd": cwd, "mcpServers": []})
    assert resumed["modes"]["currentModeId"] == "code"
    assert third.updates() == []
    assert await third.call("session/prompt", {"sessionId": session, "prompt": text("fourth")}) == {
        "stopReason": "end_turn"}

    # session/close: this connection lets go; the session lives on for the others.
    assert await third.call("session/close", {"sessionId": session}) == {}
    with pytest.raises(AcpWireError) as refused:
        await third.call("session/prompt", {"sessionId": session, "prompt": text("gone")})
    assert refused.value.code == -32602 and "not open on this connection" in refused.value.message
    assert await wire.call("session/prompt", {"sessionId": session, "prompt": text("fifth")}) == {
        "stopReason": "end_turn"}
    for w in (wire, other, third):
        await w.close()
    await rpc.close()


async def test_profile_by_meta_and_mcp_servers_reported_ignored(gw: GatewayProcess) -> None:
    wire = await AcpWire.connect(gw.port, ALICE)
    answer = await wire.call("session/new", {
        "cwd": work(gw), "mcpServers": [{"name": "files", "command": "/bin/sh", "args": [], "env": []}],
        "_meta": {"acpGateway": {"agent": "reference"}}})
    ignored = answer["_meta"]["acpGateway"]["ignoredMcpServers"]  # not run on the gateway's host for this owner
    assert [i["name"] for i in ignored] == ["files"] and "allow_stdio_mcp_servers" in ignored[0]["reason"]
    rpc = await gw.client(ALICE)
    assert (await rpc.call("task.session.get", {"session_id": answer["sessionId"]}))["agent"] == "reference"
    for params, field in [({"agent": "no-such-agent"}, "agent"), ({"agent": 3}, "_meta.acpGateway.agent"),
                          ({"colour": "red"}, "_meta.acpGateway.colour")]:
        with pytest.raises(AcpWireError) as bad:
            await wire.call("session/new", {"cwd": work(gw), "mcpServers": [], "_meta": {"acpGateway": params}})
        assert bad.value.code == -32602 and bad.value.data == {"field": field}
    with pytest.raises(AcpWireError) as outside:  # the workspace rules are the gateway's, as on /rpc
        await wire.call("session/new", {"cwd": "/etc", "mcpServers": []})
    assert outside.value.code == -32011
    # An agent that cannot start: the error says so, and the session is kept (it can be resumed once fixed).
    with pytest.raises(AcpWireError) as broken:
        await wire.call("session/new", {"cwd": work(gw), "mcpServers": [],
                                        "_meta": {"acpGateway": {"agent": "broken"}}})
    assert broken.value.code == -32015 and "could not start" in broken.value.message
    kept = broken.value.data["session_id"]
    assert (await rpc.call("task.session.get", {"session_id": kept}))["agent"] == "broken"
    await wire.close()
    await rpc.close()


async def test_bad_input_gets_jsonrpc_errors_and_rpc_is_unaffected(gw: GatewayProcess) -> None:
    rpc = await gw.client(ALICE)
    wire = await AcpWire.connect(gw.port, ALICE, initialize=False)
    # Before initialize: requests are refused, notifications and responses ignored.
    early = await wire.request("session/new", {"cwd": work(gw), "mcpServers": []})
    assert early["error"]["code"] == -32600 and "initialize first" in early["error"]["message"]
    await wire.notify("session/cancel", {"sessionId": "s-x"})
    await wire.send({"jsonrpc": "2.0", "id": 99, "result": {}})
    # An initialize refused for its params leaves the connection uninitialized.
    refused = await wire.request("initialize", {"protocolVersion": "one"})
    assert refused["error"]["code"] == -32602 and refused["error"]["data"] == {"field": "protocolVersion"}
    still = await wire.request("session/list", {})
    assert still["error"]["code"] == -32600 and "initialize first" in still["error"]["message"]
    await wire.call("initialize", {"protocolVersion": 1})
    again = await wire.request("initialize", {"protocolVersion": 1})
    assert again["error"]["code"] == -32600 and "already initialized" in again["error"]["message"]
    unknown = await wire.request("session/fork", {"sessionId": "s-x"})
    assert unknown["error"]["code"] == -32601 and "session/prompt" in unknown["error"]["message"]
    assert unknown["error"]["data"] == {"method": "session/fork"}  # the shape /rpc answers -32601 with too
    await wire.notify("_vendor/whatever", {})  # an unknown notification: no answer
    # Malformed frames: not JSON, a batch, not JSON-RPC; a binary frame is ignored (the RFD).
    mark = len(wire.frames)
    await wire.raw("{not json")
    await wire.raw('[{"jsonrpc": "2.0", "id": 5, "method": "session/list"}]')
    await wire.raw('{"jsonrpc": "1.0", "id": 6, "method": "session/list"}')
    await wire.raw(b'{"jsonrpc": "2.0", "id": 7, "method": "session/list"}')
    await wire.raw('{"jsonrpc": "2.0", "id": 8, "method": "session/list", "params": 5}')
    await wire.wait_for(lambda f: f.get("id") == 8, start=mark)
    errors = [(f.get("id"), f["error"]["code"]) for f in wire.frames[mark:]]
    assert errors == [(None, -32700), (None, -32600), (6, -32600), (8, -32600)]
    # Invalid params name the field.
    bad = await wire.request("session/prompt", {"sessionId": "s-x", "prompt": []})
    assert bad["error"]["code"] == -32602 and bad["error"]["data"] == {"field": "prompt"}
    bad = await wire.request("session/load", {"sessionId": "s-x"})
    assert bad["error"]["code"] == -32602 and bad["error"]["data"] == {"field": "cwd"}
    # The connection still serves, and so does /rpc.
    assert (await wire.call("session/list", {}))["sessions"] == []
    assert (await rpc.call("gateway.info", {}))["owner"] == "alice"
    await wire.close()
    await rpc.close()


async def test_owners_see_only_their_own_sessions(gw: GatewayProcess) -> None:
    cwd = work(gw)
    alice = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(alice, cwd)
    bob = await AcpWire.connect(gw.port, BOB)
    assert (await bob.call("session/list", {}))["sessions"] == []
    for method, params in [("session/load", {"cwd": cwd, "mcpServers": []}),
                           ("session/resume", {"cwd": cwd, "mcpServers": []}), ("session/close", {})]:
        with pytest.raises(AcpWireError) as foreign:
            await bob.call(method, {"sessionId": session, **params})
        assert foreign.value.code == -32002 and foreign.value.data == {"session_id": session}
    with pytest.raises(AcpWireError) as foreign:
        await bob.call("session/prompt", {"sessionId": session, "prompt": text("hi")})
    assert foreign.value.code == -32602  # never opened on bob's connection; nothing says it exists
    await bob.notify("session/cancel", {"sessionId": session})
    assert await alice.call("session/prompt", {"sessionId": session, "prompt": text("still mine")}) == {
        "stopReason": "end_turn"}
    with pytest.raises(AcpWireError) as wrong_cwd:
        await alice.call("session/load", {"sessionId": session, "cwd": "/tmp", "mcpServers": []})
    assert wrong_cwd.value.code == -32602 and wrong_cwd.value.data == {"field": "cwd"}
    # The handshake: a token, and the Origin rule of /rpc.
    with pytest.raises(websockets.InvalidStatus) as unauthorized:
        await websockets.connect(f"ws://127.0.0.1:{gw.port}/acp")
    assert unauthorized.value.response.status_code == 401
    with pytest.raises(websockets.InvalidStatus) as cross_site:
        await websockets.connect(f"ws://127.0.0.1:{gw.port}/acp?token={ALICE}", origin="http://evil.example")
    assert cross_site.value.response.status_code == 403
    query = await websockets.connect(f"ws://127.0.0.1:{gw.port}/acp?token={ALICE}")
    await query.close()
    await alice.close()
    await bob.close()


async def test_second_client_observes_and_is_told_busy(gw: GatewayProcess) -> None:
    cwd = work(gw)
    first = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(first, cwd)
    second = await AcpWire.connect(gw.port, ALICE)
    await second.call("session/resume", {"sessionId": session, "cwd": cwd, "mcpServers": []})
    hang = asyncio.ensure_future(first.call("session/prompt", {"sessionId": session, "prompt": text("/hang")}))
    await second.wait_for(is_update("agent_message_chunk", "hanging until cancelled"))
    with pytest.raises(AcpWireError) as busy:
        await second.call("session/prompt", {"sessionId": session, "prompt": text("me too")})
    assert busy.value.code == -32010 and busy.value.data["session_id"] == session
    # Any client of the owner may cancel the running turn; its prompt answers `cancelled`.
    await second.notify("session/cancel", {"sessionId": session})
    assert await asyncio.wait_for(hang, 15) == {"stopReason": "cancelled"}
    assert await second.call("session/prompt", {"sessionId": session, "prompt": text("my turn")}) == {
        "stopReason": "end_turn"}
    await first.wait_for(is_update("agent_message_chunk", "echo: my turn"))
    await first.close()
    await second.close()


async def test_turn_outlives_the_socket_and_cancel_before_start(gw: GatewayProcess) -> None:
    cwd = work(gw)
    wire = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(wire, cwd)
    await wire.send({"jsonrpc": "2.0", "id": 500, "method": "session/prompt",
                     "params": {"sessionId": session, "prompt": text("/sleep 1")}})
    await wire.wait_for(lambda f: f.get("method") == "session/update")
    await wire.close()  # gone mid-turn: the turn goes on
    rpc = await gw.client(ALICE)
    log = EventLog(rpc)
    await rpc.call("task.session.subscribe", {"session_id": session, "since": 0})
    ended = await log.wait(lambda e: e["type"] == "turn_ended")
    assert ended["data"]["stop_reason"] == "end_turn"
    # Back on a new connection: the whole turn is there, finished while nobody watched.
    back = await AcpWire.connect(gw.port, ALICE)
    await back.call("session/load", {"sessionId": session, "cwd": cwd, "mcpServers": []})
    assert ("agent_message_chunk", "done sleeping") in back.texts()
    await back.close()
    await rpc.close()
    # A session/cancel sent right after its prompt cancels that prompt, even before its turn has started: here the
    # gateway restarted, so the prompt first resumes the agent (the cancel comes while it starts).
    await gw.stop()
    await gw.start()
    back = await AcpWire.connect(gw.port, ALICE)
    await back.call("session/resume", {"sessionId": session, "cwd": cwd, "mcpServers": []})
    await back.send({"jsonrpc": "2.0", "id": 7, "method": "session/prompt",
                     "params": {"sessionId": session, "prompt": text("/hang")}})
    await back.notify("session/cancel", {"sessionId": session})
    answer = await back.wait_for(is_response(7))
    assert answer["result"] == {"stopReason": "cancelled"}
    await back.close()


async def test_permission_first_answer_wins(gw: GatewayProcess) -> None:
    cwd = work(gw)
    acp_client = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(acp_client, cwd)
    rpc = await gw.client(ALICE)
    log = EventLog(rpc)
    await rpc.call("task.session.subscribe", {"session_id": session})

    # 1. The ACP client answers first; the task.session subscriber's answer comes second: -32009.
    acp_client.on_request = lambda req: {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
    assert await acp_client.call("session/prompt", {"sessionId": session, "prompt": text("/permission")}) == {
        "stopReason": "end_turn"}
    asked = await log.wait(lambda e: e["type"] == "permission_requested")
    with pytest.raises(RpcCallError) as late:
        await rpc.call("task.session.permission.respond", {"session_id": session,
                                                           "request_id": asked["data"]["request_id"],
                                                           "option_id": "reject-once"})
    assert late.value.code == -32009
    request = next(f for f in acp_client.frames if f.get("method") == "session/request_permission")
    assert request["params"]["sessionId"] == session
    assert [o["optionId"] for o in request["params"]["options"]] == ["allow-once", "reject-once"]
    assert ("agent_message_chunk", 'permission: {"outcome":"selected","optionId":"allow-once"}') in acp_client.texts()

    # 2. The subscriber answers first: the ACP client's open request is withdrawn with $/cancel_request.
    acp_client.on_request = lambda req: None  # it does not answer
    mark = len(acp_client.frames)
    prompt = asyncio.ensure_future(acp_client.call("session/prompt", {"sessionId": session,
                                                                      "prompt": text("/permission")}))
    offered = await acp_client.wait_for(lambda f: f.get("method") == "session/request_permission", start=mark)
    asked = await log.wait(lambda e: e["type"] == "permission_requested" and e["data"]["request_id"] !=
                           asked["data"]["request_id"])
    await rpc.call("task.session.permission.respond", {"session_id": session, "request_id": asked["data"]["request_id"],
                                                       "option_id": "reject-once"})
    withdrawn = await acp_client.wait_for(lambda f: f.get("method") == "$/cancel_request", start=mark)
    assert withdrawn["params"] == {"requestId": offered["id"]}
    assert await asyncio.wait_for(prompt, 15) == {"stopReason": "end_turn"}
    # Its late answer loses quietly: the agent got the first one.
    await acp_client.send({"jsonrpc": "2.0", "id": offered["id"],
                           "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}})
    assert ("agent_message_chunk", 'permission: {"outcome":"selected","optionId":"reject-once"}') in \
        acp_client.texts(start=mark)

    # 3. A client that attaches while a request waits is asked too, after its load's answer.
    acp_client.on_request = lambda req: None
    mark = len(acp_client.frames)
    prompt = asyncio.ensure_future(acp_client.call("session/prompt", {"sessionId": session,
                                                                      "prompt": text("/permission")}))
    await acp_client.wait_for(lambda f: f.get("method") == "session/request_permission", start=mark)
    late_comer = await AcpWire.connect(gw.port, ALICE)
    late_comer.on_request = lambda req: {"outcome": {"outcome": "cancelled"}}
    loaded = await late_comer.request("session/load", {"sessionId": session, "cwd": cwd, "mcpServers": []})
    offer = await late_comer.wait_for(lambda f: f.get("method") == "session/request_permission")
    assert late_comer.frames.index(offer) > late_comer.frames.index(loaded)
    assert await asyncio.wait_for(prompt, 15) == {"stopReason": "cancelled"}
    for w in (acp_client, late_comer):
        await w.close()
    await rpc.close()


async def test_unknown_update_kinds_pass_through(gw: GatewayProcess) -> None:
    wire = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(wire, work(gw))
    await wire.call("session/prompt", {"sessionId": session, "prompt": text("/unknown-update")})
    assert {"sessionUpdate": "_reference_future_kind", "payload": {"x": 1}} in wire.updates(session)
    await wire.close()


def update_of(kind: str, **fields: Any) -> Any:
    """A predicate: a session/update of this kind whose update has these fields."""
    def match(frame: dict[str, Any]) -> bool:
        update = frame.get("params", {}).get("update", {}) if frame.get("method") == "session/update" else {}
        return update.get("sessionUpdate") == kind and all(update.get(k) == v for k, v in fields.items())
    return match


async def test_configuration_over_acp(gw: GatewayProcess, tmp_path: Path) -> None:
    """The real agent's options in the answers; set_config_option, set_mode and the legacy set_model relayed and
    kept; a change made elsewhere (another client, /rpc) reaches every ACP client as the agent's update would."""
    from tests.gateway_harness import reference_profile
    extra = tmp_path / "shared"
    extra.mkdir()
    wire = await AcpWire.connect(gw.port, ALICE)
    answer = await wire.call("session/new", {"cwd": work(gw), "mcpServers": [], "additionalDirectories": [str(extra)],
                                             "_meta": {"acpGateway": {"config": {"model": "ref-large"}}}})
    sid = answer["sessionId"]
    assert {o["id"]: o["currentValue"] for o in answer["configOptions"]}["model"] == "ref-large"
    assert answer["modes"]["currentModeId"] == "code"
    changed = await wire.call("session/set_config_option", {"sessionId": sid, "configId": "effort", "value": "high"})
    assert {o["id"]: o["currentValue"] for o in changed["configOptions"]}["effort"] == "high"
    with pytest.raises(AcpWireError) as refused:  # ACP's code for it: invalid params, with what is offered
        await wire.call("session/set_config_option", {"sessionId": sid, "configId": "effort", "value": "extreme"})
    assert refused.value.code == -32602 and refused.value.data["offered"] == ["low", "medium", "high"]
    with pytest.raises(AcpWireError) as untyped:
        await wire.call("session/set_config_option", {"sessionId": sid, "configId": "verbose", "value": True})
    assert untyped.value.code == -32602 and untyped.value.data == {"field": "value"}
    other = await AcpWire.connect(gw.port, ALICE, capabilities={"session": {"configOptions": {"boolean": {}}}})
    loaded = await other.call("session/load", {"sessionId": sid, "cwd": work(gw), "mcpServers": []})
    assert {o["id"]: o["currentValue"] for o in loaded["configOptions"]} == {
        "mode": "code", "model": "ref-large", "effort": "high", "verbose": False}  # it takes booleans: all of them
    mark = len(other.frames)
    assert await wire.call("session/set_mode", {"sessionId": sid, "modeId": "plan"}) == {}
    await other.wait_for(update_of("current_mode_update", currentModeId="plan"), start=mark)
    rpc = await gw.client(ALICE)
    mark = len(other.frames)
    await rpc.call("task.session.set_config_option", {"session_id": sid, "config_id": "verbose", "value": True})
    said = await other.wait_for(lambda f: update_of("config_option_update")(f) and any(
        o["id"] == "verbose" and o["currentValue"] is True for o in f["params"]["update"]["configOptions"]),
        start=mark)
    assert said["params"]["sessionId"] == sid
    # The first client did not say it takes booleans: it never sees one, in an answer or an update.
    assert not [o for f in wire.frames for o in ((f.get("result") or {}).get("configOptions") or []) +
                ((f.get("params") or {}).get("update", {}).get("configOptions") or []) if o.get("type") == "boolean"]
    await wire.call("session/prompt", {"sessionId": sid, "prompt": text("/dirs")})
    assert wire.texts()[-1] == ("agent_message_chunk", f"dirs: {extra}")  # additionalDirectories reached the agent
    # A legacy agent (modes and `models`, no config options): its models as it sent them, set by session/set_model.
    reference_profile(gw.agents_dir, gw.state_dir.parent / "agent-state", "old", "--config-style", "legacy")
    await gw.stop()
    await gw.start()
    legacy = await AcpWire.connect(gw.port, ALICE)
    made = await legacy.call("session/new", {"cwd": work(gw), "mcpServers": [], "_meta": {"acpGateway": {
        "agent": "old"}}})
    assert "configOptions" not in made and made["models"]["currentModelId"] == "ref-small"
    assert await legacy.call("session/set_model", {"sessionId": made["sessionId"], "modelId": "ref-large"}) == {}
    rpc = await gw.client(ALICE)
    view = await rpc.call("task.session.get", {"session_id": made["sessionId"]})
    assert view["config"]["models"]["currentModelId"] == "ref-large"
    assert view["config"]["chosen"]["model"] == {"value": "ref-large", "by": "user"}
    for w in (wire, other, legacy):
        await w.close()
    await rpc.close()


async def test_meta_passes_through_both_ways_unchanged(gw: GatewayProcess) -> None:
    """A client's `_meta` on its prompt reaches the agent as given; the agent's `_meta` on an update reaches the
    client (and /rpc subscribers) as given."""
    wire = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(wire, work(gw))
    start = len(wire.frames)
    meta = {"vendor.example/request": {"tag": "t-1", "n": [1, 2]}}
    answer = await wire.request("session/prompt", {"sessionId": session, "prompt": text("/meta"), "_meta": meta})
    assert answer["result"] == {"stopReason": "end_turn"}
    updates = [f["params"] for f in wire.frames[start:] if f.get("method") == "session/update"]
    said = "".join(u["update"]["content"]["text"] for u in updates
                   if u["update"].get("sessionUpdate") == "agent_message_chunk")
    assert said == 'meta: {"vendor.example/request":{"tag":"t-1","n":[1,2]}}'
    # the agent's own _meta as it sent it; beside it only the gateway's event id (a cursor to resume from)
    agent_said = [{k: v for k, v in u["_meta"].items() if k != "acpGateway"} for u in updates]
    assert [m for m in agent_said if m] == [{"example.com/trace": "agent-side"}]
    assert all(set(u["_meta"]["acpGateway"]) == {"eventId"} for u in updates)
    rpc = await gw.client(ALICE)
    await rpc.call("task.session.prompt", {"session_id": session, "prompt": "/meta", "meta": {"from": "rpc"}})
    events = await rpc.call("task.session.events", {"session_id": session})
    kept = [e["data"]["_meta"] for e in events["events"] if e["type"] == "session_update" and "_meta" in e["data"]]
    assert kept == [{"example.com/trace": "agent-side"}] * 2
    chunks = "".join(e["data"]["update"]["content"]["text"] for e in events["events"] if e["type"] == "session_update"
                     and e["data"]["update"].get("sessionUpdate") == "agent_message_chunk")
    assert chunks.endswith('meta: {"from":"rpc"}')  # the /rpc prompt's `meta`, as the agent's `_meta`
    await rpc.close()
    await wire.close()


async def test_an_agents_question_goes_to_acp_clients_that_offered_elicitation(gw: GatewayProcess) -> None:
    """A client that offered form elicitation is asked (`elicitation/create`, the gateway's session id) and its
    answer goes to the agent; a client that did not offer it is not asked."""
    asked_client = await AcpWire.connect(gw.port, ALICE, capabilities={"elicitation": {"form": {}}})
    session = await new_session(asked_client, work(gw))
    silent = await AcpWire.connect(gw.port, ALICE)
    await silent.call("session/load", {"sessionId": session, "cwd": work(gw), "mcpServers": []})
    asked_client.on_request = lambda req: {"action": "accept", "content": {"name": "Ada", "age": 36}}
    mark = len(silent.frames)
    answer = await asked_client.call("session/prompt", {"sessionId": session, "prompt": text("/elicit form")})
    assert answer == {"stopReason": "end_turn"}
    request = next(f for f in asked_client.frames if f.get("method") == "elicitation/create")
    assert request["params"]["sessionId"] == session and request["params"]["mode"] == "form"
    assert request["params"]["requestedSchema"]["required"] == ["name"]
    assert any('"content":{"name":"Ada","age":36}' in t for _, t in asked_client.texts())
    assert not any(f.get("method") == "elicitation/create" for f in silent.frames[mark:])
    for wire in (asked_client, silent):
        await wire.close()


async def test_a_prompt_is_answered_while_another_session_of_the_owner_streams(gw: GatewayProcess) -> None:
    """The answer waits until the client has every update of its turn: the owner's journal head then holds another
    session's events too, which this session's stream never carries — it must not wait for them (it did, for ever)."""
    wire = await AcpWire.connect(gw.port, ALICE)
    busy = await new_session(wire, work(gw))
    gate = Path(work(gw)) / "gate"
    streaming = asyncio.ensure_future(wire.request("session/prompt", {"sessionId": busy,
                                                                      "prompt": text(f"/trickle {gate}")}, 60))
    await wire.wait_for(is_update("agent_message_chunk"))
    quiet = await new_session(wire, work(gw))
    for i in range(5):  # each answer comes while the other session's events keep the head moving
        answer = await wire.request("session/prompt", {"sessionId": quiet, "prompt": text(f"hello {i}")}, 20)
        assert answer["result"] == {"stopReason": "end_turn"}
    gate.touch()
    assert (await streaming)["result"] == {"stopReason": "end_turn"}
    await wire.close()


async def test_a_prompt_asked_again_at_once_on_several_connections_runs_once(gw: GatewayProcess) -> None:
    """Retries of one key that come together (each finds no turn yet) share one answer: the turn runs once."""
    wires = [await AcpWire.connect(gw.port, ALICE) for _ in range(4)]
    session = await new_session(wires[0], work(gw))
    for wire in wires[1:]:
        await wire.request("session/resume", {"sessionId": session, "cwd": work(gw), "mcpServers": []})
    again = {"sessionId": session, "prompt": text("/sleep 0.3"),
             "_meta": {"acpGateway": {"promptId": "k-once", "retry": True}}}
    answers = await asyncio.gather(*(w.request("session/prompt", again, 30) for w in wires))
    assert [a["result"] for a in answers] == [{"stopReason": "end_turn"}] * 4
    rpc = await gw.client(ALICE)
    history = await rpc.call("task.session.history", {"session_id": session})
    assert [e["content"] for e in history["entries"] if e["kind"] == "user_message"] == ["/sleep 0.3"]
    # asked again later, on a new connection: the same turn answers, and none runs
    late = await AcpWire.connect(gw.port, ALICE)
    await late.request("session/resume", {"sessionId": session, "cwd": work(gw), "mcpServers": []})
    assert (await late.request("session/prompt", again))["result"] == {"stopReason": "end_turn"}
    history = await rpc.call("task.session.history", {"session_id": session})
    assert len([e for e in history["entries"] if e["kind"] == "user_message"]) == 1
    for wire in [*wires, late]:
        await wire.close()
    await rpc.close()


async def test_params_nested_too_deep_are_refused_on_both_edges(gw: GatewayProcess) -> None:
    deep: dict[str, Any] = {}  # deeper than MAX_NESTING (64); orjson, on both sides, encodes up to 255
    inner = deep
    for _ in range(100):
        inner["a"] = {}
        inner = inner["a"]
    wire = await AcpWire.connect(gw.port, ALICE)
    session = await new_session(wire, work(gw))
    answer = await wire.request("session/prompt", {"sessionId": session, "prompt": text("hi"), "_meta": deep})
    assert answer["error"]["code"] == -32602 and "nested" in answer["error"]["message"]
    rpc = await gw.client(ALICE)
    with pytest.raises(RpcCallError) as refused:
        await rpc.call("task.session.prompt", {"session_id": session, "prompt": "hi", "meta": deep})
    assert refused.value.code == -32602
    assert (await wire.request("session/prompt", {"sessionId": session, "prompt": text("hi")}))["result"] == {
        "stopReason": "end_turn"}
    await wire.close()
    await rpc.close()
