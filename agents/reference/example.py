"""A worked example of an ACP v1 agent: the core of the reference agent, without its faults. Read this first.

The client (a gateway, an editor) starts the agent as a subprocess and speaks JSON-RPC over its stdin and stdout,
one JSON message a line. `acp.jsonrpc.Connection` does the framing; this class answers what the client asks:

- `initialize`: what the agent offers (its capabilities, how to sign in) and what the client offers back;
- `session/new`: a new conversation in a directory; `session/load` replays its history as updates first,
  `session/resume` does not (both work across restarts: sessions are kept in files, `store.py`);
- `session/prompt`: a turn. The agent answers with `session/update` notifications (message chunks, tool calls,
  plans...) and ends the turn with the answer to the prompt request, its `stopReason`;
- `session/cancel` (a notification): the running turn stops and answers `cancelled`;
- the rest of a session's life: `session/list`, `close`, `delete`, `fork`, and its configuration (`options.py`).

The fault layer (`faults.py`, `commands.py`, `tools.py`) overrides the hooks here to misbehave on demand, and
`agent.py` runs it all.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from acp.errors import AUTH_REQUIRED, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, RpcError
from acp.jsonrpc import Connection

from .config import Config
from .options import Catalogue, commands
from .store import Session, SessionStore

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class ExampleAgent:
    """An ACP agent that echoes every prompt, persists its sessions and offers modes, models and config options."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.store = SessionStore(config.state_dir)
        self.sessions: dict[str, Session] = {}  # the sessions this process serves (created, loaded or resumed)
        self.conn: Connection | None = None  # set by whoever connects the agent to its client
        self.catalogue = Catalogue(config.config_style, False, config.refuse_values)
        self.client_caps: dict[str, Any] = {}  # what the client offered in initialize
        self._tasks: set[asyncio.Task[Any]] = set()  # a task the loop holds only weakly must be held here

    # -- talking to the client -------------------------------------------------------------------------------------
    async def update(self, session: Session, update: dict[str, Any], record: bool = True) -> None:
        """A `session/update`; recorded in the history (which `session/load` replays) unless `record` is False."""
        assert self.conn is not None
        if record:
            session.history.append(update)
        await self.conn.notify("session/update", {"sessionId": session.session_id, "update": update})

    async def message(self, session: Session, text: str) -> None:
        await self.update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})

    # -- dispatch --------------------------------------------------------------------------------------------------
    def methods(self) -> dict[str, Handler | None]:
        """ACP method -> its handler; None where the capability that announces it is not advertised."""
        cfg = self.config
        return {
            "initialize": self._initialize,
            "authenticate": self._authenticate,
            "logout": self._logout,
            "session/new": self._new,
            "session/load": self._load if cfg.advertise_load else None,
            "session/resume": self._resume if cfg.advertise_resume else None,
            "session/list": self._list if cfg.advertise_list else None,
            "session/close": self._close if cfg.advertise_close else None,
            "session/delete": self._delete if cfg.advertise_delete else None,
            "session/fork": self._fork if cfg.advertise_fork else None,
            "session/prompt": self._prompt,
            "session/set_config_option": self._set_config_option,
            "session/set_mode": self._set_mode,
            "session/set_model": self._set_model,
        }

    async def handle(self, method: str, params: Any) -> Any:
        """A request of the client's: its handler's answer, or the RpcError it raised (the Connection sends it)."""
        handler = self.methods().get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        return await handler(params if isinstance(params, dict) else {})

    def on_notification(self, method: str, params: Any) -> None:
        """A notification of the client's: `session/cancel` is the one this agent acts on."""
        if method == "session/cancel" and isinstance(params, dict):
            session = self.sessions.get(str(params.get("sessionId")))
            if session is not None:
                # After the tasks already scheduled: a prompt read just before this cancel has a task that has
                # not started yet, and its start clears the flag — the cancel must land after that, not be lost.
                asyncio.get_running_loop().call_soon(session.cancel.set)

    # -- initialize and sign-in ------------------------------------------------------------------------------------
    async def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        self.client_caps = params.get("clientCapabilities") or {}
        client_session = self.client_caps.get("session") or {}
        # A boolean config option only for a client that said it can show one.
        booleans = isinstance((client_session.get("configOptions") or {}).get("boolean"), dict)
        self.catalogue = Catalogue(self.config.config_style, booleans, self.config.refuse_values)
        cfg = self.config
        offered = {"additionalDirectories": cfg.additional_directories, "resume": cfg.advertise_resume,
                   "list": cfg.advertise_list, "close": cfg.advertise_close, "delete": cfg.advertise_delete,
                   "fork": cfg.advertise_fork}
        return {
            "protocolVersion": cfg.protocol_version,
            "agentCapabilities": {
                "loadSession": cfg.advertise_load,
                "promptCapabilities": {"image": cfg.media, "audio": cfg.media, "embeddedContext": True},
                "mcpCapabilities": {"http": cfg.mcp_http, "sse": cfg.mcp_sse},
                "sessionCapabilities": {name: {} for name, on in offered.items() if on},
                "auth": {"logout": {}},
            },
            "authMethods": self._auth_methods(),
            "agentInfo": {"name": "acp-reference-agent", "title": "ACP reference agent", "version": "0.1.0"},
        }

    def _auth_methods(self) -> list[dict[str, Any]]:
        return [{"id": "reference-login", "name": "Reference login", "description": "always accepted"}]

    async def _authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        method_id = params.get("methodId")
        if method_id == "reference-login":
            return {}
        raise RpcError(AUTH_REQUIRED, f"Authentication failed for method {method_id!r}")

    async def _logout(self, params: dict[str, Any]) -> dict[str, Any]:
        return {}  # nothing to forget: this agent needs no sign-in of its own

    # -- session set-up --------------------------------------------------------------------------------------------
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
        servers = [self._mcp_server(server) for server in params.get("mcpServers") or []]
        session.mcp, session.directories = servers, self._directories(params)

    def _mcp_server(self, server: Any) -> dict[str, Any]:
        """What is kept of an MCP server: its name, type and the names of its env or headers (never their values)."""
        kind = server.get("type", "stdio") if isinstance(server, dict) else None
        if kind not in ("stdio", "http", "sse") or (kind == "http" and not self.config.mcp_http) or \
                (kind == "sse" and not self.config.mcp_sse):
            raise RpcError(INVALID_PARAMS, f"Invalid params: MCP server type {kind!r} is not supported")
        return {"name": server.get("name"), "type": kind, "keys": [p.get("name") for p in env_or_headers(server)]}

    def _directories(self, params: dict[str, Any]) -> list[str]:
        directories = params.get("additionalDirectories")
        if directories is not None and not self.config.additional_directories:
            raise RpcError(INVALID_PARAMS, "Invalid params: additionalDirectories is not supported")
        if directories is not None and (not isinstance(directories, list) or
                                        not all(isinstance(d, str) and os.path.isabs(d) for d in directories)):
            raise RpcError(INVALID_PARAMS, "Invalid params: additionalDirectories must be absolute paths")
        return list(directories or [])

    def _answer(self, session: Session, answer: dict[str, Any]) -> dict[str, Any]:
        """A set-up answer with the session's offer; its slash commands follow the answer."""
        task = asyncio.get_running_loop().create_task(self._announce_commands(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return {**answer, **self.catalogue.offer(session.options)}

    async def _announce_commands(self, session: Session) -> None:
        await asyncio.sleep(0)  # after the answer is written
        await self.update(session, {"sessionUpdate": "available_commands_update",
                                    "availableCommands": commands()}, record=False)

    async def _new(self, params: dict[str, Any]) -> dict[str, Any]:
        cwd = self._check_cwd(params)
        session = Session(session_id=f"ref-{uuid.uuid4()}", cwd=cwd)
        self._setup(session, params)
        self.sessions[session.session_id] = session
        self.store.save(session)
        return self._answer(session, {"sessionId": session.session_id})

    # -- restoring a session ---------------------------------------------------------------------------------------
    def _stored(self, session_id: str) -> Session | None:
        return self.store.read(session_id)

    def _existing(self, params: dict[str, Any]) -> Session:
        """The session a request names: served by this process already, or stored."""
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            session = self._stored(sid) if isinstance(sid, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: session {sid}", {"sessionId": sid})
        return session

    def _restore(self, params: dict[str, Any]) -> Session:
        """What session/load and session/resume share: the session found, set up again, and served from now on."""
        self._check_cwd(params)
        session = self._existing(params)
        self._setup(session, params)
        self.sessions[session.session_id] = session
        return session

    async def _load(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._restore(params)
        await self._replay(session)  # the conversation again, before the answer: the client shows it
        return self._answer(session, {})

    async def _replay(self, session: Session) -> None:
        for update in list(session.history):
            await self.update(session, update, record=False)

    async def _resume(self, params: dict[str, Any]) -> dict[str, Any]:
        return self._answer(self._restore(params), {})  # no replay: the client has the conversation

    # -- a prompt turn ---------------------------------------------------------------------------------------------
    def _live_session(self, params: dict[str, Any]) -> Session:
        sid = params.get("sessionId")
        session = self.sessions.get(sid) if isinstance(sid, str) else None
        if session is None:
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: session {sid} (load or resume it first)")
        return session

    def _prompt_blocks(self, params: dict[str, Any]) -> list[Any]:
        prompt = params.get("prompt")
        if not isinstance(prompt, list):
            raise RpcError(INVALID_PARAMS, "Invalid params: prompt must be an array of content blocks")
        return prompt

    async def _prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._live_session(params)
        prompt = self._prompt_blocks(params)
        if session.turn_running:
            raise RpcError(INVALID_PARAMS, "a prompt turn is already running for this session")
        session.turn_running = True
        session.cancel.clear()
        session.prompt_meta = params.get("_meta")
        try:
            for block in prompt:  # the user's side of the conversation, for a later replay
                session.history.append({"sessionUpdate": "user_message_chunk", "content": block})
            text = " ".join(b.get("text", "") for b in prompt if isinstance(b, dict) and b.get("type") == "text")
            if session.title is None and text:
                session.title = text[:60]
            stop = await self._turn(session, text.strip())
            await self._usage(session)
            return {"stopReason": stop}
        finally:
            session.turn_running = False
            self.store.save(session)

    async def _turn(self, session: Session, text: str) -> str:
        """What the agent does with a prompt (an echo, here); the turn's stop reason."""
        await self.message(session, f"echo: {text}")
        return "cancelled" if session.cancel.is_set() else "end_turn"

    async def _usage(self, session: Session) -> None:
        """Context used (the history's characters / 4, as tokens) of a 200k window, and a made-up cost."""
        used = len(orjson.dumps(session.history)) // 4
        await self.update(session, {"sessionUpdate": "usage_update", "used": used, "size": 200_000,
                                    "cost": {"amount": round(used * 3e-6, 6), "currency": "USD"}}, record=False)

    # == The core ends here. Beyond it: the rest of a session's life, and its configuration. =======================
    # -- the rest of a session's life ------------------------------------------------------------------------------
    async def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        want_cwd = params.get("cwd")
        infos = []
        for session_id in self.store.stored_ids():
            session = self._stored(session_id)
            if session is None or (want_cwd and session.cwd != want_cwd):
                continue
            infos.append({"sessionId": session.session_id, "cwd": session.cwd, "title": session.title,
                          "updatedAt": session.updated_at})
        return {"sessions": infos}

    async def _close(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._existing(params)
        session.cancel.set()  # a running turn ends with its session
        self.sessions.pop(session.session_id, None)
        return {}

    async def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        """session/delete: the session is forgotten here and on disk (a later load or resume answers not found)."""
        sid = params.get("sessionId")
        if not isinstance(sid, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: sessionId must be a string")
        if not self._known(sid):
            return {}  # gone already: deleting it again is no error (the spec's SHOULD)
        session = self.sessions.pop(sid, None)
        if session is not None:
            session.cancel.set()
        self.store.path(sid).unlink(missing_ok=True)
        return {}

    def _known(self, session_id: str) -> bool:
        return session_id in self.sessions or self.store.path(session_id).exists()

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
        self.store.save(session)
        return self._answer(session, {"sessionId": session.session_id})

    # -- configuration ---------------------------------------------------------------------------------------------
    async def _set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._live_session(params)
        option_id = str(params.get("configId"))
        session.options.values[option_id] = self.catalogue.check(session.options, option_id, params.get("value"),
                                                                 "session/set_config_option")
        self.store.save(session)
        if option_id == "mode" and self.catalogue.has_modes:  # its other form, as agents with both keep them
            await self.update(session, {"sessionUpdate": "current_mode_update",
                                        "currentModeId": session.options.values["mode"]}, record=False)
        return {"configOptions": self.catalogue.config_options(session.options)}

    async def _set_mode(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._live_session(params)
        await self.switch_mode(session, self.catalogue.check(session.options, "mode", params.get("modeId"),
                                                             "session/set_mode"))
        return {}

    async def switch_mode(self, session: Session, mode: Any) -> None:
        """The session's mode changed (by the client, or by the agent itself): the client is told in each form."""
        session.options.values["mode"] = mode
        self.store.save(session)
        if self.catalogue.has_modes:
            await self.update(session, {"sessionUpdate": "current_mode_update", "currentModeId": mode}, record=False)
        if self.catalogue.has_options:
            await self.update(session, {"sessionUpdate": "config_option_update",
                                        "configOptions": self.catalogue.config_options(session.options)},
                              record=False)

    async def _set_model(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._live_session(params)
        session.options.values["model"] = self.catalogue.check(session.options, "model", params.get("modelId"),
                                                               "session/set_model")
        self.store.save(session)
        return {}




def env_or_headers(server: dict[str, Any]) -> list[dict[str, Any]]:
    """An MCP server's env (stdio) or headers (http, sse): name and value pairs."""
    pairs = server.get("env") if server.get("type", "stdio") == "stdio" else server.get("headers")
    return [p for p in pairs or [] if isinstance(p, dict)]
