"""`acp-gateway connect`'s rules (gateway/clients/bridge/rules.py), without I/O: each BR rule as a short script of
messages from the editor and the gateway, and what goes where."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.cli.connect import acp_url
from gateway.clients.bridge.link import shown_url
from gateway.clients.bridge.rules import Bridge, Phase


def msgs(frames: list[bytes]) -> list[dict[str, Any]]:
    return [orjson.loads(f) for f in frames]


def req(i: int | str, method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params if params is not None else {}}


def ok(i: int, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "result": result}


def update(session: str, event_id: int, kind: str = "agent_message_chunk", text: str = "x") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": session, "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}},
        "_meta": {"acpGateway": {"eventId": event_id}}}}


def opened(cursor: int = 10) -> tuple[Bridge, int]:
    """A live bridge with session s-1 open (cwd /w) at `cursor`; returns it and the next upstream id."""
    bridge = Bridge()
    assert bridge.linked() == [] and bridge.phase is Phase.LIVE
    up, _ = bridge.from_editor(req(1, "initialize", {"protocolVersion": 1}))
    bridge.from_gateway(ok(msgs(up)[0]["id"], {"protocolVersion": 1}))
    up, _ = bridge.from_editor(req(2, "session/new", {"cwd": "/w", "mcpServers": []}))
    new_id = msgs(up)[0]["id"]
    _, down = bridge.from_gateway(ok(new_id, {"sessionId": "s-1", "_meta": {"acpGateway": {"eventCursor": cursor}}}))
    assert msgs(down)[0]["id"] == 2  # BR-2: under the editor's id
    return bridge, new_id + 1


def test_br1_requests_go_under_ids_of_the_bridge_and_a_prompt_gets_a_key() -> None:
    bridge, _ = opened()
    up, down = bridge.from_editor(req("e-7", "session/prompt", {"sessionId": "s-1", "prompt": [],
                                                                "_meta": {"mine": 1}}))
    sent = msgs(up)[0]
    assert down == [] and isinstance(sent["id"], int)
    meta = sent["params"]["_meta"]
    assert meta["mine"] == 1 and len(meta["acpGateway"]["promptId"]) == 32 and "retry" not in meta["acpGateway"]
    _, down = bridge.from_gateway(ok(sent["id"], {"stopReason": "end_turn"}))
    assert msgs(down) == [ok("e-7", {"stopReason": "end_turn"})]  # type: ignore[arg-type]


def test_br1_the_agent_of_connect_goes_on_session_new_unless_the_editor_names_one() -> None:
    bridge = Bridge(agent="codex")
    bridge.linked()
    up, _ = bridge.from_editor(req(1, "session/new", {"cwd": "/w"}))
    assert msgs(up)[0]["params"]["_meta"] == {"acpGateway": {"agent": "codex"}}
    up, _ = bridge.from_editor(req(2, "session/new", {"cwd": "/w", "_meta": {"acpGateway": {"agent": "ref"}}}))
    assert msgs(up)[0]["params"]["_meta"] == {"acpGateway": {"agent": "ref"}}


def test_br1_the_session_of_connect_is_what_session_new_opens() -> None:
    bridge = Bridge(session="refactor")
    bridge.linked()
    up, _ = bridge.from_editor(req(1, "session/new", {"cwd": "/w"}))
    assert msgs(up)[0]["params"]["_meta"] == {"acpGateway": {"session": "refactor"}}


def test_br3_updates_pass_and_move_the_cursor() -> None:
    bridge, _ = opened(cursor=10)
    _, down = bridge.from_gateway(update("s-1", 14))
    assert msgs(down) == [update("s-1", 14)]
    bridge.from_gateway(update("s-1", 12))  # a state report sent after a replay's answer: older, kept as it is
    assert bridge.sessions["s-1"].cursor == 14


def test_br4_br5_a_gateway_request_goes_to_the_editor_and_its_answer_back() -> None:
    bridge, _ = opened()
    _, down = bridge.from_gateway(req(0, "session/request_permission", {"sessionId": "s-1"}))
    theirs = msgs(down)[0]["id"]
    up, _ = bridge.from_editor({"jsonrpc": "2.0", "id": theirs, "result": {"outcome": {"outcome": "cancelled"}}})
    assert msgs(up) == [{"jsonrpc": "2.0", "id": 0, "result": {"outcome": {"outcome": "cancelled"}}}]
    _, down = bridge.from_gateway(req(1, "session/request_permission", {"sessionId": "s-1"}))
    second = msgs(down)[0]["id"]
    _, down = bridge.from_gateway({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}})
    assert msgs(down) == [{"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": second}}]
    up, _ = bridge.from_editor({"jsonrpc": "2.0", "id": second, "result": {}})  # too late: dropped
    assert up == []


def test_br5_the_editor_withdraws_its_own_request_under_the_bridges_id() -> None:
    bridge, _ = opened()
    up, _ = bridge.from_editor(req(9, "session/prompt", {"sessionId": "s-1", "prompt": []}))
    ours = msgs(up)[0]["id"]
    up, _ = bridge.from_editor({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 9}})
    assert msgs(up) == [{"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": ours}}]


def test_br6_br7_br8_a_lost_connection_and_the_next_one() -> None:
    bridge, _ = opened(cursor=10)
    up, _ = bridge.from_editor(req(3, "session/prompt", {"sessionId": "s-1", "prompt": [{"type": "text",
                                                                                         "text": "go"}]}))
    key = msgs(up)[0]["params"]["_meta"]["acpGateway"]["promptId"]
    bridge.from_gateway(update("s-1", 15))
    _, down = bridge.from_gateway(req(0, "session/request_permission", {"sessionId": "s-1"}))
    asked = msgs(down)[0]["id"]
    # BR-6: the gateway's question is withdrawn from the editor; what the editor sends meanwhile waits
    assert msgs(bridge.lost()) == [{"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": asked}}]
    assert bridge.from_editor({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s-1"}}) == (
        [], [])
    assert bridge.from_editor({"jsonrpc": "2.0", "id": asked, "result": {}}) == ([], [])
    # BR-7: initialize again as the editor said it, then resume from the cursor, then the waiting requests
    init = msgs(bridge.linked())
    assert [m["method"] for m in init] == ["initialize"] and init[0]["params"] == {"protocolVersion": 1}
    up, _ = bridge.from_gateway(ok(init[0]["id"], {"protocolVersion": 1}))
    resume = msgs(up)
    assert [(m["method"], m["params"]) for m in resume] == [
        ("session/resume", {"sessionId": "s-1", "cwd": "/w", "mcpServers": [], "_meta": {"acpGateway": {"since": 15}}})]
    assert bridge.phase is Phase.LINKING
    # BR-8: the replay's echo of the editor's own prompt is not passed on; the rest is
    _, down = bridge.from_gateway(update("s-1", 16, "user_message_chunk", "go"))
    assert down == []
    up, _ = bridge.from_gateway(ok(resume[0]["id"], {"_meta": {"acpGateway": {"eventCursor": 16}}}))
    again = msgs(up)
    assert [m["method"] for m in again] == ["session/prompt", "session/cancel"]
    assert again[0]["params"]["_meta"]["acpGateway"] == {"promptId": key, "retry": True}
    assert bridge.phase is Phase.LIVE
    _, down = bridge.from_gateway(update("s-1", 17, "agent_message_chunk", "done"))
    assert len(down) == 1
    _, down = bridge.from_gateway(update("s-1", 18, "user_message_chunk", "go"))  # another client's, later: passed
    assert len(down) == 1
    _, down = bridge.from_gateway(ok(again[0]["id"], {"stopReason": "end_turn"}))
    assert msgs(down)[0]["id"] == 3


def test_br7_a_session_gone_meanwhile_is_no_longer_resumed() -> None:
    bridge, _ = opened()
    bridge.lost()
    init = msgs(bridge.linked())
    up, _ = bridge.from_gateway(ok(init[0]["id"], {}))
    resume = msgs(up)[0]
    up, _ = bridge.from_gateway({"jsonrpc": "2.0", "id": resume["id"], "error": {"code": -32002, "message": "gone"}})
    assert bridge.sessions == {} and bridge.phase is Phase.LIVE and up == []


def test_the_editors_unanswered_requests_are_named() -> None:
    bridge = Bridge()
    bridge.from_editor(req("x", "initialize", {"protocolVersion": 1}))  # linking: it waits
    assert bridge.unanswered() == [("x", "initialize")]


@pytest.mark.parametrize(("url", "shown"), [
    ("ws://127.0.0.1:8765/acp", "ws://127.0.0.1:8765/acp"),
    ("ws://127.0.0.1:8765/acp?token=secret-token-value", "ws://127.0.0.1:8765/acp"),
    ("wss://me:pass@gw.example/acp", "wss://gw.example/acp"),
    ("ws://[::1]:9/acp?x=1", "ws://[::1]:9/acp"),
])
def test_an_address_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert shown_url(url) == shown


@pytest.mark.parametrize(("given", "endpoint"), [
    ("ws://127.0.0.1:8765/rpc", "ws://127.0.0.1:8765/acp"),
    ("ws://127.0.0.1:8765", "ws://127.0.0.1:8765/acp"),
    ("ws://127.0.0.1:8765/acp", "ws://127.0.0.1:8765/acp"),
    ("127.0.0.1:8765", "ws://127.0.0.1:8765/acp"),
    ("http://gw.example/prefix/rpc?token=t", "ws://gw.example/prefix/acp?token=t"),
    ("https://gw.example", "wss://gw.example/acp"),
])
def test_the_acp_endpoint_of_an_address(given: str, endpoint: str) -> None:
    assert acp_url(given) == endpoint
