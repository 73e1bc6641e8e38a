"""Replay matching (acp/replay/rules.py, acp/replay/script.py): each rule by its id, in tables, tolerant and strict."""

from __future__ import annotations

from typing import Any

import pytest

from acp.replay.rules import ALL_RULES, STRICT_RULES, Bindings, Mismatch, Rule, localize, match_frame
from acp.replay.script import AGENT, CLIENT, Entry, Replay, Script


def req(method: str, params: Any, id_: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def note(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def answer(id_: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


PROMPT = {"sessionId": "s-1", "prompt": [{"type": "text", "text": "hi"}]}
KNOWN = Bindings(sessions={"s-1": "s-1"}, issued=frozenset({"s-1"}), handed_out=frozenset({"s-1"}))

# rule, recorded frame, received frame, bindings before, matches in tolerant mode, matches in strict mode
MATCH_TABLE: list[tuple[str, dict[str, Any], dict[str, Any], Bindings, bool, bool]] = [
    ("RM1", req("session/prompt", PROMPT, 4), req("session/prompt", PROMPT, 99), KNOWN, True, True),
    ("RM2", req("session/prompt", PROMPT), req("session/prompt", {**PROMPT, "_meta": {"traceparent": "00-x"}}), KNOWN,
     True, False),
    ("RM2 nested", req("session/prompt", {**PROMPT, "prompt": [{"type": "text", "text": "hi", "_meta": {"a": 1}}]}),
     req("session/prompt", PROMPT), KNOWN, True, False),
    ("RM3", req("session/new", {"cwd": "<cwd>", "mcpServers": []}), req("session/new", {"cwd": "/w", "mcpServers": []}),
     Bindings(), True, True),
    ("RM3 prefix", req("fs/x", {"path": "<cwd>/src/a.py"}), req("fs/x", {"path": "/home/u/p/src/a.py"}), Bindings(),
     True, True),
    ("RM3 bound", req("session/new", {"cwd": "<cwd>"}), req("session/new", {"cwd": "/other"}),
     Bindings(paths={"<cwd>": "/w"}), False, False),
    ("RM3 plain cwd", req("session/new", {"cwd": "/rec/work"}), req("session/new", {"cwd": "/live"}), Bindings(), True,
     True),
    ("RM3 not a path", req("x", {"name": "<cwd>"}), req("x", {"name": "relative"}), Bindings(), False, False),
    ("RM4 probe", req("session/resume", {"sessionId": "probe-0"}), req("session/resume", {"sessionId": "live-7"}),
     Bindings(issued=frozenset({"s-1"})), True, False),
    ("RM4 probe, but the agent knows it", req("session/resume", {"sessionId": "probe-0"}),
     req("session/resume", {"sessionId": "s-1"}), Bindings(issued=frozenset({"s-1"})), False, False),
    ("RM4 issued", req("session/resume", {"sessionId": "s-1"}), req("session/resume", {"sessionId": "s-1"}),
     Bindings(issued=frozenset({"s-1"})), True, True),
    ("RM4 issued, another id", req("session/resume", {"sessionId": "s-1"}), req("session/resume", {"sessionId": "s-2"}),
     Bindings(issued=frozenset({"s-1"})), False, False),
    ("RM4 issued, another the agent knows", req("session/resume", {"sessionId": "s-1"}),
     req("session/resume", {"sessionId": "s-2"}), Bindings(issued=frozenset({"s-1", "s-2"})), True, False),
    ("RM4 forgotten", req("session/resume", {"sessionId": "s-1"}), req("session/resume", {"sessionId": "s-1"}),
     Bindings(issued=frozenset({"s-1"}), forget=True), False, True),
    ("RM4 probe when forgotten", req("session/resume", {"sessionId": "probe-0"}),
     req("session/resume", {"sessionId": "s-1"}), Bindings(issued=frozenset({"s-1"}), forget=True), True, False),
    ("RM4 bound", req("session/prompt", PROMPT), req("session/prompt", {**PROMPT, "sessionId": "s-9"}),
     Bindings(sessions={"s-1": "s-2"}), False, False),
    ("RM5", req("x", {"at": "2026-01-02T03:04:05Z"}), req("x", {"at": "2026-12-02T13:00:00.5+00:00"}), Bindings(), True,
     False),
    ("RM6", req("initialize", {"protocolVersion": 1, "clientInfo": {"name": "acp-gateway", "version": "0.1.0"}}),
     req("initialize", {"protocolVersion": 1, "clientInfo": {"name": "acp-gateway", "version": "0.2.0"}}), Bindings(),
     True, False),
    ("RM8", req("session/new", {"mcpServers": [{"env": [{"name": "K", "value": "[secret]"}]}]}),
     req("session/new", {"mcpServers": [{"env": [{"name": "K", "value": "sk-real"}]}]}), Bindings(), True, True),
    ("RM10", answer(0, {"outcome": {"outcome": "selected", "optionId": "allow"}}),
     answer(0, {"outcome": {"outcome": "cancelled"}}), Bindings(), True, False),
    ("a different text", req("session/prompt", PROMPT),
     req("session/prompt", {**PROMPT, "prompt": [{"type": "text", "text": "bye"}]}), KNOWN, False, False),
    ("a different method", req("session/prompt", PROMPT), req("session/cancel", PROMPT), KNOWN, False, False),
    ("a notification for a request", req("session/cancel", {"sessionId": "s-1"}), note("session/cancel",
                                                                                      {"sessionId": "s-1"}), KNOWN,
     False, False),
]


@pytest.mark.parametrize(("rule", "recorded", "received", "bound", "tolerant", "strict"), MATCH_TABLE,
                         ids=[row[0] for row in MATCH_TABLE])
def test_matching_by_rule(rule: str, recorded: dict[str, Any], received: dict[str, Any], bound: Bindings,
                          tolerant: bool, strict: bool) -> None:
    assert isinstance(match_frame(recorded, received, bound, ALL_RULES), Bindings) is tolerant
    assert isinstance(match_frame(recorded, received, bound, STRICT_RULES), Bindings) is strict


def test_every_rule_is_in_the_table() -> None:
    named = {row[0].split()[0] for row in MATCH_TABLE}
    assert {r.value for r in Rule} - named == {"RM7", "RM9"}  # the two about order: test_replay_* below


def test_a_mismatch_says_where_and_what() -> None:
    got = match_frame(req("session/prompt", PROMPT), req("session/prompt", {**PROMPT, "prompt": [
        {"type": "text", "text": "bye"}]}), KNOWN)
    assert isinstance(got, Mismatch)
    assert got.path == "params.prompt[0].text" and got.expected == "hi" and got.received == "bye"
    assert "'bye' where the recording has 'hi'" in got.describe()


def test_bindings_are_applied_to_what_the_agent_sends() -> None:
    bound = match_frame(req("session/resume", {"sessionId": "probe-0", "cwd": "<cwd>"}),
                        req("session/resume", {"sessionId": "live-7", "cwd": "/live"}), Bindings())
    assert isinstance(bound, Bindings)
    sent = localize(note("session/update", {"sessionId": "probe-0", "update": {"path": "<cwd>/a.txt"}}), bound)
    assert sent["params"] == {"sessionId": "live-7", "update": {"path": "/live/a.txt"}}


def script(name: str, *frames: tuple[str, dict[str, Any]]) -> Script:
    return Script(name, tuple(Entry(d, m, float(i)) for i, (d, m) in enumerate(frames)))


NEW = script("new", (CLIENT, req("initialize", {"protocolVersion": 1}, 0)),
             (AGENT, answer(0, {"protocolVersion": 1})),
             (CLIENT, req("session/new", {"cwd": "<cwd>", "mcpServers": []}, 1)),
             (AGENT, answer(1, {"sessionId": "s-1"})),
             (CLIENT, req("session/list", {}, 2)),
             (AGENT, answer(2, {"sessions": []})),
             (CLIENT, req("session/prompt", PROMPT, 3)),
             (AGENT, note("session/update", {"sessionId": "s-1", "update": {"sessionUpdate": "agent_message_chunk"}})),
             (AGENT, answer(3, {"stopReason": "end_turn"})))


def methods(sent: tuple[Entry, ...]) -> list[Any]:
    return [e.msg.get("method") or e.msg.get("result") for e in sent]


def test_replay_passes_over_what_the_client_does_not_send_n9() -> None:
    replay = Replay([NEW])
    replay.receive(req("initialize", {"protocolVersion": 1}, 10))
    assert methods(replay.receive(req("session/new", {"cwd": "/w", "mcpServers": []}, 11)).send) == [
        {"sessionId": "s-1"}]
    played = replay.receive(req("session/prompt", PROMPT, 12))  # session/list is passed over
    assert played.divergence is None
    assert [e.msg.get("id") for e in played.send] == [None, 12]  # the answer carries the client's id (RM1)
    strict = Replay([NEW], strict=True)
    strict.receive(req("initialize", {"protocolVersion": 1}, 10))
    strict.receive(req("session/new", {"cwd": "/w", "mcpServers": []}, 11))
    diverged = strict.receive(req("session/prompt", PROMPT, 12)).divergence
    assert diverged is not None and diverged.expected is not None and diverged.expected["method"] == "session/list"


def test_replay_takes_back_to_back_client_frames_in_any_order_n7() -> None:
    answers = script("answers", (CLIENT, req("a", {}, 1)), (CLIENT, req("b", {}, 2)),
                     (AGENT, answer(1, "A")), (AGENT, answer(2, "B")))
    replay = Replay([answers])
    assert replay.receive(req("b", {}, 20)).send == ()  # matched early: nothing is said until the run is complete
    assert [(e.msg["id"], e.msg["result"]) for e in replay.receive(req("a", {}, 10)).send] == [(10, "A"), (20, "B")]
    strict = Replay([answers], strict=True)
    assert strict.receive(req("b", {}, 20)).divergence is not None


def test_replay_follows_the_script_that_agrees_with_the_client() -> None:
    known = script("known", (CLIENT, req("initialize", {}, 0)), (AGENT, answer(0, {})),
                   (CLIENT, req("session/resume", {"sessionId": "s-1"}, 1)), (AGENT, answer(1, {"modes": None})))
    unknown = script("unknown", (CLIENT, req("initialize", {}, 0)), (AGENT, answer(0, {})),
                     (CLIENT, req("session/resume", {"sessionId": "probe"}, 1)),
                     (AGENT, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32002, "message": "not found"}}),
                     (CLIENT, req("session/new", {}, 2)), (AGENT, answer(2, {"sessionId": "s-2"})))
    for forget, expect in ((False, {"modes": None}), (True, None)):
        replay = Replay([NEW, known, unknown], forget=forget)
        replay.receive(req("initialize", {}, 0))
        sent = replay.receive(req("session/resume", {"sessionId": "s-1"}, 5)).send
        assert sent[0].msg.get("result") == expect, forget
        if forget:
            assert sent[0].msg["error"]["code"] == -32002


def test_a_divergence_shows_both_frames_side_by_side() -> None:
    replay = Replay([NEW])
    replay.receive(req("initialize", {"protocolVersion": 1}, 0))
    divergence = replay.receive(req("session/load", {"sessionId": "x", "cwd": "/w", "mcpServers": []}, 1)).divergence
    assert divergence is not None
    error = divergence.error()
    assert error["code"] == -32603 and "expects session/new" in error["message"]
    assert error["data"]["expected"]["method"] == "session/new"
    assert error["data"]["received"]["method"] == "session/load"
    lines = error["data"]["side_by_side"].splitlines()
    assert lines[0].startswith("recorded") and lines[0].rstrip().endswith("received")
    assert any("session/new" in line and " | " in line and "session/load" in line for line in lines)
