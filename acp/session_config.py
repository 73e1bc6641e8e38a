"""What an agent offers a session (config options, modes, legacy models) and how to bring the agent to the user's
choices, as pure functions: the offer read from the agent's own messages, a choice resolved against it, the calls
that re-apply the choices after a restore, and the agent's own changes taken as choices.

Rules of this file:
- No I/O. The inputs are the agent's messages (the answers of session/new, load, resume and set_config_option, and
  its updates), kept raw: an option's unknown fields and `_meta` travel untouched.
- One list of options whatever the agent's vintage: its `configOptions`, plus its `modes` and its legacy `models`
  (the pre-configOptions `SessionModelState`, still answered by adapters in the wild) as options of category
  `mode` / `model` where no config option already covers them (ACP: config options, where given, replace modes).
- It does not know how the calls are sent; `gateway.runtime.config` performs them.

Rows (tests/acp/test_session_config_rules.py holds them as tables, by these ids):
  Resolving a choice (a frontend's set, a start's config, a re-apply):
  S1  the id names a config option                             -> session/set_config_option (`type: boolean` for one)
  S2  the id names the modes (no config option covers them)     -> session/set_mode
  S3  the id names the legacy models (no option covers them)    -> session/set_model
  S4  no option has the id, the choice is of category mode or
      model and an option of that category is offered          -> that option, by S1-S3 (a choice outlives a change
                                                                   of shape: a config option today, modes tomorrow)
  N1  no option answers to the id                              -> refused: option_not_offered (naming those offered)
  N2  a select's value is not among its values                  -> refused: value_not_offered (naming the values)
  N3  a boolean for a select, a string for a boolean, or an option of a type this gateway cannot set
                                                               -> refused: wrong_type
  Re-applying the choices after a restore (`next_step`, one call at a time: a call may change what is offered):
  A1  the agent already reports the chosen value               -> nothing is sent
  A2  otherwise, the choice resolves                           -> its call; choices of category model first (a model
                                                                   changes which other values exist), then mode, then
                                                                   the rest in the order they were chosen
  A3  the choice does not resolve (N1-N3)                      -> a finding with that reason; the restore goes on
  A4  the agent answered the call with an error                 -> a finding: agent_refused, with its message
  A5  the call succeeded, yet the agent reports another value   -> a finding: not_taken
  Every choice is tried at most once per re-apply.
  The agent's own changes (`adopt`):
  O1  an update the agent sent on its own (not during the gateway's own call) changes an option's current value
                                                               -> that value becomes the choice, by the agent
  O2  what changes during the gateway's own call is its consequence, not a choice: not adopted
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

Value = str | bool


def shown(value: Any) -> str:
    """A value as people read it in a message: JSON (`true`, `"sonnet"`, `null`), never Python's `True`/`None`."""
    return json.dumps(value, ensure_ascii=False, default=str)


MODE, MODEL = "mode", "model"  # the categories ACP gives the mode and model selectors, and the ids of their stand-ins
SELECT, BOOLEAN = "select", "boolean"


class Via(StrEnum):
    """How a value reaches the agent."""

    CONFIG_OPTION = "session/set_config_option"
    MODE = "session/set_mode"  # ACP's `modes`
    MODEL = "session/set_model"  # the legacy `models`


class Reason(StrEnum):
    OPTION_NOT_OFFERED = "option_not_offered"
    VALUE_NOT_OFFERED = "value_not_offered"
    WRONG_TYPE = "wrong_type"
    AGENT_REFUSED = "agent_refused"
    NOT_TAKEN = "not_taken"


@dataclass(frozen=True)
class Option:
    """One selector, whatever its origin: `raw` is the ACP `SessionConfigOption` object (made up in that shape for
    modes and legacy models)."""

    id: str
    type: str
    category: str | None
    current: Value | None
    values: tuple[str, ...]  # a select's values, groups flattened
    via: Via
    raw: Mapping[str, Any]

    def takes(self, value: Value) -> bool:
        return (self.type == BOOLEAN and isinstance(value, bool)) or (self.type == SELECT and isinstance(value, str))


@dataclass(frozen=True)
class Call:
    """Set `option_id` to `value` by `via` (S1-S3)."""

    via: Via
    option_id: str
    value: Value
    boolean: bool = False
    rule: str = "S1"

    def params(self, session_id: str) -> dict[str, Any]:
        if self.via is Via.MODE:
            return {"sessionId": session_id, "modeId": self.value}
        if self.via is Via.MODEL:
            return {"sessionId": session_id, "modelId": self.value}
        params: dict[str, Any] = {"sessionId": session_id, "configId": self.option_id, "value": self.value}
        if self.boolean:
            params["type"] = BOOLEAN
        return params


@dataclass(frozen=True)
class Refused:
    """Why a choice cannot be set (N1-N3), and what is offered instead: option ids (N1) or values (N2)."""

    reason: Reason
    message: str
    offered: tuple[str, ...] = ()
    rule: str = "N1"


@dataclass(frozen=True)
class Choice:
    """What someone chose for an option: its value, the option's category when chosen (S4 follows it), and who."""

    value: Value
    category: str | None = None
    by: str = "user"  # user | agent | profile

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "category": self.category, "by": self.by}

    @classmethod
    def from_json(cls, data: Any) -> Choice | None:
        if not isinstance(data, dict) or not isinstance(data.get("value"), str | bool):
            return None
        category = data.get("category")
        return cls(data["value"], category if isinstance(category, str) else None, str(data.get("by") or "user"))


@dataclass(frozen=True)
class Finding:
    """A choice the agent was not brought to, and why (A3-A5)."""

    id: str
    value: Value
    reason: Reason
    message: str
    offered: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"kind": "option", "id": self.id, "value": self.value, "reason": self.reason.value,
                "message": self.message, "offered": list(self.offered)}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _select_values(options: Any) -> tuple[str, ...]:
    """A select's values: a flat list of options, or groups of them (the schema allows both)."""
    found: list[str] = []
    for item in options if isinstance(options, list) else ():
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("options"), list) and "group" in item:
            found.extend(v for o in item["options"] if isinstance(o, dict) and (v := _text(o.get("value"))))
        elif (value := _text(item.get("value"))) is not None:
            found.append(value)
    return tuple(found)


def _config_option(raw: Any) -> Option | None:
    if not isinstance(raw, dict) or _text(raw.get("id")) is None:
        return None
    kind = raw["type"] if isinstance(raw.get("type"), str) else SELECT
    current = raw.get("currentValue")
    category = raw.get("category")
    return Option(raw["id"], kind, category if isinstance(category, str) else None,
                  current if isinstance(current, str | bool) else None,
                  _select_values(raw.get("options")) if kind == SELECT else (), Via.CONFIG_OPTION, raw)


def _stand_in(option_id: str, name: str, via: Via, current: Any, entries: Any, key: str) -> Option:
    """Modes or legacy models as an ACP config option of their category (`_meta.acpGateway.via` says which)."""
    values = [{"value": e[key], "name": e.get("name") or e[key],
               **({"description": e["description"]} if _text(e.get("description")) else {})}
              for e in entries if isinstance(e, dict) and _text(e.get(key))] if isinstance(entries, list) else []
    now = current if isinstance(current, str) else None
    raw = {"id": option_id, "name": name, "category": option_id, "type": SELECT, "currentValue": now,
           "options": values, "_meta": {"acpGateway": {"via": via.value}}}
    return Option(option_id, SELECT, option_id, now, tuple(v["value"] for v in values), via, raw)


@dataclass(frozen=True)
class ConfigOffer:
    """What the agent last reported for a session, raw: `configOptions`, `modes`, legacy `models` (None: not given)."""

    config_options: tuple[dict[str, Any], ...] | None = None
    modes: dict[str, Any] | None = None
    models: dict[str, Any] | None = None
    _options: tuple[Option, ...] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_answer(cls, answer: Any, previous: ConfigOffer | None = None) -> ConfigOffer:
        """The offer in a session/new, load or resume answer (a field the answer leaves out keeps `previous`'s)."""
        base = previous or cls()
        if not isinstance(answer, dict):
            return base
        offer = base
        if isinstance(answer.get("configOptions"), list):
            offer = replace(offer, config_options=tuple(o for o in answer["configOptions"] if isinstance(o, dict)),
                            _options=None)
        if isinstance(answer.get("modes"), dict):
            offer = replace(offer, modes=dict(answer["modes"]), _options=None)
        if isinstance(answer.get("models"), dict):
            offer = replace(offer, models=dict(answer["models"]), _options=None)
        return offer

    @classmethod
    def from_json(cls, data: Any) -> ConfigOffer:
        """The stored form (`to_json`), tolerant of anything else (an older row, a hand-edited database)."""
        if not isinstance(data, dict):
            return cls()
        return cls.from_answer(data)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.config_options is not None:
            data["configOptions"] = list(self.config_options)
        if self.modes is not None:
            data["modes"] = self.modes
        if self.models is not None:
            data["models"] = self.models
        return data

    @property
    def empty(self) -> bool:
        return self.config_options is None and self.modes is None and self.models is None

    # -- the unified list ---------------------------------------------------------------------------------------
    def options(self) -> tuple[Option, ...]:
        if self._options is None:
            object.__setattr__(self, "_options", self._build())
        assert self._options is not None
        return self._options

    def _build(self) -> tuple[Option, ...]:
        options = [o for o in map(_config_option, self.config_options or ()) if o is not None]
        taken = {o.id for o in options}
        categories = {o.category for o in options}
        if self.modes is not None and MODE not in categories and MODE not in taken:
            options.append(_stand_in(MODE, "Mode", Via.MODE, self.modes.get("currentModeId"),
                                     self.modes.get("availableModes"), "id"))
        if self.models is not None and MODEL not in categories and MODEL not in taken:
            options.append(_stand_in(MODEL, "Model", Via.MODEL, self.models.get("currentModelId"),
                                     self.models.get("availableModels"), "modelId"))
        return tuple(options)

    def option(self, option_id: str) -> Option | None:
        return next((o for o in self.options() if o.id == option_id), None)

    def of_category(self, category: str) -> Option | None:
        return next((o for o in self.options() if o.category == category), None)

    def view(self) -> list[dict[str, Any]]:
        """The options as ACP `SessionConfigOption` objects (what a frontend renders)."""
        return [dict(o.raw) for o in self.options()]

    # -- changes --------------------------------------------------------------------------------------------------
    def with_update(self, update: Mapping[str, Any]) -> ConfigOffer:
        """The offer after one of the agent's `session/update`s (config_option_update, current_mode_update)."""
        kind = update.get("sessionUpdate")
        if kind == "config_option_update" and isinstance(update.get("configOptions"), list):
            return ConfigOffer.from_answer({"configOptions": update["configOptions"]}, self)
        if kind == "current_mode_update" and _text(update.get("currentModeId")):
            return self.with_value(MODE, update["currentModeId"], category=MODE)
        return self

    def with_value(self, option_id: str, value: Value, category: str | None = None) -> ConfigOffer:
        """The offer once the agent took `value` for an option (a set call it answered without the whole list). A
        mode or model is kept in step in both its forms (the config option of its category and `modes`/`models`), as
        agents that offer both keep them."""
        option = self.option(option_id)
        category = option.category if option is not None else category
        options = list(self.config_options) if self.config_options is not None else None
        for index, raw in enumerate(options or ()):
            if raw.get("id") == option_id or (category in (MODE, MODEL) and raw.get("category") == category):
                options[index] = {**raw, "currentValue": value}  # type: ignore[index]
        modes, models = self.modes, self.models
        if isinstance(value, str) and modes is not None and (category == MODE or option_id == MODE):
            modes = {**modes, "currentModeId": value}
        if isinstance(value, str) and models is not None and (category == MODEL or option_id == MODEL):
            models = {**models, "currentModelId": value}
        return ConfigOffer(tuple(options) if options is not None else None, modes, models)

    def after(self, call: Call, answer: Any) -> ConfigOffer:
        """The offer after a set call succeeded: the full list the agent answered (set_config_option), else the
        value it took."""
        if call.via is Via.CONFIG_OPTION and isinstance(answer, dict) and isinstance(answer.get("configOptions"), list):
            offer = ConfigOffer.from_answer({"configOptions": answer["configOptions"]}, self)
            option = offer.option(call.option_id)
            # The mode or model in its other form follows the config option the agent reports.
            if option is not None and option.category in (MODE, MODEL) and option.current is not None:
                return offer.with_value(call.option_id, option.current)
            return offer
        option = self.option(call.option_id)
        return self.with_value(call.option_id, call.value, option.category if option else None)


# -- resolving one choice ------------------------------------------------------------------------------------------
def resolve(offer: ConfigOffer, option_id: str, value: Value, category: str | None = None) -> Call | Refused:
    """S1-S4, N1-N3: the call that sets `option_id` to `value`, or why it cannot be set."""
    option, rule = offer.option(option_id), ""
    if option is None and category in (MODE, MODEL):
        option, rule = offer.of_category(category), "S4"
    if option is None:
        offered = tuple(o.id for o in offer.options())
        return Refused(Reason.OPTION_NOT_OFFERED, f"the agent offers no option {shown(option_id)}"
                       + (f"; it offers {', '.join(offered)}" if offered else "; it offers none"), offered, "N1")
    if option.type not in (SELECT, BOOLEAN):
        return Refused(Reason.WRONG_TYPE, f"option {shown(option.id)} is of type {shown(option.type)}, which this "
                       "gateway cannot set", (), "N3")
    if not option.takes(value):
        wanted = "true or false" if option.type == BOOLEAN else "one of its values (a string)"
        return Refused(Reason.WRONG_TYPE, f"option {shown(option.id)} is a {option.type}: give {wanted}, "
                       f"not {shown(value)}", option.values, "N3")
    if option.type == SELECT and value not in option.values:
        return Refused(Reason.VALUE_NOT_OFFERED, f"option {shown(option.id)} has no value {shown(value)}; its values: "
                       f"{', '.join(option.values) or '(none)'}", option.values, "N2")
    via_rule = {Via.CONFIG_OPTION: "S1", Via.MODE: "S2", Via.MODEL: "S3"}[option.via]
    return Call(option.via, option.id, value, option.type == BOOLEAN, rule or via_rule)


def mode_option(offer: ConfigOffer) -> Option | None:
    """The option that sets the session's mode: a config option of category mode, else the modes."""
    return offer.of_category(MODE)


# -- re-applying every choice -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReapplyAttempt:
    """One re-apply call made: for which choice, and the agent's error message if it refused."""

    choice_id: str
    call: Call
    error: str | None = None


@dataclass(frozen=True)
class Apply:
    """Send this call next (A2)."""

    choice_id: str
    call: Call


@dataclass(frozen=True)
class Done:
    findings: tuple[Finding, ...] = ()


def _order(choices: Mapping[str, Choice]) -> list[str]:
    """A2's order: model, then mode, then the rest as chosen."""
    rank = {MODEL: 0, MODE: 1}
    return sorted(choices, key=lambda cid: rank.get(choices[cid].category or cid, 2))


def next_step(choices: Mapping[str, Choice], offer: ConfigOffer,
              attempts: Sequence[ReapplyAttempt] = ()) -> Apply | Done:
    """The next call that brings the agent to the choices, or the findings once none is left (A1-A5)."""
    tried = {a.choice_id for a in attempts}
    for choice_id in _order(choices):
        if choice_id in tried:
            continue
        choice = choices[choice_id]
        target = resolve(offer, choice_id, choice.value, choice.category)
        if isinstance(target, Call):
            option = offer.option(target.option_id)
            if option is not None and option.current != choice.value:
                return Apply(choice_id, target)
    return Done(tuple(findings(choices, offer, attempts)))


def findings(choices: Mapping[str, Choice], offer: ConfigOffer,
             attempts: Sequence[ReapplyAttempt] = ()) -> Iterable[Finding]:
    """A3-A5 for each choice the agent does not report, given the final offer and the calls made."""
    errors = {a.choice_id: a.error for a in attempts}
    for choice_id in _order(choices):
        choice = choices[choice_id]
        target = resolve(offer, choice_id, choice.value, choice.category)
        if isinstance(target, Refused):
            yield Finding(choice_id, choice.value, target.reason, target.message, target.offered)
            continue
        option = offer.option(target.option_id)
        if option is not None and option.current == choice.value:
            continue
        if errors.get(choice_id) is not None:
            yield Finding(choice_id, choice.value, Reason.AGENT_REFUSED,
                          f"the agent refused {choice_id} = {shown(choice.value)}: {errors[choice_id]}")
        else:
            yield Finding(choice_id, choice.value, Reason.NOT_TAKEN,
                          f"the agent accepted {choice_id} = {shown(choice.value)} but reports "
                          f"{shown(option.current if option else None)}")


# -- the agent's own changes -----------------------------------------------------------------------------------------
def adopt(choices: Mapping[str, Choice], before: ConfigOffer, after: ConfigOffer) -> dict[str, Choice]:
    """O1: the choices once the agent changed options on its own (its update took `before` to `after`)."""
    adopted = dict(choices)
    previous = {o.id: o for o in before.options()}
    for option in after.options():
        old = previous.get(option.id)
        if old is None or option.current is None or old.current == option.current:
            continue
        adopted[_choice_key(choices, option)] = Choice(option.current, option.category, "agent")
    return adopted


def _choice_key(choices: Mapping[str, Choice], option: Option) -> str:
    """The choice an option's change replaces: the one under its id, else (S4) the mode or model chosen under
    another id, else a new one under its id."""
    if option.id in choices or option.category not in (MODE, MODEL):
        return option.id
    return next((cid for cid, c in choices.items() if c.category == option.category), option.id)
