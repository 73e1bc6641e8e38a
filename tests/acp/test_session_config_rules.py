"""The session configuration rules (acp/session_config.py) as tables: resolving a choice (S1-S4, N1-N3), re-applying
the choices after a restore (A1-A5), and the agent's own changes (O1); one row per rule, by its id."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp.session_config import (
    Apply,
    Call,
    Choice,
    ConfigOffer,
    Done,
    Finding,
    ReapplyAttempt,
    Reason,
    Refused,
    Via,
    adopt,
    next_step,
    resolve,
)


def select(option_id: str, current: str, values: list[str], category: str | None = None,
           **extra: Any) -> dict[str, Any]:
    option: dict[str, Any] = {"id": option_id, "name": option_id.title(), "type": "select", "currentValue": current,
                              "options": [{"value": v, "name": v.title()} for v in values], **extra}
    if category is not None:
        option["category"] = category
    return option


def boolean(option_id: str, current: bool) -> dict[str, Any]:
    return {"id": option_id, "name": option_id.title(), "type": "boolean", "currentValue": current}


# An agent like claude-agent-acp: config options (mode and model among them) and modes, kept in step.
MODERN = ConfigOffer.from_answer({
    "configOptions": [select("mode", "default", ["default", "plan"], "mode"),
                      select("model", "sonnet", ["sonnet", "opus"], "model"),
                      select("effort", "low", ["low", "high"], "thought_level"),
                      boolean("fast", False)],
    "modes": {"currentModeId": "default", "availableModes": [{"id": "default", "name": "Default"},
                                                             {"id": "plan", "name": "Plan"}]}})
# An agent like gemini-cli: modes and the legacy models, no config options.
LEGACY = ConfigOffer.from_answer({
    "modes": {"currentModeId": "default", "availableModes": [{"id": "default", "name": "Default"},
                                                             {"id": "plan", "name": "Plan"}]},
    "models": {"currentModelId": "auto", "availableModels": [{"modelId": "auto", "name": "Auto"},
                                                             {"modelId": "pro", "name": "Pro"}]}})
# Grouped values, an option of a type from a newer protocol, and an option with an unusual id for the mode.
ODD = ConfigOffer.from_answer({"configOptions": [
    {"id": "model", "name": "Model", "type": "select", "category": "model", "currentValue": "a",
     "options": [{"group": "fast", "name": "Fast", "options": [{"value": "a", "name": "A"}]},
                 {"group": "slow", "name": "Slow", "options": [{"value": "b", "name": "B"}]}]},
    {"id": "temperature", "name": "Temperature", "type": "slider", "currentValue": "0.2"},
    select("permission_mode", "ask", ["ask", "auto"], "mode"),
    "not an option", {"name": "no id"}]})

RESOLVE_TABLE: list[tuple[str, ConfigOffer, str, Any, str | None, Call | Refused]] = [
    ("S1 select", MODERN, "effort", "high", None, Call(Via.CONFIG_OPTION, "effort", "high", False, "S1")),
    ("S1 boolean", MODERN, "fast", True, None, Call(Via.CONFIG_OPTION, "fast", True, True, "S1")),
    ("S1 mode as a config option", MODERN, "mode", "plan", None, Call(Via.CONFIG_OPTION, "mode", "plan", False, "S1")),
    ("S1 grouped values", ODD, "model", "b", None, Call(Via.CONFIG_OPTION, "model", "b", False, "S1")),
    ("S2 modes", LEGACY, "mode", "plan", None, Call(Via.MODE, "mode", "plan", False, "S2")),
    ("S3 legacy models", LEGACY, "model", "pro", None, Call(Via.MODEL, "model", "pro", False, "S3")),
    ("S4 mode chosen by another id", ODD, "mode", "auto", "mode",
     Call(Via.CONFIG_OPTION, "permission_mode", "auto", False, "S4")),
    ("S4 a config option's model on a legacy agent", LEGACY, "llm", "pro", "model",
     Call(Via.MODEL, "model", "pro", False, "S4")),
    ("N1 unknown option", MODERN, "verbosity", "x", None,
     Refused(Reason.OPTION_NOT_OFFERED, "the agent offers no option \"verbosity\"; it offers mode, model, effort, fast",
             ("mode", "model", "effort", "fast"), "N1")),
    ("N1 no category to follow", LEGACY, "effort", "high", "thought_level",
     Refused(Reason.OPTION_NOT_OFFERED, "the agent offers no option \"effort\"; it offers mode, model",
             ("mode", "model"), "N1")),
    ("N2 value not offered", MODERN, "model", "haiku", None,
     Refused(Reason.VALUE_NOT_OFFERED, "option \"model\" has no value \"haiku\"; its values: sonnet, opus",
             ("sonnet", "opus"), "N2")),
    ("N2 legacy model not offered", LEGACY, "model", "ultra", None,
     Refused(Reason.VALUE_NOT_OFFERED, "option \"model\" has no value \"ultra\"; its values: auto, pro",
             ("auto", "pro"), "N2")),
    ("N3 boolean for a select", MODERN, "model", True, None,
     Refused(Reason.WRONG_TYPE, "option \"model\" is a select: give one of its values (a string), not true",
             ("sonnet", "opus"), "N3")),
    ("N3 string for a boolean", MODERN, "fast", "true", None,
     Refused(Reason.WRONG_TYPE, "option \"fast\" is a boolean: give true or false, not \"true\"", (), "N3")),
    ("N3 a type from a newer protocol", ODD, "temperature", "0.5", None,
     Refused(Reason.WRONG_TYPE, 'option "temperature" is of type "slider", which this gateway cannot set', (), "N3")),
]


@pytest.mark.parametrize(("rule", "offer", "option_id", "value", "category", "expected"), RESOLVE_TABLE,
                         ids=[r[0] for r in RESOLVE_TABLE])
def test_resolve_table(rule: str, offer: ConfigOffer, option_id: str, value: Any, category: str | None,
                       expected: Call | Refused) -> None:
    assert resolve(offer, option_id, value, category) == expected


def test_modes_are_an_option_only_where_no_config_option_covers_them() -> None:
    assert [o.id for o in MODERN.options()] == ["mode", "model", "effort", "fast"]  # configOptions replace modes
    assert [(o.id, o.via) for o in LEGACY.options()] == [("mode", Via.MODE), ("model", Via.MODEL)]
    stand_in = LEGACY.view()[1]  # in the ACP shape a frontend already renders, saying how it is set
    assert stand_in == {"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": "auto",
                        "options": [{"value": "auto", "name": "Auto"}, {"value": "pro", "name": "Pro"}],
                        "_meta": {"acpGateway": {"via": "session/set_model"}}}
    assert [o.id for o in ODD.options()] == ["model", "temperature", "permission_mode"]  # malformed items skipped


def test_the_calls_say_what_acp_wants() -> None:
    assert Call(Via.CONFIG_OPTION, "fast", True, True).params("s") == {"sessionId": "s", "configId": "fast",
                                                                        "value": True, "type": "boolean"}
    assert Call(Via.CONFIG_OPTION, "model", "opus").params("s") == {"sessionId": "s", "configId": "model",
                                                                     "value": "opus"}
    assert Call(Via.MODE, "mode", "plan").params("s") == {"sessionId": "s", "modeId": "plan"}
    assert Call(Via.MODEL, "model", "pro").params("s") == {"sessionId": "s", "modelId": "pro"}


def run(choices: dict[str, Choice], offer: ConfigOffer,
        answers: dict[str, Any]) -> tuple[list[str], tuple[Finding, ...]]:
    """Drive `next_step` as the runtime does: each call answered from `answers` (an error string refuses it; a
    dict is the agent's answer; absent: an empty answer), the offer updated after each success."""
    attempts: list[ReapplyAttempt] = []
    sent: list[str] = []
    while True:
        step = next_step(choices, offer, attempts)
        if isinstance(step, Done):
            return sent, step.findings
        assert isinstance(step, Apply)
        sent.append(f"{step.call.via.value} {step.call.option_id}={step.call.value}")
        answer = answers.get(step.choice_id, {})
        if isinstance(answer, str):
            attempts.append(ReapplyAttempt(step.choice_id, step.call, answer))
        else:
            attempts.append(ReapplyAttempt(step.choice_id, step.call))
            offer = offer.after(step.call, answer)


def pick(value: Any, category: str | None = None, by: str = "user") -> Choice:
    return Choice(value, category, by)


# A model change that takes `fast` away (as claude-agent-acp does for models without a fast mode).
WITHOUT_FAST = {"configOptions": [select("mode", "default", ["default", "plan"], "mode"),
                                  select("model", "opus", ["sonnet", "opus"], "model"),
                                  select("effort", "low", ["low", "high"], "thought_level")]}

REAPPLY_TABLE: list[tuple[str, dict[str, Choice], ConfigOffer, dict[str, Any], list[str], list[tuple[str, Reason]]]] = [
    ("A1 the agent remembered everything", {"model": pick("sonnet", "model"), "mode": pick("default", "mode")},
     MODERN, {}, [], []),
    ("A2 model first, then mode, then the rest as chosen",
     {"effort": pick("high", "thought_level"), "mode": pick("plan", "mode"), "model": pick("opus", "model")},
     MODERN, {}, ["session/set_config_option model=opus", "session/set_config_option mode=plan",
                  "session/set_config_option effort=high"], []),
    ("A2 legacy agent: set_mode and set_model", {"mode": pick("plan", "mode"), "model": pick("pro", "model")},
     LEGACY, {}, ["session/set_model model=pro", "session/set_mode mode=plan"], []),
    ("A2 a boolean", {"fast": pick(True)}, MODERN, {}, ["session/set_config_option fast=True"], []),
    ("A3 an option the agent no longer offers", {"verbose": pick(True), "mode": pick("plan", "mode")}, MODERN, {},
     ["session/set_config_option mode=plan"], [("verbose", Reason.OPTION_NOT_OFFERED)]),
    ("A3 a value the agent no longer offers", {"model": pick("haiku", "model")}, MODERN, {}, [],
     [("model", Reason.VALUE_NOT_OFFERED)]),
    ("A3 an option a model change took away",
     {"model": pick("opus", "model"), "fast": pick(True)}, MODERN, {"model": WITHOUT_FAST},
     ["session/set_config_option model=opus"], [("fast", Reason.OPTION_NOT_OFFERED)]),
    ("A4 the agent refuses a value", {"model": pick("opus", "model"), "mode": pick("plan", "mode")}, MODERN,
     {"model": "Invalid value for config option model: opus"},
     ["session/set_config_option model=opus", "session/set_config_option mode=plan"],
     [("model", Reason.AGENT_REFUSED)]),
    ("A5 accepted but not taken", {"effort": pick("high", "thought_level")}, MODERN,
     {"effort": {"configOptions": list(MODERN.config_options or ())}}, ["session/set_config_option effort=high"],
     [("effort", Reason.NOT_TAKEN)]),
    ("S4 on re-apply: a mode chosen on one shape, restored on another", {"mode": pick("auto", "mode")}, ODD, {},
     ["session/set_config_option permission_mode=auto"], []),
]


@pytest.mark.parametrize(("rule", "choices", "offer", "answers", "sent", "found"), REAPPLY_TABLE,
                         ids=[r[0] for r in REAPPLY_TABLE])
def test_reapply_table(rule: str, choices: dict[str, Choice], offer: ConfigOffer, answers: dict[str, Any],
                       sent: list[str], found: list[tuple[str, Reason]]) -> None:
    calls, findings = run(choices, offer, answers)
    assert calls == sent
    assert [(f.id, f.reason) for f in findings] == found
    for finding in findings:  # each says which option, and (where it can) what is offered instead
        assert f'"{finding.id}"' in finding.message or f"{finding.id} =" in finding.message
        assert finding.offered or finding.reason is not Reason.VALUE_NOT_OFFERED


def test_a_mode_set_either_way_is_seen_both_ways() -> None:
    by_option = MODERN.after(Call(Via.CONFIG_OPTION, "mode", "plan"), {})
    assert by_option.modes is not None and by_option.modes["currentModeId"] == "plan"
    by_update = MODERN.with_update({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})
    assert by_update.option("mode").current == "plan"  # type: ignore[union-attr]
    assert by_update.modes is not None and by_update.modes["currentModeId"] == "plan"
    legacy = LEGACY.after(Call(Via.MODEL, "model", "pro"), {})
    assert legacy.models is not None and legacy.models["currentModelId"] == "pro"


ADOPT_TABLE: list[tuple[str, dict[str, Choice], ConfigOffer, dict[str, Any], dict[str, Choice]]] = [
    ("O1 the agent leaves plan mode on its own", {"mode": pick("plan", "mode")},
     MODERN.with_value("mode", "plan"), {"sessionUpdate": "current_mode_update", "currentModeId": "default"},
     {"mode": pick("default", "mode", "agent")}),
    ("O1 an option nobody chose", {}, MODERN,
     {"sessionUpdate": "config_option_update", "configOptions": [select("effort", "high", ["low", "high"])]},
     {"effort": pick("high", None, "agent")}),
    ("O1 the choice made under another id moves", {"mode": pick("ask", "mode")}, ODD,
     {"sessionUpdate": "config_option_update", "configOptions": [select("permission_mode", "auto", ["ask", "auto"],
                                                                        "mode")]},
     {"mode": pick("auto", "mode", "agent")}),
    ("O1 an update that changes nothing", {"model": pick("opus", "model")}, MODERN,
     {"sessionUpdate": "config_option_update", "configOptions": list(MODERN.config_options or ())},
     {"model": pick("opus", "model")}),
    ("O1 a kind that is not about options", {}, MODERN, {"sessionUpdate": "agent_message_chunk"}, {}),
]


@pytest.mark.parametrize(("rule", "choices", "before", "update", "expected"), ADOPT_TABLE,
                         ids=[r[0] for r in ADOPT_TABLE])
def test_adopt_table(rule: str, choices: dict[str, Choice], before: ConfigOffer, update: dict[str, Any],
                     expected: dict[str, Choice]) -> None:
    assert adopt(choices, before, before.with_update(update)) == expected


def test_the_stored_form_round_trips_and_tolerates_junk() -> None:
    assert ConfigOffer.from_json(MODERN.to_json()).options() == MODERN.options()
    assert ConfigOffer.from_json("junk").empty and ConfigOffer.from_json({"configOptions": "junk"}).empty
    assert Choice.from_json(pick(True, None, "agent").to_json()) == pick(True, None, "agent")
    assert Choice.from_json({"value": 3}) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                max_size=5), max_leaves=30))
def test_any_answer_is_read_without_raising(answer: Any) -> None:
    """Whatever an agent answers, reading it never raises: malformed items are skipped, unknown fields kept."""
    offer = ConfigOffer.from_answer(answer if not isinstance(answer, dict) else {"configOptions": [answer], **answer})
    for option in offer.options():
        resolve(offer, option.id, "x")
    next_step({"model": pick("x", "model"), "fast": pick(True)}, offer)
