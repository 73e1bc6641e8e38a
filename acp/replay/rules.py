"""Replay matching as pure functions: is a frame a client sent the one a recording expects, and under which rule.

Rules of this file:
- Everything that decides whether a live frame matches a recorded one lives here; the replay agent
  (`agent.py`) only reads, writes and waits.
- Each tolerance is a rule with an id, shared by this docstring, the code, docs/agent-authors.md and
  `tests/acp/replay/test_replay_rules.py`. Tolerant mode applies all of them; strict mode only those marked (strict),
  the differences no two runs can avoid.
- Matching binds names (session ids, paths) on first sight; a match returns the new bindings, a mismatch
  says where and why. Nothing is mutated.

Rules:
  RM1  (strict) request ids are the client's own: a recorded id stands for whatever id the client used.
  RM2  `_meta` is ignored, at any depth.
  RM3  (strict) paths: `<cwd>`, `<home>` (and `<tmp>`, `<install>`, `<repo>`) in a recording stand for a
      path; each binds to the live one the first time it is matched and must agree from then on (`<cwd>/src`
      matches `/elsewhere/src`, `<tmp>/acp-load-003` only a directory of that name). A `cwd` recorded as a
      plain path (a recording made without `--portable`) stands for the live one as a whole, the same way.
      The agent's frames are sent with the live paths put in.
  RM4  session ids are names: a recorded `sessionId` binds to the live one on first sight and stands for it
      from then on, both ways. An id the recording's agent handed out in some process (issued) matches an id
      the agent handed out in any of the recordings (a session it knows) — unless the replay plays an agent that
      lost its sessions (`forget`); an id the agent never handed out (a probe for an unknown session) matches
      any id it did not hand out.
  RM5  ISO-8601 timestamps match any timestamp.
  RM6  `initialize`'s `clientInfo` is ignored (the client's version changes between runs).
  RM7  client frames recorded back to back, with no agent frame between them, may arrive in any order.
  RM8  (strict) `[secret]` matches any value: a recording never holds one.
  RM9  a recorded client frame the client never sends is passed over, with what the agent sent in answer to
      it, when a later one matches (a recorder may probe more than a client asks).
  RM10 the client's answers to the agent's requests match by kind: what the user chose is the client's choice.
      Strict mode compares them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from ..mcp import SECRET

CWD = "<cwd>"
HOME = "<home>"
# What `acp-gateway record` writes host paths as: `--portable` (cwd, home) and the `--alias` names the corpus uses.
PLACEHOLDERS = (CWD, HOME, "<tmp>", "<install>", "<repo>")
_PLACEHOLDER_SPLIT = re.compile("(" + "|".join(re.escape(p) for p in PLACEHOLDERS) + ")")


class Rule(StrEnum):
    REQUEST_IDS = "RM1"
    META = "RM2"
    PATHS = "RM3"
    SESSION_IDS = "RM4"
    TIMESTAMPS = "RM5"
    CLIENT_INFO = "RM6"
    CONCURRENT_ORDER = "RM7"
    SECRETS = "RM8"
    SKIP = "RM9"
    ANSWERS_BY_KIND = "RM10"


ALL_RULES = frozenset(Rule)
STRICT_RULES = frozenset({Rule.REQUEST_IDS, Rule.PATHS, Rule.SECRETS})

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")


@dataclass(frozen=True)
class Bindings:
    """What the names of a recording stand for in this run."""

    sessions: Mapping[str, str] = field(default_factory=dict)  # recorded session id -> live
    paths: Mapping[str, str] = field(default_factory=dict)  # placeholder (or recorded cwd) -> live path
    issued: frozenset[str] = frozenset()  # session ids the recording's agent handed out, in any process
    handed_out: frozenset[str] = frozenset()  # live session ids this replay handed out
    forget: bool = False  # play an agent that lost every session it did not hand out in this process

    def live_session(self, recorded: str) -> str | None:
        return self.sessions.get(recorded)

    def bind_session(self, recorded: str, live: str) -> Bindings:
        return replace(self, sessions={**self.sessions, recorded: live})

    def hand_out(self, recorded: str, live: str) -> Bindings:
        return replace(self, sessions={**self.sessions, recorded: live}, handed_out=self.handed_out | {live})


@dataclass(frozen=True)
class Mismatch:
    """Why a frame does not match: where (a JSON path), what was expected and what came."""

    path: str
    expected: Any
    received: Any
    reason: str

    def describe(self) -> str:
        return f"{self.path or 'the frame'}: {self.reason}"


Matched = Bindings | Mismatch


def kind(msg: Mapping[str, Any]) -> str:
    if "method" in msg:
        return "request" if "id" in msg else "notification"
    return "response"


def match_frame(expected: Mapping[str, Any], received: Mapping[str, Any], bindings: Bindings,
                rules: frozenset[Rule] = ALL_RULES) -> Matched:
    """Whether a client frame matches the recorded one; the bindings it implies, or why not."""
    if kind(expected) != kind(received):
        return Mismatch("", kind(expected), kind(received), f"a {kind(received)} where the recording has a "
                                                            f"{kind(expected)}")
    if kind(received) == "response":  # the client's answer to one of the agent's requests
        if Rule.ANSWERS_BY_KIND in rules:
            return bindings
        if ("error" in expected) != ("error" in received):
            return Mismatch("", expected, received, "an error where the recording has a result, or the reverse")
        key = "error" if "error" in expected else "result"
        return _compare(expected.get(key), received.get(key), key, bindings, rules, "")
    if expected.get("method") != received.get("method"):
        return Mismatch("method", expected.get("method"), received.get("method"),
                        f"{received.get('method')} where the recording has {expected.get('method')}")
    return _compare(expected.get("params"), received.get("params"), "params", bindings, rules,
                    str(expected.get("method")))


def _compare(expected: Any, received: Any, path: str, b: Bindings, rules: frozenset[Rule], method: str,
             key: str = "") -> Matched:
    if isinstance(expected, str) and expected == SECRET and Rule.SECRETS in rules:
        return b
    if key == "sessionId" and isinstance(expected, str) and isinstance(received, str):
        return _session_id(expected, received, path, b, rules)
    if isinstance(expected, dict):
        if not isinstance(received, dict):
            return Mismatch(path, expected, received, "an object was expected")
        skip = set()
        if Rule.META in rules:
            skip.add("_meta")
        if Rule.CLIENT_INFO in rules and method == "initialize" and path == "params":
            skip.add("clientInfo")
        keys_e = set(expected) - skip
        keys_r = set(received) - skip
        if keys_e != keys_r:
            missing, extra = sorted(keys_e - keys_r), sorted(keys_r - keys_e)
            said = "; ".join(part for part in (missing and f"missing {', '.join(missing)}",
                                              extra and f"unexpected {', '.join(extra)}") if part)
            return Mismatch(path, expected, received, said)
        for k in sorted(keys_e):
            got = _compare(expected[k], received[k], f"{path}.{k}", b, rules, method, k)
            if isinstance(got, Mismatch):
                return got
            b = got
        return b
    if isinstance(expected, list):
        if not isinstance(received, list):
            return Mismatch(path, expected, received, "an array was expected")
        if len(expected) != len(received):
            return Mismatch(path, expected, received, f"{len(received)} items where the recording has "
                                                      f"{len(expected)}")
        for i, (e, r) in enumerate(zip(expected, received, strict=True)):
            got = _compare(e, r, f"{path}[{i}]", b, rules, method)
            if isinstance(got, Mismatch):
                return got
            b = got
        return b
    if isinstance(expected, str) and isinstance(received, str):
        if Rule.PATHS in rules and any(p in expected for p in PLACEHOLDERS):
            return _path(expected, received, path, b)
        if Rule.PATHS in rules and key == "cwd" and expected.startswith("/") and received.startswith("/"):
            return _literal_cwd(expected, received, path, b)
        if Rule.TIMESTAMPS in rules and _TIMESTAMP.match(expected) and _TIMESTAMP.match(received):
            return b
    if expected == received and type(expected) is type(received):
        return b
    return Mismatch(path, expected, received, f"{_short(received)} where the recording has {_short(expected)}")


def _session_id(recorded: str, live: str, path: str, b: Bindings, rules: frozenset[Rule]) -> Matched:
    if Rule.SESSION_IDS not in rules:
        if recorded == live:
            return b
        return Mismatch(path, recorded, live, f"session {live} where the recording has {recorded}")
    bound = b.live_session(recorded)
    if bound is not None:
        if bound == live:
            return b
        return Mismatch(path, recorded, live, f"session {live}, but the recording's {recorded} stands for {bound} "
                                              "in this run")
    if live in b.sessions.values():
        return Mismatch(path, recorded, live, f"session {live} stands for another of the recording's sessions")
    if recorded in b.issued:  # a session the agent knew when it was recorded
        if b.forget:
            return Mismatch(path, recorded, live, "this replay plays an agent that lost its sessions")
        if live == recorded or live in b.issued:  # one it knows, which may have come from another recording
            return b.bind_session(recorded, live)
        return Mismatch(path, recorded, live, f"session {live} is none the agent handed out; the recording has one "
                                              f"it knows ({recorded})")
    if live in b.issued and not b.forget:  # a probe matches only what the agent does not know
        return Mismatch(path, recorded, live, f"session {live} is one the agent knows; the recording probes an "
                                              "unknown one")
    return b.bind_session(recorded, live)


def _path(recorded: str, live: str, path: str, b: Bindings) -> Matched:
    pattern = ""
    order: list[str] = []
    for part in _PLACEHOLDER_SPLIT.split(recorded):
        if part in PLACEHOLDERS:
            if part in b.paths:
                pattern += re.escape(b.paths[part])
            elif part in order:
                pattern += f"(?P={part[1:-1]})"
            else:
                pattern += f"(?P<{part[1:-1]}>/.*?)"
                order.append(part)
        else:
            pattern += re.escape(part)
    found = re.fullmatch(pattern, live)
    if found is None:
        return Mismatch(path, recorded, live, f"{_short(live)} where the recording has {_short(recorded)}")
    if not order:
        return b
    return replace(b, paths={**b.paths, **{p: found.group(p[1:-1]) for p in order}})


def _literal_cwd(recorded: str, live: str, path: str, b: Bindings) -> Matched:
    """A session's `cwd` recorded as a plain path (a recording made without `--portable`) stands for the live one as
    a whole."""
    bound = b.paths.get(recorded)
    if bound is None:
        return replace(b, paths={**b.paths, recorded: live})
    if bound == live:
        return b
    return Mismatch(path, recorded, live, f"cwd {live}, but the recording's {recorded} stands for {bound} here")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def localize(value: Any, b: Bindings, key: str = "") -> Any:
    """A recorded agent frame as it is sent in this run: bound session ids and paths put in."""
    if isinstance(value, dict):
        return {k: localize(v, b, k) for k, v in value.items()}
    if isinstance(value, list):
        return [localize(v, b) for v in value]
    if isinstance(value, str):
        if key == "sessionId":
            return b.sessions.get(value, value)
        for recorded, live in sorted(b.paths.items(), key=lambda pair: -len(pair[0])):  # the longest path first
            if recorded in value:
                value = value.replace(recorded, live)
    return value


def hand_out_sessions(agent_frame: Mapping[str, Any], b: Bindings) -> Bindings:
    """The session ids a recorded agent answer hands out (a new or forked session's `sessionId`), bound to themselves
    unless already bound: the replay hands the recorded ids out as they were."""
    result = agent_frame.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        return b
    recorded = result["sessionId"]
    if recorded in b.sessions:
        return b
    return b.hand_out(recorded, recorded)


def issued_session_ids(agent_frames: list[Mapping[str, Any]]) -> frozenset[str]:
    """The session ids a recording's agent handed out: in answers carrying a `sessionId` and in `session/list`."""
    ids: set[str] = set()
    for frame in agent_frames:
        result = frame.get("result")
        if not isinstance(result, dict):
            continue
        if isinstance(result.get("sessionId"), str):
            ids.add(result["sessionId"])
        for listed in result.get("sessions") or []:
            if isinstance(listed, dict) and isinstance(listed.get("sessionId"), str):
                ids.add(listed["sessionId"])
    return frozenset(ids)
