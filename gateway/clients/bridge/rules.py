"""What `acp-gateway connect` does with each message, decided without I/O: the editor's on stdin, the gateway's on
`/acp`, and what a lost connection and a new one call for.

The bridge is an ACP agent to the editor and an ACP client of the gateway's `/acp`; it passes every message both ways
and keeps only what it needs to come back after the gateway went away (a restart, a `kill -9`, the network):

  BR-1  an editor request goes on under an id of the bridge's own (ids of a new connection never meet an old one's);
        a `session/prompt` gets a key (`_meta.acpGateway.promptId`) so that asking it again cannot run it twice
  BR-2  the gateway's answer goes back under the editor's id; what it opened (session/new, load, resume) or closed
        (session/close) is noted, with the journal cursor the answer gives
  BR-3  a `session/update` passes; its `_meta.acpGateway.eventId` moves the session's cursor on
  BR-4  a gateway request (a permission, a question) goes to the editor under an id of the bridge's; the editor's
        answer goes back to the connection that asked, and to no other (a late answer to a lost one is dropped)
  BR-5  `$/cancel_request` is passed under the other side's id for that request
  BR-6  connection lost: the editor is told the gateway's open requests are withdrawn (`$/cancel_request`); its own
        requests wait; what it sends meanwhile waits
  BR-7  a new connection: `initialize` again (the editor's own words), then `session/resume` of every open session
        from its cursor (the updates missed come first), then the waiting requests again — a prompt as a retry
        under its key, answered by the turn it started — and what the editor sent meanwhile
  BR-8  a resumed session's replay of the editor's own prompt (its turn began before the cursor moved past it) is not
        echoed back, as the gateway never echoes a client's own prompt
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import orjson

META_KEY = "acpGateway"
INITIALIZE = "initialize"
OPENS = frozenset({"session/new", "session/load", "session/resume"})


class Phase(Enum):
    LINKING = "linking"  # no connection, or one being set up again (BR-7): editor messages wait
    LIVE = "live"


@dataclass
class OpenSession:
    cwd: str
    cursor: int | None = None  # the editor has every update of the session up to this journal id
    echo: list[Any] = field(default_factory=list)  # BR-8: prompt blocks whose replayed echo is not passed on


@dataclass
class Asked:
    """An editor request the gateway has not answered."""

    editor_id: int | str
    method: str
    params: Any


@dataclass(frozen=True)
class Internal:
    """A request of the bridge's own on a new connection (BR-7): its method, and the session a resume is for."""

    method: str
    session_id: str | None = None


@dataclass
class Bridge:
    agent: str | None = None  # --agent: the profile a session/new runs, unless the editor names one
    session: str | None = None  # --session: the gateway session (id or name) a session/new opens instead
    phase: Phase = Phase.LINKING
    generation: int = 0
    initialize: Any = None  # the editor's initialize params, once the gateway answered them
    sessions: dict[str, OpenSession] = field(default_factory=dict)
    asked: dict[int, Asked] = field(default_factory=dict)  # our upstream id -> the editor's request
    internal: dict[int, Internal] = field(default_factory=dict)  # our upstream id -> our own request (BR-7)
    offered: dict[int, tuple[int, int | str]] = field(default_factory=dict)  # editor-facing id -> (generation, theirs)
    waiting: list[dict[str, Any]] = field(default_factory=list)  # editor notifications and answers while linking
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- from the editor ---------------------------------------------------------------------------------------
    def from_editor(self, message: dict[str, Any]) -> tuple[list[bytes], list[bytes]]:
        """(to the gateway, to the editor)."""
        if "method" in message and "id" in message:
            return self._editor_request(message), []
        if self.phase is Phase.LINKING:
            self.waiting.append(message)  # BR-6
            return [], []
        return self._editor_other(message), []

    def _editor_request(self, message: dict[str, Any]) -> list[bytes]:
        method, params = message["method"], message.get("params")
        if method == "session/prompt" and isinstance(params, dict):  # BR-1
            params = _with_gateway_meta(params, promptId=uuid.uuid4().hex)
        elif method == "session/new" and isinstance(params, dict):
            chosen = ((params.get("_meta") or {}).get(META_KEY) or {}) if isinstance(params.get("_meta"), dict) else {}
            if isinstance(chosen, dict) and self.agent is not None and "agent" not in chosen:
                params = _with_gateway_meta(params, agent=self.agent)
            if isinstance(chosen, dict) and self.session is not None and "session" not in chosen:
                params = _with_gateway_meta(params, session=self.session)
        upstream = next(self._ids)
        self.asked[upstream] = Asked(message["id"], method, params)
        if method == "session/prompt" and isinstance(params, dict):
            session = self.sessions.get(str(params.get("sessionId")))
            if session is not None:
                session.echo = []  # a new prompt of its own: an earlier one's replay is over
        if self.phase is Phase.LINKING:
            return []
        return [_request(upstream, method, params)]

    def _editor_other(self, message: dict[str, Any]) -> list[bytes]:
        if message.get("method") == "$/cancel_request":  # BR-5: the editor withdraws one of its requests
            theirs = (message.get("params") or {}).get("requestId")
            ours = next((up for up, a in self.asked.items() if a.editor_id == theirs), None)
            if ours is None:
                return []
            return [_notification("$/cancel_request", {"requestId": ours})]
        if "method" in message:  # session/cancel, and whatever else the editor notifies
            return [orjson.dumps(message)]
        entry = self.offered.pop(message["id"], None) if isinstance(message.get("id"), int) else None
        if entry is None or entry[0] != self.generation:
            return []  # BR-4: withdrawn, or asked on a connection that is gone (the new one asks again)
        return [orjson.dumps({**message, "id": entry[1]})]

    # -- from the gateway ----------------------------------------------------------------------------------------
    def from_gateway(self, message: dict[str, Any]) -> tuple[list[bytes], list[bytes]]:
        """(to the gateway, to the editor)."""
        if "method" not in message:
            return self._answer(message)
        method, params = message["method"], message.get("params") or {}
        if "id" in message:  # BR-4
            editor_id = next(self._ids)
            self.offered[editor_id] = (self.generation, message["id"])
            return [], [orjson.dumps({**message, "id": editor_id})]
        if method == "session/update":
            return [], self._update(message, params)
        if method == "$/cancel_request":  # BR-5: the gateway withdraws one of its requests
            theirs = params.get("requestId")
            withdrawn = next((o for o, (g, t) in self.offered.items() if g == self.generation and t == theirs), None)
            if withdrawn is None:
                return [], []
            del self.offered[withdrawn]
            return [], [_notification("$/cancel_request", {"requestId": withdrawn})]
        return [], [orjson.dumps(message)]

    def _update(self, message: dict[str, Any], params: dict[str, Any]) -> list[bytes]:
        session = self.sessions.get(str(params.get("sessionId")))
        if session is None:
            return [orjson.dumps(message)]
        meta = params.get("_meta")
        said = meta.get(META_KEY) if isinstance(meta, dict) else None
        event_id = said.get("eventId") if isinstance(said, dict) else None
        if isinstance(event_id, int) and not isinstance(event_id, bool):  # BR-3
            session.cursor = max(session.cursor or 0, event_id)
        update = params.get("update")
        if session.echo and isinstance(update, dict):  # BR-8
            if update.get("sessionUpdate") == "user_message_chunk" and update.get("content") in session.echo:
                session.echo.remove(update.get("content"))
                return []
            session.echo = []
        return [orjson.dumps(message)]

    def _answer(self, message: dict[str, Any]) -> tuple[list[bytes], list[bytes]]:
        upstream = message.get("id")
        if not isinstance(upstream, int):
            return [], []
        internal = self.internal.pop(upstream, None)
        if internal is not None:
            return self._internal_answer(internal, message), []
        asked = self.asked.pop(upstream, None)
        if asked is None:
            return [], []
        result = message.get("result")
        if isinstance(result, dict):  # BR-2
            self._opened(asked, result)
        return [], [orjson.dumps({**message, "id": asked.editor_id})]

    def _opened(self, asked: Asked, result: dict[str, Any]) -> None:
        params = asked.params if isinstance(asked.params, dict) else {}
        if asked.method == INITIALIZE:
            self.initialize = params
        elif asked.method in OPENS:
            session_id = str(result.get("sessionId") or params.get("sessionId"))
            self.sessions[session_id] = OpenSession(str(params.get("cwd")), _cursor(result))
        elif asked.method == "session/close":
            self.sessions.pop(str(params.get("sessionId")), None)

    # -- the connection ------------------------------------------------------------------------------------------
    def lost(self) -> list[bytes]:
        """BR-6: to the editor. The requests the gateway had put to it are withdrawn; the next connection asks again
        those still open."""
        withdrawn = [_notification("$/cancel_request", {"requestId": ours})
                     for ours, (generation, _) in self.offered.items() if generation == self.generation]
        for asked in self.asked.values():  # BR-8: the resume's replay may hold its echo (it comes before the answer)
            params = asked.params if isinstance(asked.params, dict) else {}
            session = self.sessions.get(str(params.get("sessionId")))
            if asked.method == "session/prompt" and session is not None:
                session.echo = [b for b in params.get("prompt") or [] if isinstance(b, dict)]
        self.offered = {}
        self.internal = {}
        self.generation += 1
        self.phase = Phase.LINKING
        return withdrawn

    def linked(self) -> list[bytes]:
        """BR-7, on a new connection: to the gateway. `initialize` again when the editor's was answered (else its
        own, waiting, goes); the rest follows its answer (`from_gateway`)."""
        if self.initialize is None:
            return self._go_live()
        upstream = next(self._ids)
        self.internal[upstream] = Internal(INITIALIZE)
        return [_request(upstream, INITIALIZE, self.initialize)]

    def _internal_answer(self, internal: Internal, message: dict[str, Any]) -> list[bytes]:
        if internal.method == INITIALIZE:
            if "error" in message:  # the gateway no longer takes the editor's initialize: its sessions are gone too
                self.sessions = {}
                return self._go_live()
            resumes = []
            for session_id, session in self.sessions.items():
                upstream = next(self._ids)
                self.internal[upstream] = Internal("session/resume", session_id)
                params: dict[str, Any] = {"sessionId": session_id, "cwd": session.cwd, "mcpServers": []}
                if session.cursor is not None:
                    params["_meta"] = {META_KEY: {"since": session.cursor}}
                resumes.append(_request(upstream, "session/resume", params))
            return resumes or self._go_live()
        resumed = self.sessions.get(internal.session_id or "")
        if resumed is not None:
            if "error" in message:  # deleted meanwhile (or out of reach): it is no longer open
                del self.sessions[internal.session_id or ""]
            else:
                resumed.cursor = _cursor(message.get("result")) or resumed.cursor
        if any(i.method == "session/resume" for i in self.internal.values()):
            return []
        return self._go_live()

    def _go_live(self) -> list[bytes]:
        """The editor's requests still unanswered go again (a prompt as a retry of the same key), then what waited."""
        self.phase = Phase.LIVE
        out: list[bytes] = []
        for upstream in sorted(self.asked):
            asked = self.asked[upstream]
            params = asked.params
            if asked.method == "session/prompt" and isinstance(params, dict):
                params = _with_gateway_meta(params, retry=True)
            out.append(_request(upstream, asked.method, params))
        waiting, self.waiting = self.waiting, []
        for message in waiting:
            out += self._editor_other(message)
        return out

    def unanswered(self) -> list[tuple[int | str, str]]:
        """The editor's requests the gateway has not answered: (its id, the method)."""
        return [(a.editor_id, a.method) for a in self.asked.values()]


def _cursor(result: Any) -> int | None:
    meta = result.get("_meta") if isinstance(result, dict) else None
    said = meta.get(META_KEY) if isinstance(meta, dict) else None
    cursor = said.get("eventCursor") if isinstance(said, dict) else None
    return cursor if isinstance(cursor, int) and not isinstance(cursor, bool) else None


def _with_gateway_meta(params: dict[str, Any], **fields: Any) -> dict[str, Any]:
    given = params.get("_meta")
    meta: dict[str, Any] = given if isinstance(given, dict) else {}
    mine = meta.get(META_KEY)
    ours: dict[str, Any] = mine if isinstance(mine, dict) else {}
    return {**params, "_meta": {**meta, META_KEY: {**ours, **fields}}}


def _request(request_id: int, method: str, params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def _notification(method: str, params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params})
