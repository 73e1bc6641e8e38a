"""The reference agent: a real ACP v1 agent (stdio, NDJSON) with persistent sessions and fault flags.

It is the default agent of the gateway, the peer of most tests, and a worked example for agent
authors. Sessions are stored one JSON file each under `--state-dir`, so `session/load` (which
replays the history before answering) and `session/resume` (no replay) work across restarts.

Faults are chosen per method with `--fault METHOD=KIND` (see FAULTS), and per prompt with commands
at the start of the prompt text (see `_run_command`): `/read`, `/write`, `/call`, `/permission`, `/permissions N`,
`/tool`, `/sh CMD` (its own shell), `/fill BYTES`, `/plan A; B`, `/stream N`, `/huge N`, `/crash`, `/hang`, `/fail`,
`/unknown-update`, `/sleep S`, `/mode M` (the agent changes its own mode), `/config`, `/mcp`, `/dirs`,
`/term [--limit N] [--cwd DIR] [--keep] [--kill] CMD` (CMD in a terminal of the client's, embedded in a tool
call: a flooding `yes`, a `sleep` that never ends, a command that ignores SIGTERM are the faults to try),
`/termout ID` (asks for the output of a terminal by id, known or not), `/meta` (says the prompt's `_meta`; sends an
update with a `_meta` of its own), `/withdraw` (a permission request withdrawn with `$/cancel_request`) and
`/elicit form|url|bad` (a question for the person at the client: a form, a link to open — then
`elicitation/complete` —, or a form whose schema no client can take).

Sessions offer modes, models and config options (`agents.reference.options`; `--config-style` chooses the
shapes), slash commands (`available_commands_update` after every session set-up) and usage (`usage_update`
after every turn); with faults for the gateway's restore of choices: `--forget-config` (load and resume bring
back the defaults), `--refuse-value ID=VALUE`, `--drop-option-after-restart ID`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import orjson

from acp.errors import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
    RpcError,
)
from acp.jsonrpc import Connection

from .options import STYLES, Catalogue, SessionOptions, commands, described

# KIND -> (code, message template). `{id}` is the sessionId of the request.
ERROR_FAULTS: dict[str, tuple[int, str]] = {
    "unsupported": (METHOD_NOT_FOUND, "Method not found"),
    "unknown_session": (RESOURCE_NOT_FOUND, "Resource not found: session {id}"),
    "named_not_found": (INTERNAL_ERROR, "no rollout found for session {id}"),
    "invalid_params_not_found": (INVALID_PARAMS, "Invalid params: session {id} not found"),
    "other_not_found": (INTERNAL_ERROR, "session other-session-0000 not found"),
    "config_not_found": (RESOURCE_NOT_FOUND, "config file /etc/reference-agent/config.toml not found"),
    "auth": (AUTH_REQUIRED, "Authentication required"),
    "internal": (INTERNAL_ERROR, "Internal error"),
    "cancelled": (REQUEST_CANCELLED, "Request cancelled"),
}
BEHAVIOUR_FAULTS = {"crash", "hang", "exit_mid_replay", "ignore"}
FAULTS = sorted([*ERROR_FAULTS, *BEHAVIOUR_FAULTS])
# Protocol quirks seen in real agents (or plausible ones), one per check of `acp-gateway check` that should catch it.
QUIRKS = {
    "string-id-null": "answer a request whose id is a string with id null",
    "answer-notifications": "answer an unknown notification with an error (id null)",
    "silent-unknown": "never answer an unknown method whose name starts with '_'",
    "result-and-error": "error responses carry a result too",
    "multiline-errors": "error messages run over several lines",
    "bad-utf8": "every turn writes a line that is not UTF-8",
    "bad-current-value": "a config option's currentValue is not among its options",
    "booleans-always": "offer a boolean config option to clients that did not opt in",
    "partial-config-answer": "session/set_config_option answers only the option that changed",
    "accept-any-value": "session/set_config_option takes any value, offered or not",
    "close-keeps-turn": "session/close leaves a running turn running",
    "authenticate-no-effect": "authenticate says yes and signs nothing in",
    "silent-mode-change": "/mode changes the mode without telling the client",
    "refuse-meta": "a prompt carrying _meta is refused",
    "refuse-resource-link": "a prompt with a resource_link block is refused",
    "refuse-embedded": "advertise embeddedContext, then refuse resource blocks",
    "refuse-media": "with --media, advertise image and audio, then refuse them",
    "list-ignores-cwd": "session/list ignores its cwd filter",
    "null-load-result": "session/load answers null instead of {}",
    "refuse-additional-directories": "advertise additionalDirectories, then refuse them",
    "delete-unknown-errors": "session/delete of an unknown session answers -32002 (instead of succeeding)",
}


@dataclass
class Config:
    state_dir: Path
    advertise_load: bool = True
    advertise_resume: bool = True
    advertise_list: bool = True
    advertise_close: bool = True
    advertise_delete: bool = True
    advertise_fork: bool = True
    protocol_version: int = 1
    faults: dict[str, str] = field(default_factory=dict)
    noise: int = 0
    huge_line: int = 0
    stderr_flood: int = 0
    fault_reason: str | None = None  # said on stderr before an error fault's answer, as real agents say why
    replay_delay: float = 0.0
    late_replay: bool = False
    permission: bool = False
    tool_calls: bool = False
    stream: int = 0
    require_auth: bool = False
    auth_env: str | None = None
    auth_terminal: bool = False
    auth_terminal_env: dict[str, str] = field(default_factory=lambda: {"REF_LOGIN": "1"})  # the terminal method's env
    login: bool = False
    auth_fails: bool = False
    ignore_cancel: bool = False
    slow_init: float = 0.0  # seconds before initialize is answered
    brief_turns: bool = False  # every turn is one update and its answer, whatever the prompt asks
    grandchild_pidfile: str | None = None
    faults_once: dict[str, str] = field(default_factory=dict)
    replay_on_resume: bool = False
    bad_stop_reason: bool = False
    bad_update: bool = False
    linger: bool = False
    log: str | None = None
    config_style: str = "both"
    forget_config: bool = False
    refuse_values: frozenset[tuple[str, str]] = frozenset()
    drop_after_restart: frozenset[str] = frozenset()
    mcp_http: bool = True
    mcp_sse: bool = True
    additional_directories: bool = True
    leaky_mcp: bool = False
    ignore_client_capabilities: bool = False  # fault: call fs, terminal and elicitation methods though not offered
    keep_terminals: bool = False  # fault: never release a terminal
    auth_terminal_always: bool = False  # fault: advertise the terminal sign-in to a client that does not run them
    quirks: frozenset[str] = frozenset()  # of QUIRKS
    media: bool = False  # advertise image and audio prompts (and take them)


@dataclass
class Session:
    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    turn_running: bool = False
    options: SessionOptions = field(default_factory=SessionOptions)
    mcp: list[dict[str, Any]] = field(default_factory=list)  # names, types, env and header names: never values
    directories: list[str] = field(default_factory=list)
    prompt_meta: Any = None  # the `_meta` of the turn's `session/prompt` (`/meta` says it)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ReferenceAgent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.sessions: dict[str, Session] = {}
        # A terminal login (`--login`, run by the client) leaves a mark in the state directory: signed in from then on.
        self.authenticated = not config.require_auth or (config.state_dir / LOGGED_IN).exists()
        self.exit_mid_replay = False
        self.conn: Connection | None = None
        self.stdout: Any = None
        self.catalogue = Catalogue(config.config_style, False, config.refuse_values)
        self.client_caps: dict[str, Any] = {}  # what the client offered in initialize
        self._tasks: set[asyncio.Task[Any]] = set()
        config.state_dir.mkdir(parents=True, exist_ok=True)

    # -- storage ---------------------------------------------------------------------
    def _path(self, session_id: str) -> Path:
        safe = "".join(c for c in session_id if c.isalnum() or c in "-_")
        return self.config.state_dir / f"{safe}.json"

    def _save(self, session: Session) -> None:
        session.updated_at = _now()
        data = {
            "sessionId": session.session_id,
            "cwd": session.cwd,
            "title": session.title,
            "updatedAt": session.updated_at,
            "history": session.history,
            "config": session.options.values,
            "mcpServers": session.mcp,
            "additionalDirectories": session.directories,
        }
        path = self._path(session.session_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(data))
        os.replace(tmp, path)

    def _read(self, session_id: str) -> Session | None:
        if not isinstance(session_id, str) or not session_id:
            return None
        path = self._path(session_id)
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        session = Session(
            session_id=data["sessionId"],
            cwd=data["cwd"],
            title=data.get("title"),
            updated_at=data.get("updatedAt", ""),
            history=data.get("history", []),
            mcp=data.get("mcpServers", []),
            directories=data.get("additionalDirectories", []),
        )
        if not self.config.forget_config and isinstance(data.get("config"), dict):
            session.options.values.update(data["config"])
        session.options.dropped = self.config.drop_after_restart  # restored by a process that did not create it
        return session

    # -- wire helpers ----------------------------------------------------------------
    def _raw(self, data: bytes) -> None:
        self.stdout.write(data)

    async def _update(self, session: Session, update: dict[str, Any], record: bool = True) -> None:
        assert self.conn is not None
        if record:
            session.history.append(update)
        await self.conn.notify("session/update", {"sessionId": session.session_id, "update": update})

    async def _message(self, session: Session, text: str) -> None:
        await self._update(
            session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        )

    # -- dispatch --------------------------------------------------------------------
    def _log(self, method: str, params: Any) -> None:
        if self.config.log:
            with open(self.config.log, "ab") as fh:
                fh.write(orjson.dumps({"pid": os.getpid(), "method": method, "params": params}) + b"\n")

    def _fault_for(self, method: str) -> str | None:
        once = self.config.faults_once.get(method)
        if once is not None:
            marker = self.config.state_dir / f"fault-once-{method.replace('/', '_')}"
            if not marker.exists():
                marker.write_text(once)
                return once
        return self.config.faults.get(method)

    async def handle(self, method: str, params: Any) -> Any:
        self._log(method, params)
        fault = self._fault_for(method)
        if method == "session/load":
            self.exit_mid_replay = fault == "exit_mid_replay"
        if fault is not None:
            await self._apply_fault(fault, params)
        if not isinstance(params, dict):
            params = {}
        if method == "initialize":
            if self.config.slow_init:  # an adapter that probes for its CLI before it answers
                await asyncio.sleep(self.config.slow_init)
            return self._initialize(params)
        if method == "authenticate":
            return self._authenticate(params)
        if method == "logout":  # signed out: the terminal login's mark goes, and session methods need a sign-in again
            (self.config.state_dir / LOGGED_IN).unlink(missing_ok=True)
            self.authenticated = not self.config.require_auth
            return {}
        if method.startswith("session/") and method not in ("session/cancel",) and not self.authenticated:
            raise RpcError(AUTH_REQUIRED, "Authentication required: call authenticate first")
        handlers = {
            "session/new": self._new,
            "session/load": self._load if self.config.advertise_load else None,
            "session/resume": self._resume if self.config.advertise_resume else None,
            "session/list": self._list if self.config.advertise_list else None,
            "session/close": self._close if self.config.advertise_close else None,
            "session/delete": self._delete if self.config.advertise_delete else None,
            "session/fork": self._fork if self.config.advertise_fork else None,
            "session/prompt": self._prompt,
            "session/set_config_option": self._set_config_option,
            "session/set_mode": self._set_mode,
            "session/set_model": self._set_model,
        }
        handler = handlers.get(method)
        if handler is None:
            if method.startswith("_") and "silent-unknown" in self.config.quirks:
                await asyncio.Event().wait()
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        return await handler(params)

    def on_notification(self, method: str, params: Any) -> None:
        self._log(method, params)
        if "answer-notifications" in self.config.quirks and method not in ("session/cancel", "$/cancel_request"):
            self._raw(orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": METHOD_NOT_FOUND, "message": f"Method not found: {method}"}}) + b"\n")
        if method == "session/cancel" and isinstance(params, dict):
            if self.config.ignore_cancel or self.config.faults.get("session/cancel") == "ignore":
                return
            session = self.sessions.get(str(params.get("sessionId")))
            if session is not None:
                # After the tasks already scheduled: a prompt read just before this cancel has a task that has
                # not started yet, and its start clears the flag — the cancel must land after that, not be lost.
                asyncio.get_running_loop().call_soon(session.cancel.set)

    async def _apply_fault(self, fault: str, params: Any) -> None:
        if fault == "crash":
            sys.stderr.write("reference agent: crashing as asked\n")
            sys.stderr.flush()
            os._exit(3)
        if fault == "hang":
            await asyncio.Event().wait()
        if fault in ERROR_FAULTS:
            if self.config.fault_reason:
                sys.stderr.write(f"{self.config.fault_reason}\n")
                sys.stderr.flush()
            code, template = ERROR_FAULTS[fault]
            sid = params.get("sessionId", "") if isinstance(params, dict) else ""
            raise RpcError(code, template.format(id=sid))

    # -- methods ---------------------------------------------------------------------
    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        self.client_caps = params.get("clientCapabilities") or {} if isinstance(params, dict) else {}
        client_session = (params.get("clientCapabilities") or {}).get("session") or {}
        booleans = (isinstance((client_session.get("configOptions") or {}).get("boolean"), dict)
                    or "booleans-always" in self.config.quirks)
        self.catalogue = Catalogue(self.config.config_style, booleans, self.config.refuse_values)
        session_caps: dict[str, Any] = {}
        if self.config.additional_directories:
            session_caps["additionalDirectories"] = {}
        if self.config.advertise_resume:
            session_caps["resume"] = {}
        if self.config.advertise_list:
            session_caps["list"] = {}
        if self.config.advertise_close:
            session_caps["close"] = {}
        if self.config.advertise_delete:
            session_caps["delete"] = {}
        if self.config.advertise_fork:
            session_caps["fork"] = {}
        auth_methods: list[dict[str, Any]] = [
            {"id": "reference-login", "name": "Reference login", "description": "always accepted"}
        ]
        if self.config.auth_env:
            auth_methods.append(
                {"id": "reference-env", "name": "API key", "type": "env_var", "vars": [{"name": self.config.auth_env}]}
            )
        client_auth = (params.get("clientCapabilities") or {}).get("auth") or {}
        if self.config.auth_terminal and (client_auth.get("terminal") is True or self.config.auth_terminal_always):
            auth_methods.append({"id": "reference-tui", "name": "Device login", "type": "terminal",
                                 "description": "in a terminal", "args": ["--login"],
                                 "env": dict(self.config.auth_terminal_env)})
        return {
            "protocolVersion": self.config.protocol_version,
            "agentCapabilities": {
                "loadSession": self.config.advertise_load,
                "promptCapabilities": {"image": self.config.media, "audio": self.config.media, "embeddedContext": True},
                "mcpCapabilities": {"http": self.config.mcp_http, "sse": self.config.mcp_sse},
                "sessionCapabilities": session_caps,
                "auth": {"logout": {}},
            },
            "authMethods": auth_methods,
            "agentInfo": {"name": "acp-reference-agent", "title": "ACP reference agent", "version": "0.1.0"},
        }

    def _authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        method_id = params.get("methodId")
        if self.config.auth_fails:
            raise RpcError(AUTH_REQUIRED, "Authentication failed: no credentials available")
        if method_id == "reference-login":
            self.authenticated = "authenticate-no-effect" not in self.config.quirks
            return {}
        if method_id == "reference-env" and self.config.auth_env and os.environ.get(self.config.auth_env):
            self.authenticated = True
            return {}
        raise RpcError(AUTH_REQUIRED, f"Authentication failed for method {method_id!r}")

    def _check_cwd(self, params: dict[str, Any]) -> str:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise RpcError(INVALID_PARAMS, "Invalid params: cwd must be an absolute path")
        if not isinstance(params.get("mcpServers", []), list):
            raise RpcError(INVALID_PARAMS, "Invalid params: mcpServers must be an array")
        return cwd

    def _setup(self, session: Session, params: dict[str, Any]) -> None:
        """What a session/new, load or resume gives the session besides its cwd, checked as a strict agent would:
        MCP servers of the types it advertises, additional directories only when it advertises them."""
        servers = []
        for server in params.get("mcpServers") or []:
            kind = server.get("type", "stdio") if isinstance(server, dict) else None
            if kind not in ("stdio", "http", "sse") or (kind == "http" and not self.config.mcp_http) or \
                    (kind == "sse" and not self.config.mcp_sse):
                raise RpcError(INVALID_PARAMS, f"Invalid params: MCP server type {kind!r} is not supported")
            pairs = server.get("env") if kind == "stdio" else server.get("headers")
            servers.append({"name": server.get("name"), "type": kind,
                            "keys": [p.get("name") for p in pairs or [] if isinstance(p, dict)],
                            **({"values": [p.get("value") for p in pairs or [] if isinstance(p, dict)]}
                               if self.config.leaky_mcp else {})})
        directories = params.get("additionalDirectories")
        if directories and "refuse-additional-directories" in self.config.quirks:
            raise RpcError(INVALID_PARAMS, "Invalid params: additionalDirectories is not supported")
        if directories is not None and not self.config.additional_directories:
            raise RpcError(INVALID_PARAMS, "Invalid params: additionalDirectories is not supported")
        if directories is not None and (not isinstance(directories, list) or
                                        not all(isinstance(d, str) and os.path.isabs(d) for d in directories)):
            raise RpcError(INVALID_PARAMS, "Invalid params: additionalDirectories must be absolute paths")
        session.mcp, session.directories = servers, list(directories or [])

    def _answer(self, session: Session, answer: dict[str, Any]) -> dict[str, Any]:
        """A set-up answer with the session's offer; its slash commands follow the answer."""
        task = asyncio.get_running_loop().create_task(self._announce_commands(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        offer = self.catalogue.offer(session.options)
        if "bad-current-value" in self.config.quirks:
            for option in offer.get("configOptions") or []:
                if option["id"] == "effort":
                    option["currentValue"] = "extreme"  # offered: low, medium, high
        return {**answer, **offer}

    async def _announce_commands(self, session: Session) -> None:
        await asyncio.sleep(0)  # after the answer is written
        await self._update(session, {"sessionUpdate": "available_commands_update",
                                     "availableCommands": commands()}, record=False)

    async def _new(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = self._check_cwd(params)
        session = Session(session_id=f"ref-{uuid.uuid4()}", cwd=cwd)
        self._setup(session, params)
        self.sessions[session.session_id] = session
        self._save(session)
        return self._answer(session, {"sessionId": session.session_id})

    # -- configuration ------------------------------------------------------------------
    def _live_session(self, params: dict[str, Any]) -> Session:
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: session {sid} (load or resume it first)")
        return session

    async def _set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._live_session(params)
        option_id = str(params.get("configId"))
        if "accept-any-value" in self.config.quirks:  # says yes, changes nothing
            return {"configOptions": self.catalogue.config_options(session.options)}
        session.options.values[option_id] = self.catalogue.check(session.options, option_id, params.get("value"),
                                                                 "session/set_config_option")
        self._save(session)
        if option_id == "mode" and self.catalogue.has_modes:  # its other form, as agents with both keep them
            await self._update(session, {"sessionUpdate": "current_mode_update",
                                         "currentModeId": session.options.values["mode"]}, record=False)
        options = self.catalogue.config_options(session.options)
        if "partial-config-answer" in self.config.quirks:
            options = [o for o in options if o["id"] == option_id]
        return {"configOptions": options}

    async def _set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._live_session(params)
        await self._switch_mode(session, self.catalogue.check(session.options, "mode", params.get("modeId"),
                                                              "session/set_mode"))
        return {}

    async def _switch_mode(self, session: Session, mode: Any) -> None:
        session.options.values["mode"] = mode
        self._save(session)
        if self.catalogue.has_modes:
            await self._update(session, {"sessionUpdate": "current_mode_update", "currentModeId": mode},
                               record=False)
        if self.catalogue.has_options:
            await self._update(session, {"sessionUpdate": "config_option_update",
                                         "configOptions": self.catalogue.config_options(session.options)},
                               record=False)

    async def _set_model(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._live_session(params)
        session.options.values["model"] = self.catalogue.check(session.options, "model", params.get("modelId"),
                                                               "session/set_model")
        self._save(session)
        return {}

    def _existing(self, params: dict[str, Any]) -> Session:
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            session = self._read(sid) if isinstance(sid, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: session {sid}", {"sessionId": sid})
        return session

    async def _load(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_cwd(params)
        session = self._existing(params)
        self._setup(session, params)
        self.sessions[session.session_id] = session
        if self.config.late_replay:
            asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(self._replay(session)))
            return self._answer(session, {})
        await self._replay(session)
        if "null-load-result" in self.config.quirks:
            return None  # type: ignore[return-value]
        return self._answer(session, {})

    async def _replay(self, session: Session) -> None:
        for index, update in enumerate(list(session.history)):
            if self.exit_mid_replay and index >= len(session.history) // 2:
                os._exit(4)
            if self.config.replay_delay:
                await asyncio.sleep(self.config.replay_delay)
            await self._update(session, update, record=False)

    async def _resume(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_cwd(params)
        session = self._existing(params)
        self._setup(session, params)
        self.sessions[session.session_id] = session
        if self.config.replay_on_resume:  # a fault: resume must not replay
            await self._replay(session)
        return self._answer(session, {})

    async def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        want_cwd = params.get("cwd")
        infos = []
        for path in sorted(self.config.state_dir.glob("*.json")):
            session = self._read(path.stem)
            if session is None or (want_cwd and session.cwd != want_cwd
                                   and "list-ignores-cwd" not in self.config.quirks):
                continue
            infos.append({"sessionId": session.session_id, "cwd": session.cwd, "title": session.title,
                          "updatedAt": session.updated_at})
        return {"sessions": infos}

    async def _close(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._existing(params)
        if "close-keeps-turn" not in self.config.quirks:
            session.cancel.set()
        self.sessions.pop(session.session_id, None)
        return {}

    async def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        """session/delete: the session is forgotten here and on disk (a later load or resume answers not found)."""
        sid = params.get("sessionId")
        if not isinstance(sid, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: sessionId must be a string")
        if not (sid in self.sessions or self._path(sid).exists()):
            if "delete-unknown-errors" in self.config.quirks:
                raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: session {sid}")
            return {}  # gone already: deleting it again is no error (the spec's SHOULD)
        session = self.sessions.pop(sid, None)
        if session is not None:
            session.cancel.set()
        self._path(sid).unlink(missing_ok=True)
        return {}

    async def _fork(self, params: dict[str, Any]) -> dict[str, Any]:
        """session/fork (unstable): a new session with a copy of the conversation and configuration of one this
        process has or has stored; the original is untouched."""
        cwd = self._check_cwd(params)
        source = self._existing(params)
        session = Session(session_id=f"ref-{uuid.uuid4()}", cwd=cwd, title=source.title,
                          history=[dict(u) for u in source.history])
        session.options.values.update(source.options.values)
        self._setup(session, params)
        self.sessions[session.session_id] = session
        self._save(session)
        return self._answer(session, {"sessionId": session.session_id})

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: session {sid} (load or resume it first)")
        prompt = params.get("prompt")
        if not isinstance(prompt, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: prompt must be an array of content blocks")
        kinds = {b.get("type") for b in prompt if isinstance(b, dict)}
        refused = {"refuse-resource-link": "resource_link", "refuse-embedded": "resource", "refuse-media": "image"}
        for quirk, kind in refused.items():
            if quirk in self.config.quirks and (kind in kinds or (kind == "image" and "audio" in kinds)):
                raise RpcError(INVALID_PARAMS, f"Invalid params: {kind} content is not supported")
        if "refuse-meta" in self.config.quirks and "_meta" in params:
            raise RpcError(INVALID_PARAMS, "Invalid params: unexpected field _meta")
        if session.turn_running:
            raise RpcError(INVALID_PARAMS, "a prompt turn is already running for this session")
        session.turn_running = True
        session.cancel.clear()
        session.prompt_meta = params.get("_meta")
        try:
            for block in prompt:
                session.history.append({"sessionUpdate": "user_message_chunk", "content": block})
            text = " ".join(b.get("text", "") for b in prompt if isinstance(b, dict) and b.get("type") == "text")
            if session.title is None and text:
                session.title = text[:60]
            stop = await self._turn(session, text.strip())
            if stop == "end_turn" and self.config.bad_stop_reason:
                stop = "done"  # a fault: not a StopReason of ACP v1
            await self._usage(session)
            return {"stopReason": stop}
        finally:
            session.turn_running = False
            self._save(session)

    async def _turn(self, session: Session, text: str) -> str:
        cfg = self.config
        if cfg.brief_turns:  # a conformant agent whose turns end before a client can cancel them
            await self._message(session, "done")
            return "end_turn"
        for _ in range(cfg.noise):
            self._raw(b"reference-agent noise: this line is not JSON\n")
        if "bad-utf8" in cfg.quirks:  # a message in Latin-1, as a careless encoder writes it
            self._raw(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"'
                      + session.session_id.encode() + b'","update":{"sessionUpdate":"agent_message_chunk",'
                      b'"content":{"type":"text","text":"caf\xe9 "}}}}\n')
        if cfg.tool_calls:
            await self._tool_call(session, "ls", "README.md")
        if cfg.permission:
            outcome = await self._ask_permission(session)
            if session.cancel.is_set() or outcome == {"outcome": "cancelled"}:
                return "cancelled"
            await self._message(session, f"permission: {orjson.dumps(outcome).decode()}")
        if cfg.bad_update:  # a fault: a content block without its type
            await self._update(session, {"sessionUpdate": "agent_message_chunk", "content": {"text": "untyped"}})
        if cfg.huge_line:
            await self._message(session, "x" * cfg.huge_line)
        for i in range(cfg.stream):
            await self._message(session, f"chunk {i} ")
            if session.cancel.is_set():
                return "cancelled"
        if text.startswith("/"):
            stop = await self._run_command(session, text)
            if stop is not None:
                return stop
        else:
            await self._message(session, f"echo: {text}")
        return "cancelled" if session.cancel.is_set() else "end_turn"

    async def _usage(self, session: Session) -> None:
        """Context used (the history's characters / 4, as tokens) of a 200k window, and a made-up cost."""
        used = len(orjson.dumps(session.history)) // 4
        await self._update(session, {"sessionUpdate": "usage_update", "used": used, "size": 200_000,
                                     "cost": {"amount": round(used * 3e-6, 6), "currency": "USD"}}, record=False)

    async def _tool_call(self, session: Session, title: str, result: str) -> None:
        call_id = f"call-{uuid.uuid4().hex[:8]}"
        await self._update(session, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title,
                                     "kind": "read", "status": "pending"})
        await self._update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                                     "status": "completed",
                                     "content": [{"type": "content", "content": {"type": "text", "text": result}}]})

    async def _shell(self, session: Session, command: str) -> str | None:
        """Run `command` with `sh -c` in the session's directory, as the agent's own process, streaming its output
        back as it comes (a tool call, then its output as message chunks, then the exit status)."""
        call_id = f"call-{uuid.uuid4().hex[:8]}"
        await self._update(session, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": f"sh: {command}",
                                     "kind": "execute", "status": "in_progress"})
        proc = await asyncio.create_subprocess_exec("sh", "-c", command, cwd=session.cwd,
                                                    stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT)
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            await self._message(session, chunk.decode("utf-8", "replace"))
            if session.cancel.is_set():
                proc.kill()
        status = await proc.wait()
        await self._update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                                     "status": "completed" if status == 0 else "failed",
                                     "content": [{"type": "content",
                                                  "content": {"type": "text", "text": f"exit status {status}"}}]})
        return "cancelled" if session.cancel.is_set() else None

    async def _terminal(self, session: Session, rest: str) -> str | None:
        """`/term [--limit N] [--cwd DIR] [--env NAME=VALUE]… [--keep] [--kill] [--detach] CMD`: CMD run with `sh -c`
        in a terminal of the client's (with those variables), embedded in a tool call; its exit and output asked for,
        and the terminal released (unless `--keep`: its id is said instead). `--kill` kills it at once. `--detach`
        ends the turn at once, the command left running (its id said; it ends with the session). A cancel kills and
        releases it."""
        assert self.conn is not None
        refused = self._not_offered("terminal/create")
        if refused is not None:
            await self._message(session, refused)
            return None
        words = rest.split(" ")
        options: dict[str, Any] = {}
        env: list[dict[str, str]] = []
        while words and words[0].startswith("--"):
            flag = words.pop(0)
            if flag in ("--limit", "--cwd"):
                options[flag] = words.pop(0) if words else ""
            elif flag == "--env":
                name, _, value = (words.pop(0) if words else "").partition("=")
                env.append({"name": name, "value": value})
            else:
                options[flag] = True
        command = " ".join(words)
        params: dict[str, Any] = {"sessionId": session.session_id, "command": "sh", "args": ["-c", command]}
        if env:
            params["env"] = env
        if "--limit" in options:
            params["outputByteLimit"] = int(options["--limit"])
        if "--cwd" in options:
            params["cwd"] = options["--cwd"]
        try:
            created = await self.conn.request("terminal/create", params)
        except RpcError as err:
            await self._message(session, f"terminal/create error {err.code}: {err.message}")
            return None
        terminal_id = created["terminalId"]
        call_id = f"call-{uuid.uuid4().hex[:8]}"
        await self._update(session, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": f"$ {command}",
                                     "kind": "execute", "status": "in_progress",
                                     "content": [{"type": "terminal", "terminalId": terminal_id}]})
        ids = {"sessionId": session.session_id, "terminalId": terminal_id}
        if options.get("--detach"):
            await self._message(session, f"terminal {terminal_id} detached")
            return None
        if options.get("--kill"):
            await self.conn.request("terminal/kill", ids)
        waiting = asyncio.ensure_future(self.conn.request("terminal/wait_for_exit", ids))
        cancelled = asyncio.ensure_future(session.cancel.wait())
        await asyncio.wait([waiting, cancelled], return_when=asyncio.FIRST_COMPLETED)
        cancelled.cancel()
        if not waiting.done():  # the turn was cancelled: the command is killed with it
            await self.conn.request("terminal/kill", ids)
            await waiting
        status = waiting.result()
        output = await self.conn.request("terminal/output", ids)
        await self._update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                                     "status": "completed" if status.get("exitCode") == 0 else "failed"})
        if options.get("--keep") or self.config.keep_terminals:
            await self._message(session, f"terminal {terminal_id} kept")
        else:
            await self.conn.request("terminal/release", ids)
        await self._message(session, f"terminal exit {orjson.dumps(status).decode()}; kept "
                            f"{len(output['output'].encode())} bytes, truncated {output['truncated']}; "
                            f"ends with {output['output'][-40:]!r}")
        return "cancelled" if session.cancel.is_set() else None

    async def _elicit(self, session: Session, kind: str) -> str | None:
        """`/elicit form|url|bad`: ask the person at the client, say what came back."""
        assert self.conn is not None
        refused = self._not_offered("elicitation/create", "url" if kind == "url" else "form")
        if refused is not None:
            await self._message(session, refused)
            return None
        params: dict[str, Any] = {"sessionId": session.session_id, "message": "Who is asking?"}
        if kind == "url":
            params.update(mode="url", elicitationId=f"e-{uuid.uuid4().hex[:8]}", url="https://example.com/sign-in")
        else:
            params.update(mode="form", requestedSchema={"type": "object", "properties": {
                "name": {"type": "string", "minLength": 1, "title": "Your name"},
                "age": {"type": "integer", "minimum": 0},
                "colour": {"type": "string", "enum": ["red", "green"]},
                "subscribe": {"type": "boolean"},
                **({"address": {"type": "object"}} if kind == "bad" else {})}, "required": ["name"]})
        asking = asyncio.ensure_future(self.conn.request("elicitation/create", params))
        cancelled = asyncio.ensure_future(session.cancel.wait())
        await asyncio.wait([asking, cancelled], return_when=asyncio.FIRST_COMPLETED)
        cancelled.cancel()
        try:
            answer = await asking  # after a cancel the client answers `cancel` itself
        except RpcError as err:
            await self._message(session, f"elicitation/create error {err.code}: {err.message}")
            return None
        await self._message(session, f"elicitation: {orjson.dumps(answer).decode()}")
        if kind == "url" and answer.get("action") == "accept":
            await self.conn.notify("elicitation/complete", {"elicitationId": params["elicitationId"]})
        # A client cancels the questions of a turn before it cancels the turn: the same stop, whichever comes first.
        return "cancelled" if session.cancel.is_set() or answer.get("action") == "cancel" else None

    async def _withdraw(self, session: Session) -> None:
        """A permission request, withdrawn (`$/cancel_request`) as soon as it has gone out: the client must stop
        asking and answer -32800."""
        assert self.conn is not None
        sent = asyncio.Event()

        def on_frame(direction: str, msg: dict[str, Any]) -> None:
            if direction == "out" and msg.get("method") == "session/request_permission":
                sent.set()

        self.conn.observers.append(on_frame)
        try:
            asking = asyncio.ensure_future(self.conn.request("session/request_permission", {
                "sessionId": session.session_id, "toolCall": {"toolCallId": "call-w", "title": "Withdrawn"},
                "options": [{"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"}]}))
            await sent.wait()
            # A round trip behind it: once this is answered, the client has begun asking (it handles requests in
            # the order they came); then the question is withdrawn.
            with contextlib.suppress(RpcError):
                await self.conn.request("fs/read_text_file", {"sessionId": session.session_id, "path": ".withdraw"})
            asking.cancel()  # the connection tells the client ($/cancel_request)
            with contextlib.suppress(asyncio.CancelledError):
                await asking
        finally:
            self.conn.observers.remove(on_frame)
        await self._message(session, "withdrew the permission request")

    async def _ask_permission(self, session: Session) -> Any:
        assert self.conn is not None
        call_id = f"call-{uuid.uuid4().hex[:8]}"
        path = os.path.join(session.cwd, "notes.txt")
        tool_call = {"toolCallId": call_id, "title": "Write notes.txt", "kind": "edit", "status": "pending",
                     "locations": [{"path": path}],
                     "content": [{"type": "diff", "path": path, "oldText": "draft\n", "newText": "final\n"}]}
        request = asyncio.ensure_future(self.conn.request("session/request_permission", {
            "sessionId": session.session_id,
            "toolCall": tool_call,
            "options": [
                {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
            ],
        }))
        try:
            answer = await request
        except RpcError as err:
            return {"error": err.to_dict()}
        return answer.get("outcome") if isinstance(answer, dict) else answer

    async def _ask_form(self, session: Session) -> Any:
        """One form elicitation, its answer's action (or the error): a part of a question flood."""
        assert self.conn is not None
        try:
            answer = await self.conn.request("elicitation/create", {
                "sessionId": session.session_id, "message": "Your name?", "mode": "form",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}})
        except RpcError as err:
            return {"error": err.to_dict()}
        return {"outcome": answer.get("action")} if isinstance(answer, dict) else answer

    async def _run_command(self, session: Session, text: str) -> str | None:
        assert self.conn is not None
        word, _, rest = text.partition(" ")
        args = rest.split()
        if word == "/read":
            params: dict[str, Any] = {"sessionId": session.session_id, "path": args[0] if args else ""}
            if len(args) > 1:
                params["line"] = int(args[1])
            if len(args) > 2:
                params["limit"] = int(args[2])
            await self._report(session, "fs/read_text_file", params)
        elif word == "/write":
            path, _, content = rest.partition(" ")
            await self._report(session, "fs/write_text_file",
                               {"sessionId": session.session_id, "path": path, "content": content})
        elif word == "/call":
            # any method at all, offered or not (the client's answer to what it does not serve is the point)
            await self._report(session, args[0] if args else "", {"sessionId": session.session_id}, gated=False)
        elif word == "/permission":
            outcome = await self._ask_permission(session)
            if session.cancel.is_set() or outcome == {"outcome": "cancelled"}:
                return "cancelled"
            await self._message(session, f"permission: {orjson.dumps(outcome).decode()}")
        elif word == "/permissions":  # N permission requests at once (a flood a gateway must bound), then a tally;
            count = int(args[0]) if args else 10  # `--and-questions`: as many form elicitations besides, interleaved
            asking = [asyncio.ensure_future(ask(session)) for _ in range(count)
                      for ask in ((self._ask_permission, self._ask_form) if "--and-questions" in args
                                  else (self._ask_permission,))]
            for _ in range(3):  # each request is under way (written, or queued on the connection's writer) ...
                await asyncio.sleep(0)
            await self._message(session, f"asked {count} permissions")  # ... so this goes out after all of them
            outcomes = await asyncio.gather(*asking)
            tally: dict[str, int] = {}
            for outcome in outcomes:
                key = (f"error {outcome['error']['code']}" if isinstance(outcome, dict) and "error" in outcome
                       else str(outcome.get("outcome")) if isinstance(outcome, dict) else str(outcome))
                tally[key] = tally.get(key, 0) + 1
            await self._message(session, f"permissions: {orjson.dumps(tally, option=orjson.OPT_SORT_KEYS).decode()}")
            # a client answers a permission `cancelled`, and a question's action `cancel`, once it cancels
            if session.cancel.is_set() or tally.get("cancelled") or tally.get("cancel"):
                return "cancelled"
        elif word == "/tool":
            await self._tool_call(session, args[0] if args else "tool", " ".join(args[1:]) or "done")
        elif word == "/stream":
            for i in range(int(args[0]) if args else 10):
                await self._message(session, f"chunk {i} ")
                if session.cancel.is_set():
                    return "cancelled"
        elif word == "/flood":
            count = int(args[0]) if args else 100
            size = int(args[1]) if len(args) > 1 else 1000
            chunk = "z" * size
            for _ in range(count):
                await self._update(session, {"sessionUpdate": "agent_message_chunk",
                                             "content": {"type": "text", "text": chunk}}, record=False)
        elif word == "/huge":
            await self._message(session, "y" * (int(args[0]) if args else 1 << 20))
        elif word == "/crash":
            await self._message(session, "crashing now")
            os._exit(5)
        elif word in ("/hang", "/sleep"):
            limit = float(args[0]) if word == "/sleep" and args else None
            if limit is None:
                await self._message(session, "hanging until cancelled")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(session.cancel.wait(), limit)
            if session.cancel.is_set():
                return "cancelled"
            await self._message(session, "done sleeping")
        elif word == "/fail":
            if self.config.fault_reason:  # why, as real agents say it: on stderr, not in the error
                sys.stderr.write(f"{self.config.fault_reason}\n")
                sys.stderr.flush()
            raise RpcError(INTERNAL_ERROR, "the reference agent failed this turn as asked")
        elif word == "/fill":  # the agent itself writes BYTES to a file (a resource limit's test)
            with open(os.path.join(session.cwd, "fill.bin"), "wb") as out:
                for _ in range((int(args[0]) if args else 1 << 20) // 65536 + 1):
                    out.write(b"\0" * 65536)
            await self._message(session, "filled")
        elif word == "/term":
            return await self._terminal(session, rest)
        elif word == "/recall":  # the prompts this session remembers, this one included (a fork's proof of context)
            said = [b.get("text", "") for u in session.history if u.get("sessionUpdate") == "user_message_chunk"
                    for b in [u.get("content") or {}] if isinstance(b, dict) and b.get("type") == "text"]
            await self._message(session, f"recall: {len(said)} prompts: " + " | ".join(said))
        elif word == "/meta":  # says the prompt request's `_meta`, and sends an update with a `_meta` of its own
            assert self.conn is not None
            await self.conn.notify("session/update", {
                "sessionId": session.session_id, "_meta": {"example.com/trace": "agent-side"},
                "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "meta: "}}})
            shown = {k: v for k, v in (session.prompt_meta or {}).items() if k not in ("traceparent", "tracestate")}
            await self._message(session, orjson.dumps(shown).decode())
        elif word == "/withdraw":  # asks for permission, then withdraws the question before any answer
            await self._withdraw(session)
        elif word == "/work":  # what a coding agent does with a client: a file written and read, a command run
            name = os.path.join(session.cwd, "acp-reference-work.txt")
            await self._report(session, "fs/write_text_file", {"sessionId": session.session_id, "path": name,
                                                               "content": "work\n"})
            await self._report(session, "fs/read_text_file", {"sessionId": session.session_id, "path": name})
            return await self._terminal(session, "echo work")
        elif word == "/elicit":
            return await self._elicit(session, args[0] if args else "form")
        elif word == "/termout":
            await self._report(session, "terminal/output", {"sessionId": session.session_id,
                                                             "terminalId": args[0] if args else ""})
        elif word == "/sh":  # the agent's own shell tool, as every real coding agent has: no ACP call involved
            return await self._shell(session, rest)
        elif word == "/plan":  # a plan of the given steps (default two), the first done
            steps = [step.strip() for step in rest.split(";") if step.strip()] or ["look around", "make the change"]
            await self._update(session, {"sessionUpdate": "plan", "entries": [
                {"content": step, "priority": "medium", "status": "completed" if i == 0 else "pending"}
                for i, step in enumerate(steps)]})
        elif word == "/unknown-update":
            await self._update(session, {"sessionUpdate": "_reference_future_kind", "payload": {"x": 1}})
        elif word == "/mode":  # the agent changes its own mode, mid-turn
            try:
                mode = self.catalogue.check(session.options, "mode", args[0] if args else "",
                                            "session/set_mode" if self.catalogue.has_modes
                                            else "session/set_config_option")
            except RpcError as err:
                await self._message(session, f"mode not changed: {err.message}")
            else:
                if "silent-mode-change" in self.config.quirks:
                    session.options.values["mode"] = mode
                    self._save(session)
                else:
                    await self._switch_mode(session, mode)
                await self._message(session, f"switched to mode {mode}")
        elif word == "/config":
            await self._message(session, f"config: {described(session.options.values)}")
        elif word == "/mcp":
            await self._message(session, "mcp: " + (", ".join(
                f"{m['name']} ({m['type']}; {', '.join(m['keys']) or 'no keys'}"
                + (f" = {', '.join(map(str, m['values']))}" if m.get("values") else "") + ")"
                for m in session.mcp) or "none"))
        elif word == "/dirs":
            await self._message(session, "dirs: " + (", ".join(session.directories) or "none"))
        else:
            await self._message(session, f"echo: {text}")
        return None

    def _not_offered(self, method: str, mode: str = "form") -> str | None:
        """Why the client did not offer `method` (None: it did, or it is no capability's). A conformant agent calls
        nothing the client did not offer (`--ignore-client-capabilities` is the fault that does)."""
        caps = self.client_caps
        fs = caps.get("fs") or {}
        offered = {"fs/read_text_file": fs.get("readTextFile") is True,
                   "fs/write_text_file": fs.get("writeTextFile") is True,
                   "elicitation/create": isinstance((caps.get("elicitation") or {}).get(mode), dict)}
        if method.startswith("terminal/"):
            offered[method] = caps.get("terminal") is True
        if self.config.ignore_client_capabilities or offered.get(method, True):
            return None
        return f"{method}: not offered by the client (its clientCapabilities), so not called"

    async def _report(self, session: Session, method: str, params: dict[str, Any], gated: bool = True) -> None:
        assert self.conn is not None
        refused = self._not_offered(method) if gated else None
        if refused is not None:
            await self._message(session, refused)
            return
        try:
            result = await self.conn.request(method, params)
            await self._message(session, f"{method} ok: {orjson.dumps(result).decode()}")
        except RpcError as err:
            await self._message(session, f"{method} error {err.code}: {err.message}")


def _parse_args(argv: list[str] | None) -> Config:
    p = argparse.ArgumentParser(prog="python -m agents.reference", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    default_state = os.environ.get("ACP_REFERENCE_STATE_DIR") or str(
        Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "acp-reference-agent"
    )
    p.add_argument("--state-dir", default=default_state, help="where sessions are persisted")
    p.add_argument("--no-load", action="store_true", help="do not advertise or serve session/load")
    p.add_argument("--no-resume", action="store_true", help="do not advertise or serve session/resume")
    p.add_argument("--no-list", action="store_true", help="do not advertise or serve session/list")
    p.add_argument("--no-close", action="store_true", help="do not advertise or serve session/close")
    p.add_argument("--no-delete", action="store_true", help="do not advertise or serve session/delete")
    p.add_argument("--no-fork", action="store_true", help="do not advertise or serve session/fork (unstable)")
    p.add_argument("--protocol-version", type=int, default=1, help="the version answered to initialize")
    p.add_argument("--fault", action="append", default=[], metavar="METHOD=KIND",
                   help=f"inject a fault on METHOD; KIND is one of {', '.join(FAULTS)}")
    p.add_argument("--fault-once", action="append", default=[], metavar="METHOD=KIND",
                   help="like --fault, but only the first time across restarts (a marker in --state-dir)")
    p.add_argument("--log", metavar="FILE", help="append every message received as a JSON line")
    p.add_argument("--noise", type=int, default=0, help="non-JSON lines on stdout at start and per prompt")
    p.add_argument("--huge-line", type=int, default=0, metavar="BYTES", help="one huge update per prompt")
    p.add_argument("--fault-reason", metavar="TEXT", help="write TEXT to stderr before an error fault's answer")
    p.add_argument("--stderr-flood", type=int, default=0, metavar="BYTES", help="write this much to stderr at start")
    p.add_argument("--replay-delay", type=float, default=0.0, metavar="SECONDS", help="pause between replayed updates")
    p.add_argument("--late-replay", action="store_true", help="answer session/load first, replay after")
    p.add_argument("--permission", action="store_true", help="ask permission in every prompt turn")
    p.add_argument("--tool-calls", action="store_true", help="report a tool call in every prompt turn")
    p.add_argument("--stream", type=int, default=0, metavar="N", help="stream N chunks per prompt turn")
    p.add_argument("--require-auth", action="store_true", help="session methods answer -32000 until authenticate")
    p.add_argument("--auth-env", metavar="VAR", help="advertise an env_var auth method needing VAR")
    p.add_argument("--auth-terminal-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable more in the terminal auth method's env (an attack on the client's launch path)")
    p.add_argument("--auth-terminal", action="store_true", help="advertise a terminal auth method (to a client that "
                   "runs them): this program with --login")
    p.add_argument("--login", action="store_true", help="the terminal sign-in: print a device code, then sign in")
    p.add_argument("--auth-fails", action="store_true", help="authenticate always fails (-32000)")
    p.add_argument("--replay-on-resume", action="store_true", help="fault: replay history on session/resume")
    p.add_argument("--bad-stop-reason", action="store_true", help="fault: end turns with stopReason 'done'")
    p.add_argument("--bad-update", action="store_true", help="fault: send a malformed session/update per prompt")
    p.add_argument("--linger", action="store_true", help="fault: keep running after stdin closes")
    p.add_argument("--ignore-cancel", action="store_true", help="ignore session/cancel")
    p.add_argument("--slow-init", type=float, default=0.0, metavar="SECONDS", help="answer initialize this late")
    p.add_argument("--brief-turns", action="store_true", help="end every turn after one update, at once")
    p.add_argument("--grandchild-pidfile", metavar="FILE", help="spawn a long-lived grandchild, write its pid")
    p.add_argument("--config-style", choices=STYLES, default="both",
                   help="what sessions offer: config options and modes (both, the default), config options only, "
                        "modes and the legacy models (legacy), or nothing")
    p.add_argument("--forget-config", action="store_true",
                   help="fault: session/load and session/resume bring back the default configuration")
    p.add_argument("--refuse-value", action="append", default=[], metavar="ID=VALUE",
                   help="fault: refuse to set option ID to VALUE although it is offered (repeatable)")
    p.add_argument("--drop-option-after-restart", action="append", default=[], metavar="ID",
                   help="fault: a session this process did not create (loaded or resumed) is not offered option ID")
    p.add_argument("--no-mcp-http", action="store_true", help="do not advertise or take MCP servers over http")
    p.add_argument("--no-mcp-sse", action="store_true", help="do not advertise or take MCP servers over sse")
    p.add_argument("--no-additional-directories", action="store_true",
                   help="do not advertise or take additionalDirectories")
    p.add_argument("--ignore-client-capabilities", action="store_true",
                   help="fault: call fs, terminal and elicitation methods the client did not offer")
    p.add_argument("--keep-terminals", action="store_true", help="fault: never release a terminal it created")
    p.add_argument("--auth-terminal-always", action="store_true",
                   help="fault: with --auth-terminal, advertise the terminal sign-in to clients that did not offer "
                        "auth.terminal")
    p.add_argument("--media", action="store_true", help="advertise (and take) image and audio prompts")
    p.add_argument("--quirk", action="append", default=[], choices=sorted(QUIRKS), metavar="KIND",
                   help="a protocol quirk (repeatable): " + "; ".join(f"{k}: {v}" for k, v in QUIRKS.items()))
    p.add_argument("--leaky-mcp", action="store_true",
                   help="fault: /mcp also says the env and header values it was given (an agent repeating a secret)")
    ns = p.parse_args(argv)
    def faults_of(items: list[str], flag: str) -> dict[str, str]:
        faults: dict[str, str] = {}
        for item in items:
            method, sep, kind = item.partition("=")
            if not sep or kind not in FAULTS:
                p.error(f"{flag} {item!r}: expected METHOD=KIND with KIND one of {', '.join(FAULTS)}")
            faults[method] = kind
        return faults

    faults = faults_of(ns.fault, "--fault")
    refused = set()
    for item in ns.refuse_value:
        option, sep, value = item.partition("=")
        if not sep:
            p.error(f"--refuse-value {item!r}: expected ID=VALUE")
        refused.add((option, value.lower()))
    return Config(
        state_dir=Path(ns.state_dir),
        advertise_load=not ns.no_load,
        advertise_resume=not ns.no_resume,
        advertise_list=not ns.no_list,
        advertise_close=not ns.no_close,
        advertise_delete=not ns.no_delete,
        advertise_fork=not ns.no_fork,
        protocol_version=ns.protocol_version,
        faults=faults,
        noise=ns.noise,
        huge_line=ns.huge_line,
        stderr_flood=ns.stderr_flood, fault_reason=ns.fault_reason,
        replay_delay=ns.replay_delay,
        late_replay=ns.late_replay,
        permission=ns.permission,
        tool_calls=ns.tool_calls,
        stream=ns.stream,
        require_auth=ns.require_auth,
        auth_env=ns.auth_env,
        auth_terminal=ns.auth_terminal,
        auth_terminal_env={"REF_LOGIN": "1", **dict(v.split("=", 1) for v in ns.auth_terminal_env)},
        login=ns.login,
        auth_fails=ns.auth_fails,
        ignore_cancel=ns.ignore_cancel,
        brief_turns=ns.brief_turns,
        slow_init=ns.slow_init,
        grandchild_pidfile=ns.grandchild_pidfile,
        faults_once=faults_of(ns.fault_once, "--fault-once"),
        replay_on_resume=ns.replay_on_resume,
        bad_stop_reason=ns.bad_stop_reason,
        bad_update=ns.bad_update,
        linger=ns.linger,
        log=ns.log,
        config_style=ns.config_style,
        forget_config=ns.forget_config,
        refuse_values=frozenset(refused),
        drop_after_restart=frozenset(ns.drop_option_after_restart),
        mcp_http=not ns.no_mcp_http,
        mcp_sse=not ns.no_mcp_sse,
        additional_directories=not ns.no_additional_directories,
        leaky_mcp=ns.leaky_mcp,
        ignore_client_capabilities=ns.ignore_client_capabilities,
        keep_terminals=ns.keep_terminals,
        auth_terminal_always=ns.auth_terminal_always,
        quirks=frozenset(ns.quirk),
        media=ns.media,
    )


class QuirkyWriter:
    """The agent's stdout as its Connection writes it, with the response quirks of `--quirk` applied."""

    WIRE = frozenset({"string-id-null", "result-and-error", "multiline-errors"})

    def __init__(self, inner: asyncio.StreamWriter, quirks: frozenset[str]) -> None:
        self.inner = inner
        self.quirks = quirks & self.WIRE

    def write(self, data: bytes) -> None:
        if self.quirks:
            msg = orjson.loads(data)
            if "method" not in msg:
                if "string-id-null" in self.quirks and isinstance(msg.get("id"), str):
                    msg["id"] = None
                if "error" in msg and "result-and-error" in self.quirks:
                    msg["result"] = None
                if "error" in msg and "multiline-errors" in self.quirks:
                    msg["error"]["message"] += "\n    at handle (reference/agent.py)"
            data = orjson.dumps(msg) + b"\n"
        self.inner.write(data)

    async def drain(self) -> None:
        await self.inner.drain()

    def close(self) -> None:
        self.inner.close()

    def is_closing(self) -> bool:
        return self.inner.is_closing()


async def serve(config: Config) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    agent = ReferenceAgent(config)
    agent.stdout = writer
    if config.grandchild_pidfile:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        Path(config.grandchild_pidfile).write_text(str(child.pid))
    if config.stderr_flood:
        line = b"reference agent stderr flood " + b"." * 70 + b"\n"
        for _ in range(config.stderr_flood // len(line) + 1):
            sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
    for _ in range(config.noise):
        writer.write(b"reference-agent noise: starting up\n")
    conn = Connection(reader, QuirkyWriter(writer, config.quirks), on_request=agent.handle,
                      on_notification=agent.on_notification, name="client")
    agent.conn = conn
    conn.start()
    await conn.wait_closed()
    if config.linger:
        await asyncio.sleep(3600)


LOGGED_IN = "logged-in"


def login(config: Config) -> NoReturn:
    """`--login`: the terminal sign-in a client runs for its person — says where to go, then is signed in (exit
    0), or fails (`--auth-fails`: exit 1)."""
    print("To sign in, open https://example.com/device and enter the code REF-1234", flush=True)
    if config.auth_fails or os.environ.get("REF_LOGIN") != "1":
        print("\x1b[31mlogin failed\x1b[0m", flush=True)
        sys.exit(1)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    (config.state_dir / LOGGED_IN).write_text("yes\n")
    print("\x1b[32msigned in\x1b[0m", flush=True)
    sys.exit(0)


def main(argv: list[str] | None = None) -> NoReturn:
    config = _parse_args(argv)
    if config.login:
        login(config)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config))
    sys.exit(0)
