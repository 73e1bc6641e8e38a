"""A session's configuration at run time: what its agent offers, what its user chose, and the agent kept in step
with the choices — a change applied when asked, every choice re-applied after a restore, the agent's own changes
followed (the rules are `acp.session_config`'s; this room performs them), all of it stored with the session and
announced as `session_config` events.

Where it enters: `observe` (the agent's updates, from the launcher's intake, on the read loop), `apply` (a
frontend's change), `reapply` (the launcher, after every session set-up). Where it leaves: the agent (the set
calls), the store (`configs`), the journal (`session_config`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from acp import mcp
from acp.client import AcpClient
from acp.errors import RpcError, TransportError
from acp.models import AgentCapabilities
from acp.session_config import (
    MODE,
    MODEL,
    Apply,
    Call,
    Choice,
    ConfigOffer,
    Done,
    ReapplyAttempt,
    Reason,
    Refused,
    adopt,
    next_step,
    resolve,
    shown,
)

from ..errors import agent_failed, config_refused, log_fault
from ..store import ConfigRow, SessionRow, StoreBase
from .workspace import Unfit
from .writer import SessionWriter

log = logging.getLogger(__name__)

# The updates that change a session's configuration; every other kind passes by untouched.
WATCHED = frozenset({"config_option_update", "current_mode_update", "available_commands_update", "usage_update"})
OFFER_KINDS = frozenset({"config_option_update", "current_mode_update"})


@dataclass
class SessionConfig:
    """One session's configuration in memory: a live session's (kept current), or one read to answer a call."""

    offer: ConfigOffer = field(default_factory=ConfigOffer)
    chosen: dict[str, Choice] = field(default_factory=dict)
    unapplied: list[dict[str, Any]] = field(default_factory=list)  # findings of the last (re-)apply, as shown
    commands: list[Any] | None = None
    usage: dict[str, Any] | None = None
    capabilities: dict[str, Any] | None = None  # of the agent's last initialize: {"mcp": [...], "additional_...": b}
    mcp_servers: list[mcp.StdioServer | mcp.WebServer] = field(default_factory=list)  # secrets included
    additional_directories: list[str] = field(default_factory=list)
    # Sign-in: what the agent asked for when it answered auth_required ({"methods": [...], "reason": ...}; None when
    # it asks nothing), and the `agent` method the owner chose (sent as `authenticate` at every launch). Kept with the
    # capabilities (no column of their own); the values given for an `env_var` method are in `sign_in.SignInSecrets`.
    auth: dict[str, Any] | None = None
    auth_method: str | None = None
    agent_info: dict[str, Any] | None = None  # the agent's own name and version (its last initialize's agentInfo)
    sign_in_values: list[str] = field(default_factory=list)  # this launch's: scrubbed from what the agent says
    profile_secrets: list[str] = field(default_factory=list)  # its profile's env values (API keys): likewise
    applying: bool = False  # a set call of the gateway's is out: what changes meanwhile is its doing (O2)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _view: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: ConfigRow | None) -> SessionConfig:
        if row is None:
            return cls()
        chosen = {str(k): c for k, v in row.chosen.items() if (c := Choice.from_json(v)) is not None}
        capabilities = dict(row.capabilities) if isinstance(row.capabilities, dict) else None
        auth = capabilities.pop("auth", None) if capabilities is not None else None
        auth_method = capabilities.pop("auth_method", None) if capabilities is not None else None
        agent_info = capabilities.pop("agent_info", None) if capabilities is not None else None
        return cls(ConfigOffer.from_json(row.offer), chosen, [u for u in row.unapplied if isinstance(u, dict)],
                   row.commands, row.usage, capabilities, mcp.from_wire(row.mcp_servers),
                   [d for d in row.additional_directories if isinstance(d, str)],
                   auth=auth if isinstance(auth, dict) else None,
                   auth_method=auth_method if isinstance(auth_method, str) else None,
                   agent_info=agent_info if isinstance(agent_info, dict) else None)

    def columns(self, *names: str) -> dict[str, Any]:
        """Store columns of this configuration (all of them without `names`)."""
        every: dict[str, Any] = {
            "offer": self.offer.to_json(), "chosen": {k: c.to_json() for k, c in self.chosen.items()},
            "unapplied": self.unapplied, "commands": self.commands, "usage": self.usage,
            "capabilities": self._capabilities_column(), "mcp_servers": [mcp.wire(s) for s in self.mcp_servers],
            "additional_directories": self.additional_directories}
        return {k: every[k] for k in names} if names else every

    def _capabilities_column(self) -> dict[str, Any] | None:
        extra = {k: v for k, v in (("auth", self.auth), ("auth_method", self.auth_method),
                                   ("agent_info", self.agent_info)) if v is not None}
        if self.capabilities is None and not extra:
            return None
        return {**(self.capabilities or {}), **extra}

    def changed(self) -> None:
        self._view = None

    def settings(self) -> dict[str, Any]:
        """What a `session_config` event carries: the options and the choices, without the heavier parts."""
        return {"options": self.offer.view(), "modes": self.offer.modes, "models": self.offer.models,
                "chosen": {k: {"value": c.value, "by": c.by} for k, c in self.chosen.items()},
                "unapplied": self.unapplied, "auth": self.auth,
                "can_fork": bool((self.capabilities or {}).get("fork")), "agent_info": self.agent_info}

    def view(self) -> dict[str, Any]:
        """The `config` of a session view (made once per change: a live session's status is answered from it)."""
        if self._view is None:
            self._view = {**self.settings(), "commands": self.commands or [], "usage": self.usage,
                          "mcp_servers": [mcp.shown(s) for s in self.mcp_servers],
                          "additional_directories": list(self.additional_directories)}
        return self._view

    def secrets(self) -> list[str]:
        return [*mcp.secrets(self.mcp_servers), *self.sign_in_values, *self.profile_secrets]

    def scrubber(self) -> mcp.Scrubber:
        return mcp.Scrubber(self.secrets())


def agent_said(err: RpcError) -> str:
    """An agent's error in words: its message, and its `data` when the message alone says little (a bare
    "Internal error" with the reason in `data.details`, as gemini-cli answers)."""
    if err.data is None:
        return err.message
    detail = (err.data.get("details") or err.data.get("message")) if isinstance(err.data, dict) else None
    return f"{err.message}: {detail if isinstance(detail, str) else orjson.dumps(err.data).decode()[:300]}"


def capabilities_json(caps: AgentCapabilities) -> dict[str, Any]:
    return {"mcp": sorted(caps.mcp_transports), "additional_directories": caps.takes_additional_directories,
            "fork": caps.can_fork}


def starting_choices(config: Mapping[str, Any], by: str) -> dict[str, Choice]:
    """Choices given at start (or by a profile): `mode` and `model` name those categories (S4 follows them to
    whatever option an agent gives them)."""
    return {key: Choice(value, key if key in (MODE, MODEL) else None, by) for key, value in config.items()}


class ConfigKeeper:
    def __init__(self, store: StoreBase, writer: SessionWriter, call_timeout: float | None) -> None:
        self.store = store
        self.writer = writer
        self.call_timeout = call_timeout
        self._flushing: dict[str, asyncio.Task[None]] = {}
        self._dirty: dict[str, tuple[SessionConfig, set[str]]] = {}

    # -- the agent's own updates (on the read loop: no await) -----------------------------------------------------
    def observe(self, row: SessionRow, config: SessionConfig, update: Mapping[str, Any], replay: bool) -> None:
        kind = update.get("sessionUpdate")
        if kind == "available_commands_update":
            commands = update.get("availableCommands")
            if isinstance(commands, list):
                config.commands = commands
                self._keep(row, config, "commands")
        elif kind == "usage_update":
            config.usage = {k: v for k, v in update.items() if k != "sessionUpdate"}
            self._keep(row, config, "usage")
        elif kind in OFFER_KINDS and not replay:  # a replay repeats the past; the load's answer is the present
            before = config.offer
            config.offer = before.with_update(update)
            if config.offer == before:
                return
            if config.applying:  # the consequence of the gateway's own call, which announces the outcome
                self._keep(row, config, "offer")
                return
            config.chosen = adopt(config.chosen, before, config.offer)  # O1: the session's choice now
            self._keep(row, config, "offer", "chosen")
            self.writer.enqueue(row, "session_config", {"cause": "agent", **config.settings()})

    def _keep(self, row: SessionRow, config: SessionConfig, *columns: str) -> None:
        """Store these columns soon: whatever else changes meanwhile goes in the same write."""
        config.changed()
        _, dirty = self._dirty.get(row.id, (config, set()))
        self._dirty[row.id] = (config, dirty | set(columns))  # this session's configuration now (a relaunch makes one)
        if row.id not in self._flushing:
            self._flushing[row.id] = asyncio.ensure_future(self._flush(row.id))

    async def _flush(self, session_id: str) -> None:
        try:
            while session_id in self._dirty:
                config, dirty = self._dirty.pop(session_id)
                try:
                    await self.store.configs.save(session_id, **config.columns(*dirty))
                except Exception as exc:  # the next change writes it again; the live view is current anyway
                    log_fault(log, f"session {session_id}: configuration not stored", exc)
        finally:
            self._flushing.pop(session_id, None)

    async def close(self) -> None:
        """Every configuration change observed so far is stored."""
        for task in list(self._flushing.values()):
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    # -- a frontend's change --------------------------------------------------------------------------------------
    @staticmethod
    def target(session_id: str, config: SessionConfig, agent: str, option_id: str, value: Any, *,
               category: str | None = None) -> Call:
        """The call that sets one option (or, with a `category`, the mode or the model, whichever option carries
        it) by what the agent offers: refused as `-32017`, naming what is offered (N1-N3)."""
        offer = config.offer
        if category is not None:
            option = offer.of_category(category)
            if option is None:
                raise config_refused(session_id, category, value, Reason.OPTION_NOT_OFFERED,
                                     f"agent {agent!r} offers no {category} option for session {session_id}",
                                     [o.id for o in offer.options()])
            option_id = option.id
        call = resolve(offer, option_id, value)
        if isinstance(call, Refused):
            raise config_refused(session_id, option_id, value, call.reason, f"session {session_id}: {call.message}",
                                 list(call.offered))
        return call

    async def apply(self, row: SessionRow, config: SessionConfig, client: AcpClient, acp_session_id: str,
                    agent: str, option_id: str, value: Any, *, category: str | None = None) -> None:
        """Set one option (or the mode or model) on the live agent and make it a choice; refused up front
        (`target`), or with the agent's own error."""
        async with config.lock:
            target = self.target(row.id, config, agent, option_id, value, category=category)
            option_id = target.option_id if category is not None else option_id
            try:
                answer = await self._send(config, client, acp_session_id, target)
            except RpcError as err:
                said = mcp.scrub(agent_said(err), config.secrets())
                raise config_refused(row.id, option_id, value, Reason.AGENT_REFUSED,
                                     f"agent {agent!r} of session {row.id} refused {option_id} = "
                                     f"{shown(value)}: {said}",
                                     [], {"code": err.code, "message": said}) from None
            except TransportError as exc:
                raise agent_failed(row.id, agent, f"agent {agent!r} of session {row.id} did not answer "
                                   f"{target.via.value} ({exc}); resume the session and try again", None,
                                   True) from None
            option = config.offer.option(target.option_id)
            config.offer = config.offer.after(target, answer)  # with what the agent said during the call
            config.chosen[option_id] = Choice(value, option.category if option else None, "user")
            config.unapplied = [u for u in config.unapplied if u.get("id") != option_id]
            config.changed()
            await self.store.configs.save(row.id, **config.columns("offer", "chosen", "unapplied"))
            await self.writer.publish(row, "session_config", {"cause": "set", **config.settings()})

    async def _send(self, config: SessionConfig, client: AcpClient, acp_session_id: str, call: Call) -> Any:
        config.applying = True
        try:
            return await client.request(call.via.value, call.params(acp_session_id), timeout=self.call_timeout)
        finally:
            config.applying = False

    # -- after every session set-up ------------------------------------------------------------------------------
    async def reapply(self, row: SessionRow, config: SessionConfig, client: AcpClient, acp_session_id: str,
                      found: Sequence[dict[str, Any]], cause: str) -> None:
        """Bring the agent to the session's choices (A1-A5), one call at a time; what cannot be done is recorded
        with `found` (what the set-up already could not give) — never a failed restore. Then the configuration is
        stored and announced, with a `session_message` when something could not be re-applied."""
        async with config.lock:
            attempts: list[ReapplyAttempt] = []
            while True:
                step = next_step(config.chosen, config.offer, attempts)
                if isinstance(step, Done):
                    break
                assert isinstance(step, Apply)
                try:
                    answer = await self._send(config, client, acp_session_id, step.call)
                except (RpcError, TransportError) as exc:
                    text = agent_said(exc) if isinstance(exc, RpcError) else str(exc)
                    attempts.append(ReapplyAttempt(step.choice_id, step.call, mcp.scrub(text, config.secrets())))
                    if isinstance(exc, TransportError) and not client.alive:
                        break  # the agent is gone: the launch sees it, and says so
                    continue
                attempts.append(ReapplyAttempt(step.choice_id, step.call))
                config.offer = config.offer.after(step.call, answer)
            done = next_step(config.chosen, config.offer, attempts)
            findings = done.findings if isinstance(done, Done) else ()
            config.unapplied = [*found, *(f.to_json() for f in findings)]
            config.changed()
            await self.store.configs.save(row.id, **config.columns())
            await self.writer.publish(row, "session_config", {"cause": cause, **config.settings()})
            applied = [f"{a.choice_id} = {shown(a.call.value)}" for a in attempts if a.error is None]
            if applied:  # what the agent did not have, and was given
                what = "Chosen for this session and set on its agent" if cause == "launch" else \
                    "Set again on the agent (it had not kept them)"
                await self.writer.message(row, "info", f"{what}: {', '.join(applied)}.")
            if config.unapplied:
                listed = "; ".join(u["message"] for u in config.unapplied)
                again = "" if cause == "launch" else " again"
                await self.writer.message(row, "warning", f"Not everything chosen for this session could be given to "
                                          f"its agent{again}: {listed}.")

    async def forget(self, row: SessionRow, config: SessionConfig, option_id: str) -> None:
        """A choice given up: not re-applied any more, nor listed as not applied."""
        async with config.lock:
            if option_id not in config.chosen and not any(u.get("id") == option_id for u in config.unapplied):
                return
            config.chosen.pop(option_id, None)
            config.unapplied = [u for u in config.unapplied if u.get("id") != option_id]
            config.changed()
            await self.store.configs.save(row.id, **config.columns("chosen", "unapplied"))
            await self.writer.publish(row, "session_config", {"cause": "set", **config.settings()})

    def drop(self, session_id: str) -> None:
        """The session is gone: nothing of it is written any more."""
        self._dirty.pop(session_id, None)
        task = self._flushing.pop(session_id, None)
        if task is not None:
            task.cancel()


async def stored(store: StoreBase, session_id: str) -> SessionConfig:
    return SessionConfig.from_row(await store.configs.get(session_id))


def setup_plan(config: SessionConfig, caps: AgentCapabilities, unfit: Callable[[str], Unfit | None]) \
        -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """What a session set-up sends (ACP wants the MCP servers and directories again on every load and resume): the
    servers of types the agent takes now, the directories that still pass the workspace rules (`unfit`: a directory
    -> why it no longer may be used, or None; `workspace.unfit`) if the agent takes directories; and a finding for
    each left out."""
    transports = caps.mcp_transports
    servers, found = [], []
    for server in config.mcp_servers:
        if server.type in transports:
            servers.append(mcp.wire(server))
        else:
            found.append({"kind": "mcp_server", "id": server.name, "value": server.type, "reason": "not_advertised",
                          "message": f"MCP server {server.name!r} was not given to the agent: it does not take "
                                     f"MCP servers over {server.type} (mcpCapabilities)",
                          "offered": sorted(transports)})
    directories: list[str] = []
    for directory in config.additional_directories:
        refused = unfit(directory)
        why = None if refused is None else refused.message
        if not caps.takes_additional_directories:
            why = "the agent does not take additional directories (sessionCapabilities.additionalDirectories)"
        if why is None:
            directories.append(directory)
        else:
            found.append({"kind": "directory", "id": directory, "value": directory, "reason": "refused",
                          "message": f"directory {directory} was not given to the agent: {why}", "offered": []})
    return servers, directories, found
