"""gateway.api.acp_server.protocol and .updates as tables: the rule ids of the protocol's docstring, one row each, and
what each journal event becomes for a remote ACP client; and gateway.api.answering, by which `/acp` (and `/rpc`)
answer a failed call."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway import errors
from gateway.api.acp_server.prompt_keys import prompt_answer
from gateway.api.acp_server.protocol import (
    AcpDecision,
    AcpPhase,
    GatewayChoice,
    Kind,
    Malformed,
    Message,
    PromptChoice,
    acp_error_code,
    agent_meta,
    classify,
    decide,
    gateway_meta,
    next_phase,
)
from gateway.api.acp_server.updates import (
    CaughtUp,
    Deleted,
    Notify,
    QuestionOffer,
    Withdraw,
    permission_answer,
    session_info,
    translate,
)
from gateway.api.answering import error_frame, error_response, failure
from gateway.error_codes import AGENT_FAILED
from gateway.errors import GatewayError
from gateway.journal import synthetic_frame
from gateway.store import EventRow

CLASSIFY_TABLE: list[tuple[str, str | bytes, Any]] = [
    ("F1", "{nope", Malformed("F1", -32700, "Parse error: the frame is not valid JSON")),
    ("F2", "[]", "F2"),
    ("F2 a batch", '[{"jsonrpc":"2.0","id":1,"method":"session/list"}]', "F2"),
    ("F3 a number", "5", "F3"),
    ("F3 wrong version", '{"jsonrpc":"1.0","id":3,"method":"x"}', ("F3", 3)),
    ("F3 bool id", '{"jsonrpc":"2.0","id":true,"method":"x"}', ("F3", None)),
    ("F3 object id", '{"jsonrpc":"2.0","id":{},"method":"x"}', ("F3", None)),
    ("F3 method not a string", '{"jsonrpc":"2.0","id":4,"method":5}', ("F3", 4)),
    ("F3 params a string", '{"jsonrpc":"2.0","id":4,"method":"x","params":"p"}', ("F3", 4)),
    ("F3 result and error", '{"jsonrpc":"2.0","id":4,"result":1,"error":{}}', ("F3", 4)),
    ("F3 neither", '{"jsonrpc":"2.0","id":4}', ("F3", 4)),
    ("F4", b'{"jsonrpc":"2.0","id":1,"method":"initialize"}', Malformed(
        "F4", None, "binary frames are ignored: send JSON-RPC as text frames")),
    ("request", '{"jsonrpc":"2.0","id":"a","method":"initialize","params":{}}',
     Message(Kind.REQUEST, "a", "initialize", {})),
    ("notification", '{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}',
     Message(Kind.NOTIFICATION, None, "session/cancel", {"sessionId": "s"})),
    ("null id is a notification", '{"jsonrpc":"2.0","id":null,"method":"session/cancel"}',
     Message(Kind.NOTIFICATION, None, "session/cancel")),
    ("response", '{"jsonrpc":"2.0","id":0,"result":{"outcome":{}}}',
     Message(Kind.RESPONSE, 0, result={"outcome": {}})),
    ("error response", '{"jsonrpc":"2.0","id":0,"error":{"code":-32800}}',
     Message(Kind.RESPONSE, 0, error={"code": -32800})),
]


@pytest.mark.parametrize(("rule", "frame", "expected"), CLASSIFY_TABLE, ids=[r[0] for r in CLASSIFY_TABLE])
def test_classify(rule: str, frame: str | bytes, expected: Any) -> None:
    got = classify(frame)
    if isinstance(expected, str):
        assert isinstance(got, Malformed) and got.rule == expected and got.code == -32600 and got.id is None
    elif isinstance(expected, tuple):
        assert isinstance(got, Malformed) and (got.rule, got.id) == expected and got.code == -32600
    else:
        assert got == expected


def request(method: str) -> Message:
    return Message(Kind.REQUEST, 1, method)


def notification(method: str) -> Message:
    return Message(Kind.NOTIFICATION, None, method)


RESPONSE = Message(Kind.RESPONSE, 1, result={})
WAITING, READY = AcpPhase.AWAITING_INITIALIZE, AcpPhase.READY

DECIDE_TABLE = [
    ("C1", WAITING, request("session/new"), AcpDecision.REFUSE_NOT_INITIALIZED, WAITING),
    ("C1 unknown", WAITING, request("nope"), AcpDecision.REFUSE_NOT_INITIALIZED, WAITING),
    ("C2 notification", WAITING, notification("session/cancel"), AcpDecision.IGNORE, WAITING),
    ("C2 response", WAITING, RESPONSE, AcpDecision.IGNORE, WAITING),
    ("C3", WAITING, request("initialize"), AcpDecision.INITIALIZE, READY),
    ("C4", READY, request("initialize"), AcpDecision.REFUSE_REINITIALIZE, READY),
    ("C5 new", READY, request("session/new"), AcpDecision.DISPATCH, READY),
    ("C5 load", READY, request("session/load"), AcpDecision.DISPATCH, READY),
    ("C5 resume", READY, request("session/resume"), AcpDecision.DISPATCH, READY),
    ("C5 list", READY, request("session/list"), AcpDecision.DISPATCH, READY),
    ("C5 prompt", READY, request("session/prompt"), AcpDecision.DISPATCH, READY),
    ("C5 close", READY, request("session/close"), AcpDecision.DISPATCH, READY),
    ("C5 authenticate", READY, request("authenticate"), AcpDecision.DISPATCH, READY),
    ("C5 configuration", READY, request("session/set_mode"), AcpDecision.DISPATCH, READY),
    ("C6", READY, request("session/fork"), AcpDecision.REFUSE_UNKNOWN_METHOD, READY),
    ("C6 a notification's name as a request", READY, request("session/cancel"), AcpDecision.REFUSE_UNKNOWN_METHOD,
     READY),
    ("C6 extension", READY, request("_vendor/x"), AcpDecision.REFUSE_UNKNOWN_METHOD, READY),
    ("C7 cancel", READY, notification("session/cancel"), AcpDecision.DISPATCH, READY),
    ("C7 cancel_request", READY, notification("$/cancel_request"), AcpDecision.DISPATCH, READY),
    ("C8", READY, notification("_vendor/x"), AcpDecision.IGNORE, READY),
    ("C8 a request's name as a notification", READY, notification("session/prompt"), AcpDecision.IGNORE, READY),
    ("C9", READY, RESPONSE, AcpDecision.DELIVER_RESPONSE, READY),
]


@pytest.mark.parametrize(("rule", "phase", "message", "decision", "after"), DECIDE_TABLE,
                         ids=[r[0] for r in DECIDE_TABLE])
def test_decide(rule: str, phase: AcpPhase, message: Message, decision: AcpDecision, after: AcpPhase) -> None:
    assert decide(phase, message) is decision
    assert next_phase(phase, decision) is after


ERROR_CODE_TABLE = [
    ("E1", -32017, -32602),  # a refused configuration value: ACP has no code for it
    ("E1 other codes as they are", -32002, -32002),
    ("E1 invalid params", -32602, -32602),
    ("E1 a bug", -32603, -32603),
]


@pytest.mark.parametrize(("rule", "code", "answered"), ERROR_CODE_TABLE, ids=[r[0] for r in ERROR_CODE_TABLE])
def test_acp_error_code(rule: str, code: int, answered: int) -> None:
    assert acp_error_code(code) == answered


def test_a_gateway_error_is_answered_as_it_is(caplog: pytest.LogCaptureFixture) -> None:
    refused = errors.not_found("s-1")
    assert failure(refused, logging.getLogger("test.answering"), "method x") is refused
    assert caplog.records == []  # the client's own error: nothing to log
    assert error_response(7, refused.code, refused.message, refused.data) == {"jsonrpc": "2.0", "id": 7, "error": {
        "code": -32002, "message": "session s-1 not found", "data": {"session_id": "s-1"}}}
    assert error_response(None, -32700, "Parse error") == {"jsonrpc": "2.0", "id": None,
                                                           "error": {"code": -32700, "message": "Parse error"}}


def test_a_bug_is_answered_without_its_text_under_an_id_the_log_has(caplog: pytest.LogCaptureFixture) -> None:
    bug = failure(KeyError("secret internals"), logging.getLogger("test.answering"), "method x")
    assert bug.data is not None
    error_id = bug.data["error_id"]
    assert (bug.code, bug.data) == (-32603, {"error_id": error_id})
    answered = orjson.loads(error_frame(1, bug.code, bug.message, bug.data))
    assert "secret" not in orjson.dumps(answered).decode() and error_id in answered["error"]["message"]
    [record] = caplog.records
    assert record.getMessage() == f"method x failed (error id {error_id})" and record.exc_info is not None


def test_gateway_choice() -> None:
    assert gateway_meta(GatewayChoice, None).agent is None
    assert gateway_meta(GatewayChoice, {"other": 1}).agent is None
    chosen = gateway_meta(GatewayChoice, {"acpGateway": {"agent": "codex", "title": "t", "taskId": "task-1"}})
    assert (chosen.agent, chosen.title, chosen.taskId) == ("codex", "t", "task-1")


def event(type_: str, data: dict[str, Any], event_id: int | None = 1) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": "task.session.event", "params": {
        "id": event_id, "type": type_, "session_id": "s-1", "task_id": "t-1", "ts": 0.0, "data": data}})


def update(body: dict[str, Any], event_id: int = 1) -> bytes:
    """The update a client is sent: the journal event's id in `_meta.acpGateway.eventId` (a cursor to resume from)."""
    return orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": "s-1", "update": body, "_meta": {"acpGateway": {"eventId": event_id}}}})


CHUNK = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}
FUTURE = {"sessionUpdate": "_newer_kind", "anything": [1, {"x": None}]}
BLOCKS = [{"type": "text", "text": "do it"}, {"type": "resource_link", "uri": "file:///a", "name": "a"}]
COMMANDS = {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "init", "description": "x"}]}
MODEL = {"id": "model", "name": "Model", "type": "select", "currentValue": "a",
         "options": [{"value": "a", "name": "A"}]}
STAND_IN = {"id": "model", "name": "Model", "type": "select", "currentValue": "a", "options": [],
            "_meta": {"acpGateway": {"via": "session/set_model"}}}
SETTINGS = {"options": [MODEL], "modes": {"currentModeId": "plan", "availableModes": []}, "models": None,
            "chosen": {}, "unapplied": []}
LEGACY_SETTINGS = {**SETTINGS, "options": [STAND_IN], "models": {"currentModelId": "a", "availableModels": []}}

TRANSLATE_TABLE: list[tuple[str, bytes, Any]] = [
    ("an update, untouched", event("session_update", {"update": CHUNK, "replay": False}), Notify((update(CHUNK),))),
    ("a newer agent's update kind, untouched", event("session_update", {"update": FUTURE, "replay": False}),
     Notify((update(FUTURE),))),
    ("the agent's own _meta, untouched beside the event id",
     event("session_update", {"update": CHUNK, "replay": False, "_meta": {"trace": "t"}}, 7),
     Notify((orjson.dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
         "sessionId": "s-1", "update": CHUNK, "_meta": {"trace": "t", "acpGateway": {"eventId": 7}}}}),))),
    ("an update the agent replayed on restore", event("session_update", {"update": CHUNK, "replay": True}), None),
    ("the user's prompt", event("turn_started", {"prompt": BLOCKS}),
     Notify(tuple(update({"sessionUpdate": "user_message_chunk", "content": b}) for b in BLOCKS), tuple(BLOCKS))),
    ("a permission request", event("permission_requested", {"request_id": "perm-1", "tool_call": {"toolCallId": "c"},
                                                            "options": [{"optionId": "o"}]}),
     QuestionOffer("perm-1", {"sessionId": "s-1", "toolCall": {"toolCallId": "c"}, "options": [{"optionId": "o"}]})),
    ("its re-offer", synthetic_frame("permission_requested", {"request_id": "perm-1", "tool_call": None,
                                                              "options": None, "reoffered": True}, "s-1"),
     QuestionOffer("perm-1", {"sessionId": "s-1", "toolCall": None, "options": []})),
    ("its answer", event("permission_resolved", {"request_id": "perm-1", "outcome": {}, "by": "user"}),
     Withdraw("perm-1")),
    ("a title", event("session_title", {"title": "T"}),
     Notify((update({"sessionUpdate": "session_info_update", "title": "T"}),), state="session_info_update")),
    ("the agent's report of its commands: a state, the latest of which a load sends",
     event("session_update", {"update": COMMANDS, "replay": False}), Notify((update(COMMANDS),),
                                                                           state="available_commands_update")),
    ("a change the agent announced itself is not repeated", event("session_config", {"cause": "agent", **SETTINGS}),
     None),
    ("a change it did not announce (another client's set, a re-apply) is said as the agent would",
     event("session_config", {"cause": "restore", **SETTINGS}),
     Notify((update({"sessionUpdate": "config_option_update", "configOptions": [MODEL]}),
             update({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})), state="session_config")),
    ("a legacy agent's change: its mode only (its models are not config options)",
     event("session_config", {"cause": "set", **LEGACY_SETTINGS}),
     Notify((update({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),), state="session_config")),
    ("caught up", synthetic_frame("caught_up", {"subscription_id": "sub", "cursor": 3}), CaughtUp()),
    ("deleted", event("session_deleted", {}), Deleted()),
    ("a gateway note is not the agent's speech", event("session_message", {"level": "info", "text": "x"}), None),
    ("a turn's end", event("turn_ended", {"stop_reason": "end_turn"}), None),
    ("a status", event("session_status", {"state": "RUNNING"}), None),
    ("a heartbeat", synthetic_frame("heartbeat", {"subscription_id": "sub", "cursor": 3}), None),
]


@pytest.mark.parametrize(("name", "frame", "expected"), TRANSLATE_TABLE, ids=[r[0] for r in TRANSLATE_TABLE])
def test_translate(name: str, frame: bytes, expected: Any) -> None:
    assert translate(frame) == expected


@pytest.mark.parametrize(("result", "answer"), [
    ({"outcome": {"outcome": "selected", "optionId": "allow"}}, ("allow", False)),
    ({"outcome": {"outcome": "cancelled"}}, (None, True)),
    ({"outcome": {"outcome": "selected"}}, None),
    ({"outcome": {"outcome": "selected", "optionId": ""}}, None),
    ({"outcome": "allow_once"}, None),
    (None, None),
    ([], None),
])
def test_permission_answer(result: Any, answer: Any) -> None:
    assert permission_answer(result) == answer


def test_session_info() -> None:
    view = {"session_id": "s-1", "cwd": "/w", "title": None, "updated_at": 0.5, "agent": "ref", "state": "COMPLETED",
            "task_id": "t-1"}
    assert session_info(view) == {"sessionId": "s-1", "cwd": "/w", "title": None,
                                  "updatedAt": "1970-01-01T00:00:00.500000Z",
                                  "_meta": {"acpGateway": {"agent": "ref", "state": "COMPLETED", "taskId": "t-1"}}}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(), lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(update=json_values, replay=st.booleans(), task_id=st.none() | st.text(max_size=30),
       session_id=st.text(min_size=1, max_size=40), event_id=st.integers(1, 2**62))
def test_translate_passes_any_update_through(update: Any, replay: bool, task_id: str | None, session_id: str,
                                             event_id: int) -> None:
    """Whatever an agent sent as an update reaches the ACP client as it was, under the session's id; an update the
    agent replayed while the gateway restored it is not sent again."""
    frame = EventRow(event_id, "session_update", "alice", session_id, task_id, 1.5,
                     {"update": update, "replay": replay}).frame()
    got = translate(frame)
    if replay:
        assert got is None
        return
    assert isinstance(got, Notify) and len(got.frames) == 1
    assert orjson.loads(got.frames[0]) == {"jsonrpc": "2.0", "method": "session/update",
                                           "params": {"sessionId": session_id, "update": update,
                                                      "_meta": {"acpGateway": {"eventId": event_id}}}}


@pytest.mark.parametrize(("meta", "to_agent"), [
    (None, None),
    ({"trace": 1}, {"trace": 1}),
    ({"trace": 1, "acpGateway": {"promptId": "k"}}, {"trace": 1}),
    ({"acpGateway": {"promptId": "k", "retry": True}}, None),
])
def test_the_gateways_own_meta_never_reaches_the_agent(meta: Any, to_agent: Any) -> None:
    assert agent_meta(meta) == to_agent


@pytest.mark.parametrize(("meta", "key", "retry"), [
    (None, None, False), ({"acpGateway": {"promptId": "k-1"}}, "k-1", False),
    ({"acpGateway": {"promptId": "k-1", "retry": True}}, "k-1", True),
])
def test_a_prompts_key_and_retry(meta: Any, key: str | None, retry: bool) -> None:
    choice = gateway_meta(PromptChoice, meta)
    assert (choice.promptId, choice.retry) == (key, retry)


@pytest.mark.parametrize("meta", [{"acpGateway": {"promptId": ""}}, {"acpGateway": {"promptId": "k", "retry": 1}},
                                  {"acpGateway": {"retry": True}},
                                  {"acpGateway": {"promptId": "x" * 201}}, {"acpGateway": {"other": 1}}])
def test_a_malformed_prompt_key_is_refused(meta: Any) -> None:
    with pytest.raises(ValidationError):
        gateway_meta(PromptChoice, meta)


@pytest.mark.parametrize(("ended", "answer"), [  # PK: a turn's end as the answer to the prompt asked again
    ({"stop_reason": "end_turn"}, {"stopReason": "end_turn"}),
    ({"stop_reason": "cancelled"}, {"stopReason": "cancelled"}),
    ({"stop_reason": "refusal"}, {"stopReason": "refusal"}),
    ({"stop_reason": "interrupted"}, "was interrupted"),
    ({"stop_reason": None, "error": {"message": "boom"}, "message": "agent 'ref' failed the turn: boom"},
     "agent 'ref' failed the turn: boom"),
])
def test_the_answer_of_a_turn_asked_again(ended: dict[str, Any], answer: Any) -> None:
    if isinstance(answer, dict):
        assert prompt_answer("s-1", "ref", ended) == answer
        return
    with pytest.raises(GatewayError) as refused:
        prompt_answer("s-1", "ref", ended)
    assert refused.value.code == AGENT_FAILED and answer in refused.value.message
    assert refused.value.data["session_id"] == "s-1"
