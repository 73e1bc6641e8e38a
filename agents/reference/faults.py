"""The fault layer: `ReferenceAgent`, the example agent (`example.py`) made to misbehave on demand. Each override
here adds the faults and quirks of its `Config` flags to one hook of the example, and a turn runs the slash
commands of `commands.py`. Without flags it behaves as the example does, plus those commands."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import orjson

from acp.errors import AUTH_REQUIRED, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, RpcError

from .auth import extra_auth_methods
from .commands import run_command
from .config import ERROR_FAULTS, LOGGED_IN, Config
from .example import ExampleAgent, env_or_headers
from .options import Catalogue, SessionOptions
from .store import Session
from .tools import ask_permission, tool_call

# quirk -> the content block type a prompt is refused for (`refuse-media` refuses audio too).
REFUSED_BLOCKS = {"refuse-resource-link": "resource_link", "refuse-embedded": "resource", "refuse-media": "image"}


async def apply_fault(config: Config, fault: str, params: Any) -> None:
    """A method fault of `--fault`: exit, never answer, or answer an error (`ignore` and `exit_mid_replay` act
    elsewhere)."""
    if fault == "crash":
        sys.stderr.write("reference agent: crashing as asked\n")
        sys.stderr.flush()
        os._exit(3)
    if fault == "hang":
        await asyncio.Event().wait()
    if fault in ERROR_FAULTS:
        if config.fault_reason:
            sys.stderr.write(f"{config.fault_reason}\n")
            sys.stderr.flush()
        code, template = ERROR_FAULTS[fault]
        sid = params.get("sessionId", "") if isinstance(params, dict) else ""
        raise RpcError(code, template.format(id=sid))


class ReferenceAgent(ExampleAgent):
    """The example agent with every fault of its Config, and the slash commands."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        # A terminal login (`--login`, run by the client) leaves a mark in the state directory: signed in from then on.
        self.authenticated = not config.require_auth or (config.state_dir / LOGGED_IN).exists()
        self.exit_mid_replay = False
        self.stdout: Any = None  # the raw stdout, for what no Connection would write (noise, broken lines)

    def _raw(self, data: bytes) -> None:
        self.stdout.write(data)

    # -- dispatch: logging, method faults, sign-in -----------------------------------------------------------------
    def _log(self, method: str, params: Any) -> None:
        if self.config.log:
            with open(self.config.log, "ab") as fh:
                fh.write(orjson.dumps({"pid": os.getpid(), "method": method, "params": params}) + b"\n")

    def _fault_for(self, method: str) -> str | None:
        """The fault of `method`: a `--fault-once` the first time across restarts (a marker file), else `--fault`."""
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
            await apply_fault(self.config, fault, params)
        if method == "initialize" and self.config.slow_init:  # an adapter that probes for its CLI before it answers
            await asyncio.sleep(self.config.slow_init)
        if method.startswith("session/") and method != "session/cancel" and not self.authenticated:
            raise RpcError(AUTH_REQUIRED, "Authentication required: call authenticate first")
        if method == "session/prompt" and self.config.prompt_key and not os.environ.get(self.config.prompt_key):
            raise RpcError(AUTH_REQUIRED, "Authentication required")
        if method.startswith("_") and "silent-unknown" in self.config.quirks:  # no handler's name starts with `_`
            await asyncio.Event().wait()
        return await super().handle(method, params)

    def on_notification(self, method: str, params: Any) -> None:
        self._log(method, params)
        if "answer-notifications" in self.config.quirks and method not in ("session/cancel", "$/cancel_request"):
            self._raw(orjson.dumps({"jsonrpc": "2.0", "id": None, "error": {
                "code": METHOD_NOT_FOUND, "message": f"Method not found: {method}"}}) + b"\n")
        if method == "session/cancel" and (self.config.ignore_cancel
                                           or self.config.faults.get("session/cancel") == "ignore"):
            return
        super().on_notification(method, params)

    async def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        answer = await super()._initialize(params)
        if "booleans-always" in self.config.quirks:
            self.catalogue = Catalogue(self.config.config_style, True, self.config.refuse_values)
        return answer

    def _auth_methods(self) -> list[dict[str, Any]]:
        return [*super()._auth_methods(), *extra_auth_methods(self.config, self.client_caps)]

    async def _authenticate(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.config.auth_fails:
            raise RpcError(AUTH_REQUIRED, "Authentication failed: no credentials available")
        env = self.config.auth_env
        if params.get("methodId") == "reference-env" and env and os.environ.get(env):
            self.authenticated = True
            return {}
        answer = await super()._authenticate(params)  # reference-login, or the error
        self.authenticated = "authenticate-no-effect" not in self.config.quirks
        return answer

    async def _logout(self, params: dict[str, Any]) -> dict[str, Any]:
        # Signed out: the terminal login's mark goes, and session methods need a sign-in again.
        (self.config.state_dir / LOGGED_IN).unlink(missing_ok=True)
        self.authenticated = not self.config.require_auth
        return {}

    # -- set-up and restore ----------------------------------------------------------------------------------------
    def _mcp_server(self, server: Any) -> dict[str, Any]:
        kept = super()._mcp_server(server)
        if self.config.leaky_mcp:  # the fault: the values kept too, and said by /mcp
            kept["values"] = [p.get("value") for p in env_or_headers(server)]
        return kept

    def _directories(self, params: dict[str, Any]) -> list[str]:
        if params.get("additionalDirectories") and "refuse-additional-directories" in self.config.quirks:
            raise RpcError(INVALID_PARAMS, "Invalid params: additionalDirectories is not supported")
        return super()._directories(params)

    def _answer(self, session: Session, answer: dict[str, Any]) -> dict[str, Any]:
        answer = super()._answer(session, answer)
        if "bad-current-value" in self.config.quirks:
            for option in answer.get("configOptions") or []:
                if option["id"] == "effort":
                    option["currentValue"] = "extreme"  # offered: low, medium, high
        return answer

    def _stored(self, session_id: str) -> Session | None:
        session = super()._stored(session_id)
        if session is not None:
            if self.config.forget_config:
                session.options = SessionOptions()
            session.options.dropped = self.config.drop_after_restart  # restored by a process that did not create it
        return session

    async def _load(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._restore(params)
        if self.config.late_replay:  # the fault: the answer first, the history after it
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
            await self.update(session, update, record=False)

    async def _resume(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._restore(params)
        if self.config.replay_on_resume:  # a fault: resume must not replay
            await self._replay(session)
        return self._answer(session, {})

    # -- the rest of a session's life ------------------------------------------------------------------------------
    async def _list(self, params: dict[str, Any]) -> dict[str, Any]:
        if "list-ignores-cwd" in self.config.quirks:
            params = {**params, "cwd": None}
        return await super()._list(params)

    async def _close(self, params: dict[str, Any]) -> dict[str, Any]:
        if "close-keeps-turn" in self.config.quirks:  # forgotten, its turn left running
            self.sessions.pop(self._existing(params).session_id, None)
            return {}
        return await super()._close(params)

    async def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        sid = params.get("sessionId")
        if "delete-unknown-errors" in self.config.quirks and isinstance(sid, str) and not self._known(sid):
            raise RpcError(RESOURCE_NOT_FOUND, f"Resource not found: session {sid}")
        return await super()._delete(params)

    async def _set_config_option(self, params: dict[str, Any]) -> dict[str, Any]:
        if "accept-any-value" in self.config.quirks:  # says yes, changes nothing
            return {"configOptions": self.catalogue.config_options(self._live_session(params).options)}
        answer = await super()._set_config_option(params)
        if "partial-config-answer" in self.config.quirks:
            option_id = str(params.get("configId"))
            answer["configOptions"] = [o for o in answer["configOptions"] if o["id"] == option_id]
        return answer

    # -- a prompt turn ---------------------------------------------------------------------------------------------
    def _prompt_blocks(self, params: dict[str, Any]) -> list[Any]:
        prompt = super()._prompt_blocks(params)
        kinds = {b.get("type") for b in prompt if isinstance(b, dict)}
        for quirk, kind in REFUSED_BLOCKS.items():
            if quirk in self.config.quirks and (kind in kinds or (kind == "image" and "audio" in kinds)):
                raise RpcError(INVALID_PARAMS, f"Invalid params: {kind} content is not supported")
        if "refuse-meta" in self.config.quirks and "_meta" in params:
            raise RpcError(INVALID_PARAMS, "Invalid params: unexpected field _meta")
        return prompt

    async def _turn(self, session: Session, text: str) -> str:
        stop = await self._faulty_turn(session, text)
        if stop == "end_turn" and self.config.bad_stop_reason:
            return "done"  # a fault: not a StopReason of ACP v1
        return stop

    async def _faulty_turn(self, session: Session, text: str) -> str:
        if self.config.brief_turns:  # a conformant agent whose turns end before a client can cancel them
            await self.message(session, "done")
            return "end_turn"
        stop = await self._every_turn(session)
        if stop is not None:
            return stop
        if not text.startswith("/"):
            return await super()._turn(session, text)
        stop = await run_command(self, session, text)
        if stop is not None:
            return stop
        return "cancelled" if session.cancel.is_set() else "end_turn"

    async def _every_turn(self, session: Session) -> str | None:
        """What the turn flags add to every turn before the prompt is answered; a stop reason if it ends there."""
        cfg = self.config
        for _ in range(cfg.noise):
            self._raw(b"reference-agent noise: this line is not JSON\n")
        if "bad-utf8" in cfg.quirks:  # a message in Latin-1, as a careless encoder writes it
            self._raw(b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"'
                      + session.session_id.encode() + b'","update":{"sessionUpdate":"agent_message_chunk",'
                      b'"content":{"type":"text","text":"caf\xe9 "}}}}\n')
        if cfg.tool_calls:
            await tool_call(self, session, "ls", "README.md")
        if cfg.permission:
            outcome = await ask_permission(self, session)
            if session.cancel.is_set() or outcome == {"outcome": "cancelled"}:
                return "cancelled"
            await self.message(session, f"permission: {orjson.dumps(outcome).decode()}")
        if cfg.bad_update:  # a fault: a content block without its type
            await self.update(session, {"sessionUpdate": "agent_message_chunk", "content": {"text": "untyped"}})
        if cfg.huge_line:
            await self.message(session, "x" * cfg.huge_line)
        for i in range(cfg.stream):
            await self.message(session, f"chunk {i} ")
            if session.cancel.is_set():
                return "cancelled"
        return None
