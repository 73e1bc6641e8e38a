"""What the CLI says and takes, as pure functions: a form's answers checked as they are typed, the status view's
waiting requests, events as lines, values in JSON's words rather than Python's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.cli.form_rules import FieldRefused, field_value, form_answer
from gateway.cli.frontend import _view_line
from gateway.clients.chat_text import plain
from gateway.clients.view_text import describe_event, describe_question, option_line, pending_lines, status_text

pytestmark = pytest.mark.unit

# The reference agent's `/elicit form`, and the shapes MCP forms use besides.
FORM: dict[str, Any] = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "minLength": 1, "title": "Your name"},
    "age": {"type": "integer", "minimum": 0},
    "colour": {"type": "string", "enum": ["red", "green"]},
    "subscribe": {"type": "boolean"},
}}
SIZE = {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]}


@pytest.mark.parametrize(("prop", "typed", "value"), [
    (FORM["properties"]["age"], "36", 36),
    (FORM["properties"]["age"], "0", 0),
    ({"type": "number", "maximum": 1.5}, "1.25", 1.25),
    (FORM["properties"]["colour"], "green", "green"),
    (FORM["properties"]["colour"], "Green", "green"),  # any case
    (FORM["properties"]["colour"], "1", "red"),  # its number in the list the form shows
    (SIZE, "Large", "l"),  # a oneOf choice by its title
    (SIZE, "s", "s"),
    (FORM["properties"]["subscribe"], "y", True),
    (FORM["properties"]["subscribe"], "FALSE", False),
    ({"type": "string", "format": "email"}, "ada@example.com", "ada@example.com"),
    ({"type": "string", "format": "date"}, "2025-01-31", "2025-01-31"),
    ({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}, "a, b", ["a", "b"]),
])
def test_an_answer_that_fits_is_taken_as_its_fields_type(prop: dict[str, Any], typed: str, value: Any) -> None:
    assert field_value(prop, typed) == value


@pytest.mark.parametrize(("prop", "typed", "why"), [
    (FORM["properties"]["age"], "abc", "'abc' is not a whole number"),  # issue 45: taken for an integer
    (FORM["properties"]["age"], "1.5", "'1.5' is not a whole number"),
    (FORM["properties"]["age"], "-1", "-1 is too small: give a number at least 0"),
    ({"type": "number", "exclusiveMaximum": 10}, "10", "10 is too large: give a number less than 10"),
    ({"type": "number"}, "nan", "'nan' is not a number"),
    (FORM["properties"]["colour"], "36", "'36' is not one of the choices: 1) red, 2) green"),  # taken for a choice
    (SIZE, "medium", "'medium' is not one of the choices: 1) Small, 2) Large"),
    (FORM["properties"]["subscribe"], "2", "'2' is not a yes or no: answer y or n"),  # taken for a boolean
    ({"type": "string", "maxLength": 3}, "four", "too long: give at most 3 characters (this is 4)"),
    ({"type": "string", "minLength": 5}, "four", "too short: give at least 5 character(s)"),
    ({"type": "string", "pattern": "^[a-z]+$"}, "Ada1", "is not of the form the agent asks (pattern ^[a-z]+$)"),
    ({"type": "string", "format": "email"}, "ada", "'ada' is not an email address"),
    ({"type": "string", "format": "date"}, "31/01/2025", "is not a date (2025-01-31)"),
    ({"type": "array", "items": {"type": "string"}, "minItems": 2}, "a", "give at least 2 value(s)"),
])
def test_an_answer_that_does_not_fit_is_refused_saying_why(prop: dict[str, Any], typed: str, why: str) -> None:
    with pytest.raises(FieldRefused) as refused:
        field_value(prop, typed)
    assert why in str(refused.value)


def test_answer_checks_every_field_and_the_required_ones() -> None:
    taken = form_answer(FORM, ["name=Ada", "age=36", "subscribe=yes"])
    assert taken == {"name": "Ada", "age": 36, "subscribe": True}
    for fields, why in ((["age=36"], "required field(s) missing: name"),
                        (["name=Ada", "age=abc"], "age: 'abc' is not a whole number"),
                        (["name=Ada", "shoe=42"], "the form has no field 'shoe'; its fields: name, age, colour"),
                        (["name"], "'name': give each field as FIELD=VALUE")):
        with pytest.raises(FieldRefused) as refused:
            form_answer(FORM, fields)
        assert why in str(refused.value)
    assert form_answer(None, ["x=1"]) == {"x": "1"}  # no open question: the gateway says why
    with pytest.raises(FieldRefused) as every:  # every mistake at once, not one per try
        form_answer(FORM, ["age=abc", "colour=blue", "shoe=42"])
    assert str(every.value) == ("age: 'abc' is not a whole number; colour: 'blue' is not one of the choices: 1) red, "
                                "2) green; the form has no field 'shoe'; its fields: name, age, colour, subscribe; "
                                "required field(s) missing: name")


def test_a_question_lists_its_fields_and_choices() -> None:
    said = describe_question({"request_id": "elic-1", "message": "Which?", "requested_schema": {
        "type": "object", "properties": {"size": SIZE, "n": {"type": "integer"}}}})
    assert said.endswith("fields: size (string: s|l)  n (integer)")


STATUS = {"session_id": "s-1", "state": "RUNNING", "task_state": "IN_PROGRESS", "error_message": None,
          "is_agent_running": True, "needs_resume": False, "resume_reason": "agent_running"}


def test_status_lists_the_waiting_requests_with_the_commands_that_answer_them() -> None:
    status = {**STATUS,
              "pending_permissions": [{"request_id": "perm-1", "title": "Write notes.md", "options": [
                  {"option_id": "allow-once", "name": "Allow once", "kind": "allow_once"},
                  {"option_id": "reject-once", "name": "Reject", "kind": "reject_once"}]}],
              "pending_elicitations": [{"request_id": "elic-1", "title": "Who is asking?", "mode": "form"},
                                       {"request_id": "elic-2", "title": "Sign in", "mode": "url"}]}
    assert status_text(status) == "RUNNING (task IN_PROGRESS); agent running: yes; needs a resume: no"
    assert pending_lines(status, "s-1") == [
        "permission request perm-1 waiting: Write notes.md",
        "  options: allow-once (Allow once)  reject-once (Reject)",
        "  answer: acp-gateway permission s-1 perm-1 OPTION_ID  (or --cancel)",
        "question elic-1 waiting: Who is asking?",
        "  answer: acp-gateway answer s-1 elic-1 FIELD=VALUE …  (or --decline)",
        "question elic-2 waiting: Sign in",
        "  answer: acp-gateway answer s-1 elic-2 --open  (or --decline)",
    ]


def test_status_of_a_gateway_that_gives_counts_names_the_commands_that_list_them() -> None:
    status = {**STATUS, "pending_permissions": 2, "pending_elicitations": 1}
    assert pending_lines(status, "s-1") == [
        "2 permission request(s) waiting: `acp-gateway permission s-1` lists them",
        "1 question(s) of the agent waiting: `acp-gateway answer s-1` lists them",
    ]
    assert pending_lines({**status, "pending_permissions": 0, "pending_elicitations": []}, "s-1") == []


def test_a_stopped_agent_says_no_and_why_in_words() -> None:
    status = {**STATUS, "state": "WAITING_FOR_INPUT", "is_agent_running": False, "needs_resume": True,
              "resume_reason": "agent_not_running"}
    assert status_text(status) == ("WAITING_FOR_INPUT (task IN_PROGRESS); agent running: no; needs a resume: yes — "
                                   "the agent is not running; its ACP session was saved and can be restored")
    line = _view_line({**status, "name": None})
    assert line == "s-1  WAITING_FOR_INPUT; agent running: no"
    for said in (status_text(status), line):
        assert not {"True", "False", "None"} & set(said.replace(";", " ").split())


def test_a_session_needing_a_resume_after_a_restart_is_a_line_with_the_command() -> None:
    """After a gateway restart the server announces each session whose agent is not running: `watch` says which,
    and how to bring it back."""
    event = {"id": 9, "type": "session_status", "session_id": "s-7", "data": {
        "state": "WAITING_FOR_INPUT", "task_state": "REVIEW", "error_message": None, "is_agent_running": False,
        "needs_resume": True, "resume_reason": "agent_not_running"}}
    assert describe_event(event) == (
        "session s-7: the agent is not running; its ACP session was saved and can be restored — "
        "resume it with `acp-gateway resume s-7` (or send it a prompt)")
    running = {**event, "data": {"state": "RUNNING", "task_state": "IN_PROGRESS", "error_message": None,
                                 "is_agent_running": True}}
    assert describe_event(running) == "s-7 session_status: RUNNING; agent running: yes"


@pytest.mark.parametrize(("value", "shown"), [
    (True, "true"), (False, "false"), (None, "null"), (3, "3"), ("plan", "plan"), (["a", 1], '["a", 1]'),
])
def test_values_are_shown_in_jsons_words(value: Any, shown: str) -> None:
    assert plain(value) == shown


def test_an_option_and_a_config_event_say_true_not_true_in_python() -> None:
    option = {"id": "fast", "name": "Fast mode", "type": "boolean", "currentValue": True}
    assert option_line(option, {}) == "fast: true    [true | false]  Fast mode"
    assert option_line({**option, "type": "select", "currentValue": None, "options": []}, {}) == \
        "fast: null    []  Fast mode"
    event = {"type": "session_config", "session_id": "s-1", "data": {"cause": "set", "options": [option]}}
    assert describe_event(event) == "s-1 session_config (set): fast=true"


def test_the_agents_verbs_work_in_an_absolute_state_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`agents add --state-dir ../state` failed in the install sandbox (bubblewrap does not resolve a relative path
    against the caller's directory): the verbs get the state directory absolute."""
    import argparse

    from gateway.cli.agents import state_dir_of

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    found = state_dir_of(argparse.Namespace(state_dir="../state"))
    assert found.is_absolute() and found.resolve() == (tmp_path / "state").resolve()


def test_agents_list_names_the_variables_a_sign_in_needs_and_gives_json_nulls(tmp_path: Path) -> None:
    """`agents list` said "needs sign in" without the variable, and `--json` gave `last_check: "never checked"`
    beside a duplicated `auth`: it names what to set, says the probe found it, and gives null for no check."""
    import orjson

    from agents.profiles import AgentProfile
    from gateway.cli.agents import auth_words, check_words, install_facts

    install = tmp_path / "claude-acp" / "0.1.0"
    install.mkdir(parents=True)
    (install / "probe.json").write_bytes(orjson.dumps({"auth_state": "needs_sign_in", "auth_methods": [
        {"id": "key", "kind": "env_var", "vars": ["VENDOR_KEY"]}]}))
    profile = AgentProfile(id="claude-acp", command=["claude-agent-acp"], install=str(install),
                           sign_in_vars=["ANTHROPIC_API_KEY"])
    row = {"id": profile.id, **install_facts(profile)}
    assert row["last_check"] is None and "auth" not in row and row["auth_state"] == "needs_sign_in"
    assert row["sign_in_vars"] == ["ANTHROPIC_API_KEY", "VENDOR_KEY"]
    assert auth_words(row) == "probe: needs sign-in: set ANTHROPIC_API_KEY or VENDOR_KEY"
    assert check_words(row["last_check"]) == "never checked"
    assert install_facts(AgentProfile(id="plain", command=["x"])) == {"auth_state": None, "sign_in_vars": [],
                                                                       "last_check": None}


def test_the_states_sessions_state_takes_are_the_gateways() -> None:
    from gateway.cli.frontend import SESSION_STATES, session_state
    from gateway.runtime.states import SessionState

    assert SESSION_STATES == tuple(SessionState)
    assert session_state("waiting_for_input") == "WAITING_FOR_INPUT"
