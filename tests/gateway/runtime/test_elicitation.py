"""Elicitation: the rules by table (acp.elicitation, rows E1-E4 and A1-A4), then a real gateway where an agent's
question reaches every frontend, survives the asking one going away, refuses an answer that does not fit and
keeps the question open, and is cancelled with the turn."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from acp.elicitation import AnswerRefusal, Elicitation, check_answer, check_request
from acp.errors import RpcError
from gateway.clients.client import RpcCallError
from tests.support.world import World, start

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1},
                                           "age": {"type": "integer", "minimum": 0},
                                           "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["name"]}
FORM = {"sessionId": "s", "mode": "form", "message": "Who?", "requestedSchema": SCHEMA}
URL = {"sessionId": "s", "mode": "url", "message": "Sign in", "elicitationId": "e-1", "url": "https://x.example/a"}

REQUESTS: list[tuple[str, dict[str, Any], str | None]] = [
    # rule, params, the field refused (None: accepted)
    ("E1", FORM, None),
    ("E1", {**FORM, "requestedSchema": {"properties": {"ok": {"type": "boolean"}}}}, None),  # type defaults to object
    ("E2", URL, None),
    ("E3", {**FORM, "mode": "chat"}, "mode"),
    ("E3", {**FORM, "message": 5}, "message"),
    ("E3", {**FORM, "requestedSchema": {"type": "array"}}, "requestedSchema"),
    ("E3", {**FORM, "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}}},
     "requestedSchema.properties.a"),
    ("E3", {**FORM, "requestedSchema": {**SCHEMA, "required": ["nobody"]}}, "requestedSchema.required"),
    ("E3", {**FORM, "requestedSchema": {"type": "object", "properties": {"n": {"type": "string", "minLength": -1}}}},
     "requestedSchema.properties.n.minLength"),
    ("E3", {**URL, "url": "javascript:alert(1)"}, "url"),
    ("E3", {**URL, "url": "file:///etc/passwd"}, "url"),
    ("E3", {**URL, "elicitationId": ""}, "elicitationId"),
]


@pytest.mark.parametrize(("rule", "params", "refused"), REQUESTS, ids=[f"{r[0]}-{i}" for i, r in enumerate(REQUESTS)])
def test_check_request(rule: str, params: dict[str, Any], refused: str | None) -> None:
    if refused is None:
        assert isinstance(check_request(params), Elicitation)
        return
    with pytest.raises(RpcError) as info:
        check_request(params)
    assert info.value.code == -32602 and (info.value.data or {}).get("field") == refused


def test_a_mode_not_offered_is_refused() -> None:  # E4
    with pytest.raises(RpcError, match="did not offer url"):
        check_request(URL, offered=frozenset({"form"}))


FORM_Q, URL_Q = check_request(FORM), check_request(URL)
ANSWERS: list[tuple[str, Elicitation, str, Any, dict[str, Any] | str]] = [
    # rule, question, action, content -> the response, or the field refused
    ("A1", FORM_Q, "accept", {"name": "Ada", "age": 36}, {"action": "accept", "content": {"name": "Ada", "age": 36}}),
    ("A1", FORM_Q, "accept", {"name": "Ada", "tags": ["a"]}, {"action": "accept",
                                                              "content": {"name": "Ada", "tags": ["a"]}}),
    ("A2", URL_Q, "accept", None, {"action": "accept"}),
    ("A3", FORM_Q, "decline", None, {"action": "decline"}),
    ("A3", URL_Q, "cancel", None, {"action": "cancel"}),
    ("A4", FORM_Q, "accept", {"age": 3}, "content.name"),
    ("A4", FORM_Q, "accept", {"name": "Ada", "age": -1}, "content.age"),
    ("A4", FORM_Q, "accept", {"name": "", "age": 1}, "content.name"),
    ("A4", FORM_Q, "accept", {"name": "Ada", "age": "old"}, "content.age"),
    ("A4", FORM_Q, "accept", None, "content"),
    ("A4", URL_Q, "accept", {"x": 1}, "content"),
    ("A4", FORM_Q, "decline", {"name": "x"}, "content"),
    ("A4", FORM_Q, "maybe", None, "action"),
]


@pytest.mark.parametrize(("rule", "question", "action", "content", "expected"), ANSWERS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ANSWERS)])
def test_check_answer(rule: str, question: Elicitation, action: str, content: Any,
                      expected: dict[str, Any] | str) -> None:
    got = check_answer(question, action, content)
    if isinstance(expected, str):
        assert isinstance(got, AnswerRefusal) and got.field == expected, got
    else:
        assert got == expected


# -- a real gateway: the module's, an owner of its own for each test ---------------------------------------------------
async def test_a_question_answered_by_a_second_frontend_after_the_first_left(world: World) -> None:
    first, log1 = await world.subscribed()
    view = await start(first, world.work)
    sid = view["session_id"]
    turn = asyncio.ensure_future(first.call("task.session.prompt", {"session_id": sid, "prompt": "/elicit form"}))
    asked = (await log1.wait(lambda e: e["type"] == "elicitation_requested"))["data"]
    assert asked["mode"] == "form" and asked["requested_schema"]["required"] == ["name"]
    await first.close()  # the asking frontend goes away: the question stays
    with pytest.raises(ConnectionError):
        await turn
    second, log2 = await world.subscribed()
    reoffered = (await log2.wait(lambda e: e["type"] == "elicitation_requested"))["data"]
    assert reoffered["request_id"] == asked["request_id"]
    status = await second.call("task.session.status", {"session_id": sid})
    # The status lists it with what answers it (issue 45, item 8): not a count.
    assert status["pending_elicitations"] == [{"request_id": asked["request_id"], "title": asked["message"],
                                               "mode": "form", "requested_schema": asked["requested_schema"],
                                               "url": None}]
    rid = asked["request_id"]
    # An answer that does not fit is refused with the failing path, and the question stays open.
    with pytest.raises(RpcCallError) as bad:
        await second.call("task.session.elicitation.respond", {"session_id": sid, "request_id": rid,
                                                               "action": "accept",
                                                               "content": {"name": "Ada", "age": -2}})
    assert (bad.value.code, bad.value.data) == (-32602, {"field": "content.age"})  # the first failing path
    assert "stays open" in bad.value.message
    answer = await second.call("task.session.elicitation.respond", {
        "session_id": sid, "request_id": rid, "action": "accept", "content": {"name": "Ada", "age": 36}})
    assert answer == {"request_id": rid, "action": "accept"}
    resolved = (await log2.wait(lambda e: e["type"] == "elicitation_resolved"))["data"]
    assert resolved == {"request_id": rid, "action": "accept", "by": "user"}  # never what was typed
    said = await log2.wait(lambda e: e["type"] == "session_update" and "elicitation:" in str(e["data"]))
    assert '"content":{"name":"Ada","age":36}' in str(said["data"]["update"]["content"]["text"])
    with pytest.raises(RpcCallError) as late:
        await second.call("task.session.elicitation.respond", {"session_id": sid, "request_id": rid,
                                                               "action": "decline"})
    assert late.value.code == -32009
    # Not a permission request: the permission method does not know it.
    with pytest.raises(RpcCallError) as other:
        await second.call("task.session.permission.respond", {"session_id": sid, "request_id": rid,
                                                              "cancelled": True})
    assert other.value.code == -32002
    await second.close()


async def test_url_mode_bad_schemas_and_a_cancel(world: World) -> None:
    client, log = await world.subscribed()
    view = await start(client, world.work)
    sid = view["session_id"]
    # A URL: accepted (the person opened it), then the agent says it is complete.
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "/elicit url"}))
    asked = (await log.wait(lambda e: e["type"] == "elicitation_requested" and e["data"]["mode"] == "url"))["data"]
    assert asked["url"] == "https://example.com/sign-in" and asked["requested_schema"] is None
    await client.call("task.session.elicitation.respond", {"session_id": sid, "request_id": asked["request_id"],
                                                           "action": "accept"})
    completed = (await log.wait(lambda e: e["type"] == "elicitation_completed"))["data"]
    assert completed == {"elicitation_id": asked["elicitation_id"]}
    await turn
    # A schema no client can take: the agent is told so, nobody is asked.
    mark = len(log.events)
    await client.call("task.session.prompt", {"session_id": sid, "prompt": "/elicit bad"})
    said = await log.wait(lambda e: e["type"] == "session_update" and "elicitation/create error" in str(e["data"]))
    assert "-32602" in str(said["data"]) and "requestedSchema.properties.address" in str(said["data"])
    assert not any(e["type"] == "elicitation_requested" for e in log.events[mark:])
    # A question open when the turn is cancelled is answered `cancel`.
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "/elicit form"}))
    asked = (await log.wait(lambda e: e["type"] == "elicitation_requested" and e["data"]["mode"] == "form"))["data"]
    await client.call("task.session.cancel_turn", {"session_id": sid})
    resolved = (await log.wait(lambda e: e["type"] == "elicitation_resolved"
                               and e["data"]["request_id"] == asked["request_id"]))["data"]
    assert (resolved["action"], resolved["by"]) == ("cancel", "cancel")
    assert (await turn)["stop_reason"] == "cancelled"
    await client.close()
