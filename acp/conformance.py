"""The conformance checker behind `acp-gateway check`: requirements with stable ids, tiers and citations.

Modelled on the ACP test-compatibility kit: every check runs against its own fresh agent process
(two processes where a session must survive a restart), ends in a verdict with one line of
evidence, and keeps the transcript of what was said. Every message the agent sends is validated
against the ACP v1 JSON Schema. Beyond the kit, the checks cover what a gateway needs across an
agent restart: load (history replayed before the answer) and resume (no replay, usable after) in
a new process, and `-32002` for unknown sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .client import AcpClient, ClientOptions
from .errors import AUTH_REQUIRED, RESOURCE_NOT_FOUND, AcpError, RpcError
from .models import STOP_REASONS
from .schema_check import Violation, acp_v1_schema

SPEC = "https://agentclientprotocol.com/protocol"
CANCEL_GRACE = 5.0


class Tier(StrEnum):
    MANDATORY = "mandatory"  # the spec's MUSTs
    CAPABILITY = "capability"  # only when advertised; then it must work
    ADVISORY = "advisory"  # SHOULDs: reported, never fatal
    INFORMATIONAL = "informational"  # observed, never asserted


class Result(StrEnum):
    PASS = "pass"
    FAIL = "fail"  # the agent broke a rule: evidence and citation
    BLOCKED = "blocked"  # a prerequisite failed (authentication, a failing turn): named, with what would unblock it
    INCONCLUSIVE = "inconclusive"  # the observation could not decide (a turn ended before a cancel could reach it)
    SKIP = "skip"  # not advertised, not applicable
    INFO = "info"


# The verdicts that say "could not be checked here", as opposed to "not conformant".
UNDECIDED = (Result.BLOCKED, Result.INCONCLUSIVE)


class CheckFailed(Exception):
    pass


class CheckSkipped(Exception):
    pass


class CheckBlocked(Exception):
    """A prerequisite failed: not the agent's fault as far as this check can tell."""


class CheckInconclusive(Exception):
    pass


def blocked_by_error(err: RpcError, doing: str) -> CheckBlocked | None:
    """The errors that block a check instead of failing it: authentication that could not be done here, and a turn
    the agent could not run (its model unreachable or unconfigured)."""
    if err.code == AUTH_REQUIRED:
        return CheckBlocked(f"{doing} needs authentication ({err.message}) and no credentials worked here: give the "
                            "agent its credentials (its API key in the environment, or --agent with a profile whose "
                            "env sets them) and run again")
    if doing == "a prompt turn":
        return CheckBlocked(f"a prompt turn failed ({err.code} {err.message}): the model behind the agent may be "
                            "unreachable or unconfigured; make a turn work, then run again")
    return None


@dataclass
class Probe:
    """One agent process under test, with everything it said."""

    client: AcpClient
    started: float
    transcript: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    requests_in: list[dict[str, Any]] = field(default_factory=list)
    _answering: dict[Any, str] = field(default_factory=dict)
    init: dict[str, Any] | None = None
    authenticated: bool = False
    permission_asked: asyncio.Event = field(default_factory=asyncio.Event)
    first_update: asyncio.Event = field(default_factory=asyncio.Event)

    def observe(self, direction: str, msg: dict[str, Any]) -> None:
        self.transcript.append({"t": round(time.monotonic() - self.started, 4), "dir": direction,
                                "msg": _clip(msg)})
        if direction == "out":
            if "method" in msg and "id" in msg:
                self._answering[msg["id"]] = msg["method"]
            return
        if "method" in msg and "id" in msg:
            self.requests_in.append(msg)
        answered = self._answering.pop(msg.get("id"), None) if "method" not in msg else None
        violation = acp_v1_schema().check_from_agent(msg, answered)
        if violation is not None:
            self.violations.append(violation)

    async def call(self, method: str, params: dict[str, Any], timeout: float = 15.0) -> Any:
        try:
            return await self.client.request(method, params, timeout=timeout)
        except RpcError as err:
            if method.startswith("session/") and await self.authenticate_if_asked(err):
                return await self.client.request(method, params, timeout=timeout)
            raise

    async def initialize(self, version: int = 1) -> dict[str, Any]:
        try:
            result = await self.call("initialize", {
                "protocolVersion": version,
                "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": False},
                "clientInfo": {"name": "acp-gateway-check", "version": "0.1.0"}})
        except RpcError as err:
            raise CheckFailed(f"initialize answered an error: {err.message} ({err.code})") from None
        if not isinstance(result, dict):
            raise CheckFailed(f"initialize answered {result!r}")
        self.init = result
        return result

    async def authenticate_if_asked(self, err: RpcError) -> bool:
        """On -32000, authenticate once with an advertised method the agent handles itself (no credentials
        are ever invented). True when it worked and the call should be retried."""
        if err.code != -32000 or self.authenticated:
            return False
        self.authenticated = True
        for method in (self.init or {}).get("authMethods") or []:
            if isinstance(method, dict) and method.get("type", "agent") == "agent" and method.get("id"):
                try:
                    await self.call("authenticate", {"methodId": method["id"]})
                    return True
                except RpcError:
                    return False
        return False

    async def new_session(self, cwd: str) -> str:
        try:
            try:
                result = await self.call("session/new", {"cwd": cwd, "mcpServers": []})
            except RpcError as err:
                if not await self.authenticate_if_asked(err):
                    raise
                result = await self.call("session/new", {"cwd": cwd, "mcpServers": []})
        except RpcError as err:
            raise blocked_by_error(err, "session/new") or CheckFailed(
                f"session/new answered an error: {err.message} ({err.code})") from None
        sid = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(sid, str) or not sid:
            raise CheckFailed(f"session/new answered no sessionId: {result!r:.200}")
        return sid

    async def prompt(self, sid: str, text: str, timeout: float = 30.0) -> dict[str, Any]:
        try:
            result = await self.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
                                     timeout)
        except RpcError as err:
            raise blocked_by_error(err, "a prompt turn") or err from None
        if not isinstance(result, dict):
            raise CheckFailed(f"session/prompt answered {result!r:.200}")
        return result

    def agent_text(self, updates: Sequence[dict[str, Any]] | None = None) -> str:
        return "".join(_chunk_text(u, "agent_message_chunk") for u in (self.updates if updates is None else updates))

    @property
    def stdout_noise(self) -> int:
        stats = self.client.conn.stats
        return stats.non_json + stats.non_jsonrpc


def _chunk_text(params: dict[str, Any], kind: str) -> str:
    update = params.get("update") or {}
    content = update.get("content") if update.get("sessionUpdate") == kind else None
    return str(content.get("text", "")) if isinstance(content, dict) else ""


def _clip(value: Any, limit: int = 2000) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"...[{len(value) - limit} more]"
    if isinstance(value, dict):
        return {k: _clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v, limit) for v in value[:200]]
    return value


CheckFn = Callable[["CheckContext"], Awaitable[str]]


@dataclass(frozen=True)
class Check:
    id: str
    tier: Tier
    title: str
    citation: str
    fn: CheckFn
    needs: str | None = None  # the capability that must be advertised: "loadSession", "resume", "list", "close"


@dataclass
class CheckResult:
    check: Check
    result: Result
    evidence: str
    transcript: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def fatal(self) -> bool:
        return self.result is Result.FAIL and self.check.tier in (Tier.MANDATORY, Tier.CAPABILITY)

    def to_json(self, with_transcript: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.check.id, "tier": self.check.tier.value, "title": self.check.title,
                               "result": self.result.value, "evidence": self.evidence,
                               "citation": self.check.citation, "seconds": round(self.seconds, 3)}
        if self.violations:
            out["schema_violations"] = self.violations
        if with_transcript:
            out["transcript"] = self.transcript
        return out


class CheckContext:
    def __init__(self, argv: Sequence[str], workdir: str, env: dict[str, str] | None, caps: dict[str, Any]) -> None:
        self.argv = list(argv)
        self.workdir = workdir
        self.env = env
        self.caps = caps  # what the agent advertised to a first initialize
        self.probes: list[Probe] = []
        self.extra_violations: list[Violation] = []

    async def probe(self, on_permission: Any = None) -> Probe:
        probe_ref: dict[str, Probe] = {}

        def on_update(params: dict[str, Any], replay: bool) -> None:
            probe = probe_ref["p"]
            probe.updates.append(params)
            probe.first_update.set()

        async def hold_permission(params: dict[str, Any]) -> dict[str, Any]:
            probe_ref["p"].permission_asked.set()
            if on_permission is not None:
                result: dict[str, Any] = await on_permission(params)
                return result
            await asyncio.Event().wait()  # until the client cancels it
            return {"outcome": "cancelled"}

        client = await AcpClient.launch(self.argv, cwd=self.workdir, env=self.env, on_update=on_update,
                                        on_permission=hold_permission,
                                        options=ClientOptions(request_timeout=20.0, stop_grace=1.0))
        probe = Probe(client, time.monotonic())
        probe_ref["p"] = probe
        client.conn.observers.append(probe.observe)
        self.probes.append(probe)
        return probe

    def advertised(self, capability: str) -> bool:
        agent_caps = self.caps.get("agentCapabilities") or {}
        if capability == "loadSession":
            return bool(agent_caps.get("loadSession"))
        return (agent_caps.get("sessionCapabilities") or {}).get(capability) is not None

    async def close(self) -> None:
        for probe in self.probes:
            with contextlib.suppress(Exception):
                await probe.client.stop()


CHECKS: list[Check] = []


def check(id_: str, tier: Tier, title: str, citation: str, needs: str | None = None) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS.append(Check(id_, tier, title, citation, fn, needs))
        return fn

    return register


# -- the checks ------------------------------------------------------------------------------------------

@check("ACP-INIT-001", Tier.MANDATORY, "initialize answers the requested protocol version it supports",
       f"{SPEC}/initialization: If the Agent supports the requested version, it MUST respond with the same version.")
async def init_version(ctx: CheckContext) -> str:
    p = await ctx.probe()
    result = await p.initialize(1)
    if result.get("protocolVersion") != 1:
        raise CheckFailed(f"asked for version 1, the agent answered {result.get('protocolVersion')!r}")
    return "protocolVersion 1 answered"


@check("ACP-INIT-002", Tier.MANDATORY, "an unsupported requested version gets the agent's latest, not an error",
       f"{SPEC}/initialization: Otherwise, the Agent MUST respond with the latest version it supports.")
async def init_unsupported(ctx: CheckContext) -> str:
    p = await ctx.probe()
    result = await p.initialize(65535)
    version = result.get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 < version < 65535:
        raise CheckFailed(f"asked for version 65535, the agent answered {version!r}")
    return f"asked 65535, answered its latest ({version})"


@check("ACP-STDOUT-001", Tier.MANDATORY, "stdout carries only ACP messages",
       f"{SPEC}/transports: The agent MUST NOT write anything to its stdout that is not a valid ACP message.")
async def stdout_hygiene(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    await p.prompt(sid, "Say hello in one word.")
    if p.stdout_noise:
        sample = p.client.conn.stats.samples[0] if p.client.conn.stats.samples else ""
        raise CheckFailed(f"{p.stdout_noise} stdout line(s) were not JSON-RPC, e.g. {sample[:120]!r}")
    return f"{p.client.conn.stats.frames} frames, no noise"


@check("ACP-SESSION-001", Tier.MANDATORY, "session/new answers a session id",
       f"{SPEC}/session-setup: The Agent MUST respond with a unique Session ID that identifies this conversation.")
async def session_new(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    a = await p.new_session(ctx.workdir)
    b = await p.new_session(ctx.workdir)
    if a == b:
        raise CheckFailed(f"two session/new calls answered the same id {a!r}")
    return f"sessionId {a!r}"


@check("ACP-PROMPT-001", Tier.MANDATORY, "a prompt turn ends with a valid stop reason",
       f"{SPEC}/prompt-turn#stop-reasons: When an Agent stops processing, it MUST respond with a StopReason.")
async def prompt_stop_reason(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    result = await p.prompt(sid, "Say hello in one word.")
    reason = result.get("stopReason")
    if reason not in STOP_REASONS:
        raise CheckFailed(f"stopReason {reason!r} is not one of {sorted(STOP_REASONS)}")
    return f"stopReason {reason!r} after {len(p.updates)} update(s)"


@check("ACP-UPDATE-001", Tier.MANDATORY, "session/update notifications are well formed and name the session",
       f"{SPEC}/prompt-turn#3-agent-reports-output: The Agent reports the model's output to the Client via "
       "session/update notifications.")
async def update_shapes(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    await p.prompt(sid, "Say hello in one word.")
    wrong = [u.get("sessionId") for u in p.updates if u.get("sessionId") != sid]
    if wrong:
        raise CheckFailed(f"updates named session(s) {sorted(set(map(str, wrong)))} instead of {sid!r}")
    bad = [v for v in p.violations if v.role == "notification session/update"]
    if bad:
        raise CheckFailed(str(bad[0]))
    if not p.updates:
        raise CheckSkipped("the turn sent no session/update to judge")
    return f"{len(p.updates)} update(s) valid"


async def _cancel_turn(ctx: CheckContext, text: str, wait_for: str) -> str:
    """Cancel a turn only while it demonstrably runs (an update came, or a permission is pending). A turn that
    ends as the cancel goes out, with no update after it, raced it: tried once more, then INCONCLUSIVE. A turn
    that went on after the cancel and ended otherwise than `cancelled` broke the rule."""
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    raced = ""
    for _attempt in range(2):
        waiter = p.permission_asked if wait_for == "permission" else p.first_update
        waiter.clear()
        turn = asyncio.ensure_future(p.prompt(sid, text, timeout=30))
        try:
            await asyncio.wait_for(asyncio.shield(waiter.wait()), 3.0)
        except TimeoutError:
            if wait_for == "permission":
                turn.cancel()
                raise CheckSkipped("the agent did not ask for permission, so a pending request could not be "
                                   "cancelled") from None
        if turn.done():  # over before the cancel could be sent: nothing to judge
            raced = f"the turn ended ({turn.result().get('stopReason')!r}) before session/cancel could be sent"
            continue
        updates_at_cancel = len(p.updates)
        await p.client.cancel(sid)
        try:
            result = await asyncio.wait_for(turn, CANCEL_GRACE)
        except TimeoutError:
            raise CheckFailed(f"the turn did not end within {CANCEL_GRACE:g} s of session/cancel") from None
        except RpcError as err:
            raise CheckFailed(f"the cancelled turn answered an error ({err.code} {err.message}) instead of "
                              "stopReason 'cancelled'") from None
        reason = result.get("stopReason")
        if reason == "cancelled":
            return "stopReason 'cancelled' after session/cancel"
        if len(p.updates) > updates_at_cancel:
            raise CheckFailed(f"the turn went on after session/cancel and ended with stopReason {reason!r}")
        raced = f"the turn ended ({reason!r}) as session/cancel was sent, with no update after it"
    raise CheckInconclusive(f"{raced}, twice: the agent's turns end too soon for a cancel to reach one; "
                            "give it a longer task to tell")


@check("ACP-CANCEL-001", Tier.MANDATORY, "session/cancel ends the turn with stopReason 'cancelled', not an error",
       f"{SPEC}/prompt-turn#cancellation: The Agent MUST respond to the original session/prompt request with the "
       "cancelled stop reason.")
async def cancel_turn(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "/hang Count slowly from one to one thousand, one number per line.", "update")


@check("ACP-CANCEL-002", Tier.MANDATORY, "cancel with a permission request pending ends the turn 'cancelled'",
       f"{SPEC}/prompt-turn#cancellation: The Client MUST respond to all pending session/request_permission requests "
       "with the cancelled outcome.")
async def cancel_with_permission(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "/permission Create a file named notes.txt containing 'hi' (ask first).",
                              "permission")


async def _session_from_earlier_process(ctx: CheckContext, word: str) -> tuple[str, str]:
    first = await ctx.probe()
    await first.initialize()
    sid = await first.new_session(ctx.workdir)
    text = f"Remember the word {word}."
    await first.prompt(sid, text)
    said = first.agent_text()
    await first.client.stop()  # closes stdin first: the agent must keep the session for the next process
    return sid, said


async def _settle(p: Probe, seconds: float = 0.5) -> None:
    await asyncio.sleep(seconds)  # late messages are a finding, so give them a moment to show


@check("ACP-LOAD-001", Tier.CAPABILITY, "session/load in a new process replays the history before answering",
       f"{SPEC}/session-setup#loading-sessions: The Agent MUST replay the entire conversation to the Client in the "
       "form of session/update notifications ... When all the conversation entries have been streamed to the "
       "Client, the Agent MUST respond to the original session/load request.", needs="loadSession")
async def load_replays(ctx: CheckContext) -> str:
    word = f"kiwi-{uuid.uuid4().hex[:6]}"
    sid, said = await _session_from_earlier_process(ctx, word)
    second = await ctx.probe()
    await second.initialize()
    try:
        await second.call("session/load", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        raise CheckFailed(f"session/load of {sid!r} answered {err.code} {err.message}") from None
    before = list(second.updates)
    await _settle(second)
    late = second.updates[len(before):]
    users = "".join(_chunk_text(u, "user_message_chunk") for u in before)
    if late:
        raise CheckFailed(f"{len(late)} update(s) arrived after the session/load answer (replay must come first)")
    if not before:
        raise CheckFailed("session/load answered without replaying any history")
    if word not in users:
        raise CheckFailed(f"the replay did not contain the user's message (looked for {word!r})")
    if said and said not in second.agent_text(before):
        raise CheckFailed("the replayed agent messages differ from what the agent said in the first process")
    return f"{len(before)} update(s) replayed before the answer, matching the first process"


@check("ACP-LOAD-002", Tier.CAPABILITY, "a loaded session is usable: it can be prompted",
       f"{SPEC}/session-setup#loading-sessions: the Client can continue the conversation.", needs="loadSession")
async def load_usable(ctx: CheckContext) -> str:
    sid, _ = await _session_from_earlier_process(ctx, "plum")
    second = await ctx.probe()
    await second.initialize()
    try:
        await second.call("session/load", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
        result = await second.prompt(sid, "What word did I ask you to remember?")
    except RpcError as err:
        raise CheckFailed(f"after session/load: {err.code} {err.message}") from None
    return f"prompt after load ended {result.get('stopReason')!r}"


@check("ACP-RESUME-001", Tier.CAPABILITY, "session/resume in a new process answers without replay and is usable",
       f"{SPEC}/session-setup: session/resume resumes an existing session without returning previous messages "
       "(unlike session/load).", needs="resume")
async def resume_no_replay(ctx: CheckContext) -> str:
    sid, _ = await _session_from_earlier_process(ctx, "fig")
    second = await ctx.probe()
    await second.initialize()
    try:
        await second.call("session/resume", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        raise CheckFailed(f"session/resume of {sid!r} answered {err.code} {err.message}") from None
    await _settle(second)
    if second.updates:
        raise CheckFailed(f"session/resume replayed {len(second.updates)} update(s); resume must not replay")
    try:
        result = await second.prompt(sid, "What word did I ask you to remember?")
    except RpcError as err:
        raise CheckFailed(f"prompt after session/resume answered {err.code} {err.message}") from None
    return f"no replay; prompt after resume ended {result.get('stopReason')!r}"


async def _unknown(ctx: CheckContext, method: str) -> str:
    p = await ctx.probe()
    await p.initialize()
    unknown = f"acp-check-unknown-{uuid.uuid4().hex}"
    try:
        await p.call(method, {"sessionId": unknown, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        if err.code == AUTH_REQUIRED:  # it may not say anything of sessions before authentication
            raise blocked_by_error(err, method) or CheckBlocked(err.message) from None
        if err.code != RESOURCE_NOT_FOUND:
            raise CheckFailed(f"{method} of an unknown id answered {err.code} {err.message!r}, not -32002") from None
        return f"-32002 {err.message!r}"
    raise CheckFailed(f"{method} of an unknown id {unknown!r} succeeded")


@check("ACP-UNKNOWN-001", Tier.CAPABILITY, "session/load of an unknown id answers -32002 (resource not found)",
       f"{SPEC}/schema#errorcode: -32002 Resource not found.", needs="loadSession")
async def unknown_load(ctx: CheckContext) -> str:
    return await _unknown(ctx, "session/load")


@check("ACP-UNKNOWN-002", Tier.CAPABILITY, "session/resume of an unknown id answers -32002 (resource not found)",
       f"{SPEC}/schema#errorcode: -32002 Resource not found.", needs="resume")
async def unknown_resume(ctx: CheckContext) -> str:
    return await _unknown(ctx, "session/resume")


@check("ACP-CAPS-001", Tier.MANDATORY, "advertised methods are answered (no -32601 for what is advertised)",
       f"{SPEC}/initialization#agent-capabilities: capabilities advertise the methods the Agent supports.")
async def capabilities_consistent(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    unknown = f"acp-check-unknown-{uuid.uuid4().hex}"
    probes: dict[str, tuple[str, dict[str, Any]]] = {
        "loadSession": ("session/load", {"sessionId": unknown, "cwd": ctx.workdir, "mcpServers": []}),
        "resume": ("session/resume", {"sessionId": unknown, "cwd": ctx.workdir, "mcpServers": []}),
        "list": ("session/list", {}),
        "close": ("session/close", {"sessionId": sid}),
    }
    tried, broken = [], []
    for capability, (method, params) in probes.items():
        if not ctx.advertised(capability):
            continue
        tried.append(method)
        try:
            await p.call(method, params)
        except RpcError as err:
            if err.code == -32601:
                broken.append(method)
    if broken:
        raise CheckFailed(f"advertised but answered -32601 (method not found): {', '.join(broken)}")
    return f"answered: {', '.join(tried) or 'nothing optional advertised'}"


@check("ACP-LIST-001", Tier.CAPABILITY, "session/list lists a session that was created",
       f"{SPEC}/session-list: session/list returns the sessions the Agent knows.", needs="list")
async def list_sessions(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    await p.prompt(sid, "Say hello in one word.")
    seen: list[str] = []
    cursor = None
    for _ in range(50):
        try:
            result = await p.call("session/list", {"cwd": ctx.workdir, **({"cursor": cursor} if cursor else {})})
        except RpcError as err:
            raise CheckFailed(f"session/list answered {err.code} {err.message}") from None
        seen += [str(s.get("sessionId")) for s in result.get("sessions", []) if isinstance(s, dict)]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    if sid not in seen:
        raise CheckFailed(f"session {sid!r} is missing from session/list ({len(seen)} listed)")
    return f"{len(seen)} session(s) listed, including the new one"


@check("ACP-CLOSE-001", Tier.CAPABILITY, "session/close closes a session",
       f"{SPEC}/session-setup: session/close closes an active session.", needs="close")
async def close_session(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    try:
        await p.call("session/close", {"sessionId": sid})
    except RpcError as err:
        raise CheckFailed(f"session/close answered {err.code} {err.message}") from None
    return "closed"


@check("ACP-AUTH-001", Tier.MANDATORY, "an agent that requires authentication advertises how",
       f"{SPEC}/initialization: authMethods lists the authentication methods the Agent supports; -32000 means "
       "authentication is required.")
async def auth_required(ctx: CheckContext) -> str:
    p = await ctx.probe()
    init = await p.initialize()
    try:
        await p.call("session/new", {"cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        if err.code != -32000:
            raise CheckFailed(f"session/new answered {err.code} {err.message}") from None
        methods = init.get("authMethods") or []
        if not methods:
            raise CheckFailed("session/new requires authentication (-32000) but authMethods is empty") from None
        worked = await p.authenticate_if_asked(err)
        return (f"authentication required; {len(methods)} method(s) advertised; authenticate "
                + ("worked" if worked else "did not work without credentials"))
    return "no authentication required"


@check("ACP-CLIENT-001", Tier.MANDATORY, "the agent survives -32601 from the client for a method it does not have",
       "https://www.jsonrpc.org/specification#error_object: -32601 Method not found.")
async def unknown_client_method(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    sid = await p.new_session(ctx.workdir)
    try:
        result = await p.prompt(sid, "/call _acp_check/unknown_method")
    except RpcError as err:
        raise CheckFailed(f"the turn failed: {err.code} {err.message}") from None
    asked = [m["method"] for m in p.requests_in if m["method"] not in
             ("fs/read_text_file", "fs/write_text_file", "session/request_permission")]
    if not asked:
        raise CheckSkipped("the agent called no method the client lacks")
    return f"answered -32601 to {asked[0]!r}; the turn still ended {result.get('stopReason')!r}"


@check("ACP-SHUTDOWN-001", Tier.ADVISORY, "the agent exits when its stdin closes",
       f"{SPEC}/transports: The client closes the agent's stdin to end the connection; the agent SHOULD exit.")
async def shutdown_on_stdin_close(ctx: CheckContext) -> str:
    p = await ctx.probe()
    await p.initialize()
    with contextlib.suppress(Exception):
        p.client.process.stdin.close()
    try:
        rc = await asyncio.wait_for(p.client.process.wait(), 3.0)
    except TimeoutError:
        raise CheckFailed("still running 3 s after its stdin closed") from None
    return f"exited with status {rc}"


@check("ACP-INFO-001", Tier.INFORMATIONAL, "what the agent says about itself",
       f"{SPEC}/initialization: agentInfo, agentCapabilities and authMethods.")
async def agent_info(ctx: CheckContext) -> str:
    info = ctx.caps.get("agentInfo") or {}
    caps = ctx.caps.get("agentCapabilities") or {}
    flags = [c for c in ("loadSession", "resume", "list", "close") if ctx.advertised(c)]
    advertised = ", ".join(flags) or "no optional methods"
    prompt_caps = sorted(k for k, v in (caps.get("promptCapabilities") or {}).items() if v)
    name = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    return f"{name}; advertises {advertised}; prompt capabilities {prompt_caps}"


SCHEMA_CHECK = Check("ACP-SCHEMA-001", Tier.MANDATORY, "every message the agent sent matches the ACP v1 JSON Schema",
                     f"{SPEC}/schema: the ACP v1 JSON Schema (schema/v1/schema.json).", lambda ctx: _never())


async def _never() -> str:
    raise AssertionError("ACP-SCHEMA-001 is computed from every other check")


def all_checks() -> list[Check]:
    return [*CHECKS, SCHEMA_CHECK]


# -- running ------------------------------------------------------------------------------------------------

async def run_checks(argv: Sequence[str], *, only: Sequence[str] = (), env: dict[str, str] | None = None,
                     concurrency: int = 4, check_timeout: float = 60.0,
                     on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Every selected check, each against its own agent process; `on_result` hears of each as it ends."""
    workdir = tempfile.mkdtemp(prefix="acp-check-")
    try:
        return await _run(argv, workdir, only, env, concurrency, check_timeout, on_result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


async def _discover(argv: Sequence[str], workdir: str, env: dict[str, str] | None) -> dict[str, Any]:
    ctx = CheckContext(argv, workdir, env, {})
    try:
        p = await ctx.probe()
        return await p.initialize()
    except (AcpError, CheckFailed, TimeoutError):
        return {}
    finally:
        await ctx.close()


async def _run(argv: Sequence[str], workdir: str, only: Sequence[str], env: dict[str, str] | None,
               concurrency: int, check_timeout: float,
               on_result: Callable[[CheckResult], None] | None) -> list[CheckResult]:
    caps = await _discover(argv, workdir, env)
    selected = [c for c in CHECKS if not only or c.id in only]
    gate = asyncio.Semaphore(concurrency)
    all_violations: list[Violation] = []

    async def one(c: Check) -> CheckResult:
        async with gate:
            result = await _run_one(c, argv, workdir, env, caps, check_timeout, all_violations)
        if on_result is not None:
            on_result(result)
        return result

    results = list(await asyncio.gather(*(one(c) for c in selected)))
    if not only or SCHEMA_CHECK.id in only:
        if all_violations:
            first = all_violations[0]
            results.append(CheckResult(SCHEMA_CHECK, Result.FAIL, f"{len(all_violations)} violation(s); first: {first}",
                                       violations=[str(v) for v in all_violations[:50]]))
        else:
            results.append(CheckResult(SCHEMA_CHECK, Result.PASS, "every agent message matched the schema"))
        if on_result is not None:
            on_result(results[-1])
    return results


async def _run_one(c: Check, argv: Sequence[str], workdir: str, env: dict[str, str] | None, caps: dict[str, Any],
                   check_timeout: float, all_violations: list[Violation]) -> CheckResult:
    ctx = CheckContext(argv, os.path.join(workdir, c.id.lower()), env, caps)
    os.makedirs(ctx.workdir, exist_ok=True)
    started = time.monotonic()
    if c.needs and not ctx.advertised(c.needs):
        return CheckResult(c, Result.SKIP, f"{c.needs} is not advertised")
    try:
        evidence = await asyncio.wait_for(c.fn(ctx), check_timeout)
        result = Result.INFO if c.tier is Tier.INFORMATIONAL else Result.PASS
    except CheckFailed as exc:
        result, evidence = Result.FAIL, str(exc)
    except CheckSkipped as exc:
        result, evidence = Result.SKIP, str(exc)
    except CheckBlocked as exc:
        result, evidence = Result.BLOCKED, str(exc)
    except CheckInconclusive as exc:
        result, evidence = Result.INCONCLUSIVE, str(exc)
    except TimeoutError:
        result, evidence = Result.FAIL, f"no verdict within {check_timeout:g} s (the agent stopped answering)"
    except RpcError as err:
        blocked = blocked_by_error(err, "a session method")
        result, evidence = ((Result.BLOCKED, str(blocked)) if blocked is not None
                            else (Result.FAIL, f"unexpected error answer {err.code} {err.message}"))
    except AcpError as exc:
        result, evidence = Result.FAIL, f"transport: {exc}"
    finally:
        await ctx.close()
    violations = [v for p in ctx.probes for v in p.violations]
    all_violations.extend(violations)
    transcript = [dict(frame, process=i) for i, p in enumerate(ctx.probes) for frame in p.transcript]
    transcript.sort(key=lambda f: f["t"])
    return CheckResult(c, result, evidence, transcript, [str(v) for v in violations], time.monotonic() - started)


def render_table(results: Sequence[CheckResult], seconds: float | None = None) -> str:
    width = max((len(r.check.id) for r in results), default=10)
    lines = [f"{'check':{width}}  {'tier':13}  {'result':12}  evidence"]
    for r in results:
        lines.append(f"{r.check.id:{width}}  {r.check.tier.value:13}  {r.result.value.upper():12}  {r.evidence}")
    failed = [r for r in results if r.fatal]
    undecided = [r.check.id for r in results if r.result in UNDECIDED]
    counts = {res: sum(1 for r in results if r.result is res) for res in Result}
    lines.append("")
    lines.append(f"{counts[Result.PASS]} passed, {counts[Result.FAIL]} failed, {counts[Result.BLOCKED]} blocked, "
                 f"{counts[Result.INCONCLUSIVE]} inconclusive, {counts[Result.SKIP]} skipped, "
                 f"{counts[Result.INFO]} informational; "
                 + ("conformant" if not failed else f"NOT conformant ({', '.join(r.check.id for r in failed)})")
                 + (f"; could not be checked here: {', '.join(undecided)}" if undecided else "")
                 + (f"; {seconds:.1f} s" if seconds is not None else ""))
    return "\n".join(lines)


def report_json(argv: Sequence[str], results: Sequence[CheckResult], seconds: float | None = None) -> dict[str, Any]:
    return {
        "agent": list(argv),
        "schema": "ACP v1 (acp/schema/v1/schema.json)",
        "conformant": not any(r.fatal for r in results),
        "could_not_check": [r.check.id for r in results if r.result in UNDECIDED],
        "seconds": None if seconds is None else round(seconds, 3),
        "checks": [r.to_json(with_transcript=r.result is Result.FAIL) for r in results],
    }


def progress_line(result: CheckResult, done: int, total: int) -> str:
    """One line per check as it ends (stderr): an agent author sees where a slow run is."""
    return (f"[{done:>{len(str(total))}}/{total}] {result.result.value.upper():4} {result.check.id} "
            f"({result.seconds:.1f} s) {result.evidence[:100]}")


def report_junit(argv: Sequence[str], results: Sequence[CheckResult], seconds: float) -> bytes:
    """The report as JUnit XML (one testcase per check; FAIL of a mandatory or advertised-capability check is a
    failure, of an advisory one a testcase that passes with the finding in its output; SKIP is skipped), for
    the CI systems agent authors use."""
    suite = ET.Element("testsuite", name="acp-conformance", tests=str(len(results)),
                       failures=str(sum(1 for r in results if r.fatal)),
                       skipped=str(sum(1 for r in results if r.result is Result.SKIP or r.result in UNDECIDED)),
                       errors="0",
                       time=f"{seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="agent", value=" ".join(argv))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"acp.{r.check.tier.value}",
                             name=f"{r.check.id} {r.check.title}", time=f"{r.seconds:.3f}")
        if r.fatal:
            failure = ET.SubElement(case, "failure", message=r.evidence[:500], type=r.check.tier.value)
            failure.text = f"{r.evidence}\n{r.check.citation}" + "".join(f"\n{v}" for v in r.violations[:10])
        elif r.result is Result.SKIP or r.result in UNDECIDED:
            ET.SubElement(case, "skipped", message=f"{r.result.value.upper()}: {r.evidence[:500]}")
        ET.SubElement(case, "system-out").text = f"{r.result.value.upper()}: {r.evidence}"
    return bytes(ET.tostring(suite, encoding="utf-8", xml_declaration=True))
