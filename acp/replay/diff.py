"""What changed between two recordings of an agent, as pure functions: the facts a recording shows, and their diff.

`summarize` reads the facts an upgrade can change out of a recording (one or more scripts, by name): who the
agent says it is, what it advertises, what each request was answered (a result and its keys, or an error
code), which update kinds and client methods it uses, what a new session offers, and how long each answer
took, as a class. `diff` compares two summaries; `acp-gateway fixtures diff OLD NEW` prints the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .rules import kind
from .script import AGENT, CLIENT, Script

# Timing classes, not numbers: two runs of one agent differ by milliseconds, an upgrade that starts calling a
# model or the network moves an answer across a class.
TIMING_CLASSES = ((0.1, "instant"), (1.0, "fast"), (10.0, "slow"))


def timing_class(seconds: float) -> str:
    for limit, name in TIMING_CLASSES:
        if seconds < limit:
            return name
    return "very slow"


@dataclass
class Summary:
    agent: dict[str, Any] = field(default_factory=dict)  # agentInfo
    protocol_version: Any = None
    capabilities: dict[str, Any] = field(default_factory=dict)  # dotted path -> value (objects: "{}")
    auth_methods: list[str] = field(default_factory=list)
    answers: dict[str, str] = field(default_factory=dict)  # "script: method #n" -> "result {keys}" | "error CODE"
    timing: dict[str, str] = field(default_factory=dict)  # same keys -> timing class
    update_kinds: list[str] = field(default_factory=list)
    client_methods: list[str] = field(default_factory=list)  # what the agent asked of the client
    offers: dict[str, list[str]] = field(default_factory=dict)  # modes, models, configOptions of a new session


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    """Dotted paths to leaves. `_meta` is kept: an agent's extensions are capabilities too, and upgrades move them."""
    if isinstance(value, dict) and value:
        for k in sorted(value):
            _flatten(value[k], f"{prefix}.{k}" if prefix else k, out)
    elif isinstance(value, dict):
        out[prefix] = "{}"
    else:
        out[prefix] = value


def _answer(msg: Mapping[str, Any]) -> str:
    if "error" in msg and isinstance(msg["error"], dict):
        return f"error {msg['error'].get('code')}"
    result = msg.get("result")
    if isinstance(result, dict):
        keys = sorted(k for k in result if k != "_meta")
        return f"result {{{', '.join(keys)}}}" if keys else "result {}"
    return "result null" if result is None else f"result {type(result).__name__}"


def _offers(result: Mapping[str, Any], out: dict[str, list[str]]) -> None:
    modes = result.get("modes")
    if isinstance(modes, dict):
        out["modes"] = sorted(str(m.get("id")) for m in modes.get("availableModes") or [] if isinstance(m, dict))
    models = result.get("models")
    if isinstance(models, dict):
        out["models"] = sorted(str(m.get("modelId")) for m in models.get("availableModels") or []
                               if isinstance(m, dict))
    options = result.get("configOptions")
    if isinstance(options, list):
        out["configOptions"] = sorted(f"{o.get('id')} ({o.get('category') or o.get('type')})" for o in options
                                      if isinstance(o, dict))


def summarize(scripts: Sequence[Script]) -> Summary:
    summary = Summary()
    updates: set[str] = set()
    client_methods: set[str] = set()
    for script in scripts:
        pending: dict[Any, tuple[str, float]] = {}  # request id -> (key, sent at)
        seen: dict[str, int] = {}
        for entry in script.entries:
            msg = entry.msg
            if entry.direction == CLIENT and kind(msg) == "request":
                method = str(msg.get("method"))
                seen[method] = seen.get(method, 0) + 1
                pending[msg.get("id")] = (f"{script.name}: {method} #{seen[method]}", entry.ts)
            elif entry.direction == AGENT and kind(msg) == "response" and msg.get("id") in pending:
                key, sent = pending.pop(msg.get("id"))
                summary.answers[key] = _answer(msg)
                summary.timing[key] = timing_class(max(0.0, entry.ts - sent))
                result = msg.get("result")
                if not isinstance(result, dict):
                    continue
                if key.split(": ", 1)[1].startswith("initialize ") and not summary.capabilities:
                    summary.agent = {k: v for k, v in (result.get("agentInfo") or {}).items() if k != "_meta"}
                    summary.protocol_version = result.get("protocolVersion")
                    _flatten(result.get("agentCapabilities") or {}, "", summary.capabilities)
                    summary.auth_methods = sorted(str(m.get("id")) for m in result.get("authMethods") or []
                                                  if isinstance(m, dict))
                if key.split(": ", 1)[1].startswith("session/new ") and not summary.offers:
                    _offers(result, summary.offers)
            elif entry.direction == AGENT and kind(msg) == "notification" and msg.get("method") == "session/update":
                update = (msg.get("params") or {}).get("update") or {}
                if isinstance(update, dict) and update.get("sessionUpdate"):
                    updates.add(str(update["sessionUpdate"]))
            elif entry.direction == AGENT and kind(msg) == "request":
                client_methods.add(str(msg.get("method")))
    summary.update_kinds = sorted(updates)
    summary.client_methods = sorted(client_methods)
    return summary


@dataclass(frozen=True)
class Change:
    area: str  # agent | capability | auth | answer | timing | update_kind | client_method | offer
    subject: str
    old: Any
    new: Any

    def words(self) -> str:
        if self.old is None:
            return f"{self.area} {self.subject}: new ({_shown(self.new)})"
        if self.new is None:
            return f"{self.area} {self.subject}: gone (was {_shown(self.old)})"
        return f"{self.area} {self.subject}: {_shown(self.old)} -> {_shown(self.new)}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)


def _mapping_changes(area: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    return [Change(area, key, old.get(key), new.get(key)) for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)]


def _set_changes(area: str, old: Sequence[str], new: Sequence[str]) -> list[Change]:
    return ([Change(area, item, None, "used") for item in sorted(set(new) - set(old))]
            + [Change(area, item, "used", None) for item in sorted(set(old) - set(new))])


def diff(old: Summary, new: Summary) -> list[Change]:
    """Every fact that differs, grouped by area, in a stable order."""
    changes: list[Change] = []
    for key in ("name", "version"):
        if old.agent.get(key) != new.agent.get(key):
            changes.append(Change("agent", key, old.agent.get(key), new.agent.get(key)))
    if old.protocol_version != new.protocol_version:
        changes.append(Change("agent", "protocolVersion", old.protocol_version, new.protocol_version))
    changes += _mapping_changes("capability", old.capabilities, new.capabilities)
    if old.auth_methods != new.auth_methods:
        changes.append(Change("auth", "methods", old.auth_methods, new.auth_methods))
    changes += _mapping_changes("answer", old.answers, new.answers)
    common = set(old.timing) & set(new.timing)
    changes += [Change("timing", k, old.timing[k], new.timing[k]) for k in sorted(common)
                if old.timing[k] != new.timing[k]]
    changes += _set_changes("update_kind", old.update_kinds, new.update_kinds)
    changes += _set_changes("client_method", old.client_methods, new.client_methods)
    changes += _mapping_changes("offer", old.offers, new.offers)
    return changes


def report(changes: Sequence[Change], old_name: str, new_name: str) -> str:
    if not changes:
        return f"{old_name} and {new_name}: no change in what the recordings show"
    lines = [f"{old_name} -> {new_name}: {len(changes)} change{'s' if len(changes) != 1 else ''}"]
    lines += [f"  {c.words()}" for c in changes]
    return "\n".join(lines)


def as_json(changes: Sequence[Change]) -> list[dict[str, Any]]:
    return [asdict(c) for c in changes]
