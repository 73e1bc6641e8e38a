"""The conformance checks behind `acp-gateway check`: requirements with stable ids, tiers, citations and verdicts.

Modelled on the ACP Test Compatibility Kit (`acp-tck`; `Check.tck` names its overlapping requirement ids): each
check ends in a verdict that says whose fault it is (FAIL: the agent broke a rule; BLOCKED: a prerequisite failed
here; INCONCLUSIVE: the observation could not decide), with one line of evidence and the transcript of what was
said. Every message the agent sends is validated against the ACP v1 JSON Schema. Beyond the kit, the checks cover
what a gateway needs across an agent restart: load (history replayed before the answer) and resume (no replay,
usable after) in a new process, and `-32002` for unknown sessions. Running them is `run.py`; the
reports are `report.py`; what is said to the agent is `options.py`; the framework they are written in is
`framework.py`, and the checks covering the rest of the official kit are `kit.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ..errors import AUTH_REQUIRED, RESOURCE_NOT_FOUND, RpcError
from ..models import STOP_REASONS, conversation
from .framework import (
    CANCEL_GRACE,
    SPEC,
    Check,
    CheckBlocked,
    CheckContext,
    CheckFailed,
    CheckInconclusive,
    CheckSkipped,
    Result,
    Tier,
    _chunk_text,
    _never,
    _settle,
    blocked_by_error,
    check,
    initialized,
    session_of,
    shown,
    unknown_session_id,
)
from .options import CheckOptions, ClientOffer


@check("ACP-INIT-001", Tier.MANDATORY, "initialize answers the requested protocol version it supports",
       f"{SPEC}/initialization: If the Agent supports the requested version, it MUST respond with the same version.",
       fresh=True, tck=("ACP-INIT-001", "ACP-INIT-002"))
async def init_version(ctx: CheckContext) -> str:
    p = await ctx.probe()
    result = await p.initialize(1, judged=True)
    if result.get("protocolVersion") != 1:
        raise CheckFailed(f"asked for version 1, the agent answered {shown(result.get('protocolVersion'))}")
    return "protocolVersion 1 answered"


@check("ACP-INIT-002", Tier.MANDATORY, "an unsupported requested version gets the agent's latest, not an error",
       f"{SPEC}/initialization: Otherwise, the Agent MUST respond with the latest version it supports.",
       fresh=True, tck=("ACP-INIT-003",))
async def init_unsupported(ctx: CheckContext) -> str:
    p = await ctx.probe()
    result = await p.initialize(65535, judged=True)
    version = result.get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 < version < 65535:
        raise CheckFailed(f"asked for version 65535, the agent answered {shown(version)}")
    return f"asked 65535, answered its latest ({version})"


@check("ACP-STDOUT-001", Tier.MANDATORY, "stdout carries only ACP messages",
       f"{SPEC}/transports: The agent MUST NOT write anything to its stdout that is not a valid ACP message.",
       tck=("ACP-TRANSPORT-001",))
async def stdout_hygiene(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
    if p.stdout_noise:
        sample = p.client.conn.stats.samples[0] if p.client.conn.stats.samples else ""
        raise CheckFailed(f"{p.stdout_noise} stdout line(s) were not JSON-RPC, e.g. {shown(sample[:120])}")
    return f"{p.client.conn.stats.frames} frames, no noise"


@check("ACP-SESSION-001", Tier.MANDATORY, "session/new answers a session id",
       f"{SPEC}/session-setup: The Agent MUST respond with a unique Session ID that identifies this conversation.",
       tck=("ACP-SESSION-001", "ACP-SESSION-002"))
async def session_new(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    a = await p.new_session(ctx.workdir)
    b = await p.new_session(ctx.workdir)
    if a == b:
        raise CheckFailed(f"two session/new calls answered the same id {shown(a)}")
    return f"sessionId {shown(a)}"


@check("ACP-PROMPT-001", Tier.MANDATORY, "a prompt turn ends with a valid stop reason",
       f"{SPEC}/prompt-turn#stop-reasons: When an Agent stops processing, it MUST respond with a StopReason.",
       tck=("ACP-PROMPT-001",))
async def prompt_stop_reason(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    result = await p.prompt(sid, ctx.prompts.short)
    reason = result.get("stopReason")
    if reason not in STOP_REASONS:
        raise CheckFailed(f"stopReason {shown(reason)} is not one of: {', '.join(sorted(STOP_REASONS))}")
    return f"stopReason {shown(reason)} after {len(p.updates)} update(s)"


@check("ACP-UPDATE-001", Tier.MANDATORY, "session/update notifications are well formed and name the session",
       f"{SPEC}/prompt-turn#3-agent-reports-output: The Agent reports the model's output to the Client via "
       "session/update notifications.", tck=("ACP-PROMPT-002",))
async def update_shapes(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
    # A shared process may still report on an earlier check's session; an id it never created is the finding.
    wrong = [u.get("sessionId") for u in p.updates if u.get("sessionId") not in p.sessions]
    if wrong:
        raise CheckFailed(f"updates named session(s) {', '.join(sorted(set(map(str, wrong))))} "
                          f"instead of {shown(sid)}")
    bad = [v for v in p.violations if v.role == "notification session/update"]
    if bad:
        raise CheckFailed(str(bad[0]))
    if not p.updates:
        raise CheckSkipped("the turn sent no session/update to judge")
    return f"{len(p.updates)} update(s) valid"


async def _cancel_turn(ctx: CheckContext, wait_for: str, by: str = "session/cancel") -> str:
    """Cancel a turn only while it demonstrably runs (an update came and the turn goes on, or a permission request
    is pending). A turn that ends as the cancel goes out, with no update after it, raced it: tried once more with
    a longer task, then INCONCLUSIVE. A turn that went on after the cancel and ended otherwise than `cancelled`
    broke the rule, as does an update for the session after the `cancelled` answer."""
    p, sid = await session_of(ctx)
    raced = ""
    texts = [ctx.prompts.permission] * 2 if wait_for == "permission" else [ctx.prompts.long, ctx.prompts.longer]
    for text in texts:
        waiter = p.permission_asked if wait_for == "permission" else p.first_update
        waiter.clear()
        turn = asyncio.ensure_future(p.prompt(sid, text))
        seen = asyncio.ensure_future(waiter.wait())
        try:
            await asyncio.wait({turn, seen}, timeout=ctx.options.turn_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            seen.cancel()
        if not waiter.is_set() and not turn.done():
            turn.cancel()
            raise CheckFailed(f"no update and no answer within {ctx.options.turn_timeout:g} s of the prompt (raise "
                              "--turn-timeout if the agent is only slow)")
        if turn.done() and (turn.cancelled() or turn.exception() is not None):
            await turn  # a failing turn: BLOCKED (or its own verdict), as in every other check
        if not waiter.is_set():
            if wait_for == "permission":
                raise CheckSkipped("the agent asked no permission in the turn, so a pending request could not be "
                                   "cancelled (set [check] permission to a prompt that makes it ask)")
        if turn.done():  # over before the cancel could be sent: nothing to judge
            raced = f"the turn ended ({shown(turn.result().get('stopReason'))}) before {by} could be sent"
            continue
        updates_at_cancel = len(conversation(p.updates))
        closing: asyncio.Future[Any] | None = None
        if by == "session/cancel":
            await p.client.cancel(sid)
        else:  # session/close: "as if session/cancel was called", then the session is gone
            closing = asyncio.ensure_future(p.call(by, {"sessionId": sid}))
        try:
            result = await asyncio.wait_for(turn, CANCEL_GRACE)
        except TimeoutError:
            raise CheckFailed(f"the turn did not end within {CANCEL_GRACE:g} s of {by}") from None
        except RpcError as err:
            raise CheckFailed(f"the cancelled turn answered an error ({err.code} {err.message}) instead of "
                              "stopReason 'cancelled'") from None
        finally:
            if closing is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closing, CANCEL_GRACE)
        reason = result.get("stopReason")
        if reason == "cancelled":
            answered_at = len(p.updates)
            await _settle(p)
            late = [u for u in conversation(p.updates[answered_at:]) if u.get("sessionId") == sid]
            if late:
                raise CheckFailed(f"{len(late)} update(s) for the session came after the 'cancelled' answer; the "
                                  "agent must send them before it answers")
            return f"stopReason 'cancelled' after {by}, no update after the answer"
        if len(conversation(p.updates)) > updates_at_cancel:
            raise CheckFailed(f"the turn went on after {by} and ended with stopReason {shown(reason)}")
        raced = f"the turn ended ({shown(reason)}) as {by} was sent, with no update after it"
    raise CheckInconclusive(f"{raced}, twice (the second time with a longer task): the agent's turns end too soon "
                            "for a cancel to reach one; give it a longer task ([check] long and longer) to tell")


@check("ACP-CANCEL-001", Tier.MANDATORY, "session/cancel ends the turn with stopReason 'cancelled', not an error",
       f"{SPEC}/prompt-turn#cancellation: The Agent MUST respond to the original session/prompt request with the "
       "cancelled stop reason.", tck=("ACP-CANCEL-001", "ACP-CANCEL-002"))
async def cancel_turn(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "update")


@check("ACP-CANCEL-002", Tier.MANDATORY, "cancel with a permission request pending ends the turn 'cancelled'",
       f"{SPEC}/prompt-turn#cancellation: The Client MUST respond to all pending session/request_permission requests "
       "with the cancelled outcome.")
async def cancel_with_permission(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "permission")


@check("ACP-CLOSE-002", Tier.CAPABILITY, "session/close during a turn ends the turn with stopReason 'cancelled'",
       f"{SPEC}/session-setup: The agent must cancel any ongoing work (as if session/cancel was called).",
       needs="close", tck=("ACP-CLOSE-002",))
async def close_cancels_turn(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "update", by="session/close")


async def _session_from_earlier_process(ctx: CheckContext, word: str) -> tuple[str, str]:
    first = await initialized(ctx)
    sid = await first.new_session(ctx.workdir)
    text = f"Remember the word {word}."
    await first.prompt(sid, text)
    said = first.agent_text()
    await first.client.stop()  # closes stdin first: the agent must keep the session for the next process
    return sid, said



@check("ACP-LOAD-001", Tier.CAPABILITY, "session/load in a new process replays the history before answering",
       f"{SPEC}/session-setup#loading-sessions: The Agent MUST replay the entire conversation to the Client in the "
       "form of session/update notifications ... When all the conversation entries have been streamed to the "
       "Client, the Agent MUST respond to the original session/load request.", needs="loadSession", fresh=True,
       tck=("ACP-LOAD-001", "ACP-LOAD-002"))
async def load_replays(ctx: CheckContext) -> str:
    word = f"kiwi-{ctx.nonce(6)}"
    sid, said = await _session_from_earlier_process(ctx, word)
    second = await initialized(ctx)
    try:
        await second.call("session/load", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        raise CheckFailed(f"session/load of {shown(sid)} answered {err.code} {err.message}") from None
    load_ids = [m["msg"].get("id") for m in second.transcript
                if m["dir"] == "out" and m["msg"].get("method") == "session/load"]
    before = second.updates[:second.updates_at.get(load_ids[-1], len(second.updates))]
    await _settle(second)
    late = conversation(second.updates[len(before):])  # commands or usage reported after the answer are not replay
    users = "".join(_chunk_text(u, "user_message_chunk") for u in before)
    if late:
        raise CheckFailed(f"{len(late)} update(s) arrived after the session/load answer (replay must come first)")
    if not before:
        raise CheckFailed("session/load answered without replaying any history")
    if word not in users:
        raise CheckFailed(f"the replay did not contain the user's message (looked for {shown(word)})")
    if said and said not in second.agent_text(before):
        raise CheckFailed("the replayed agent messages differ from what the agent said in the first process")
    return f"{len(before)} update(s) replayed before the answer, matching the first process"


@check("ACP-LOAD-002", Tier.CAPABILITY, "a loaded session is usable: it can be prompted",
       f"{SPEC}/session-setup#loading-sessions: the Client can continue the conversation.", needs="loadSession",
       fresh=True)
async def load_usable(ctx: CheckContext) -> str:
    sid, _ = await _session_from_earlier_process(ctx, "plum")
    second = await initialized(ctx)
    try:
        await second.call("session/load", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
        result = await second.prompt(sid, "What word did I ask you to remember?")
    except RpcError as err:
        raise CheckFailed(f"after session/load: {err.code} {err.message}") from None
    return f"prompt after load ended {shown(result.get('stopReason'))}"


@check("ACP-RESUME-001", Tier.CAPABILITY, "session/resume in a new process answers without replay and is usable",
       f"{SPEC}/session-setup: session/resume resumes an existing session without returning previous messages "
       "(unlike session/load).", needs="resume", fresh=True, tck=("ACP-RESUME-001", "ACP-RESUME-002"))
async def resume_no_replay(ctx: CheckContext) -> str:
    sid, _ = await _session_from_earlier_process(ctx, "fig")
    second = await initialized(ctx)
    try:
        await second.call("session/resume", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        raise CheckFailed(f"session/resume of {shown(sid)} answered {err.code} {err.message}") from None
    await _settle(second)
    replayed = conversation(second.updates)  # a report of its commands or usage is not a replay
    if replayed:
        raise CheckFailed(f"session/resume replayed {len(replayed)} update(s); resume must not replay")
    try:
        result = await second.prompt(sid, "What word did I ask you to remember?")
    except RpcError as err:
        raise CheckFailed(f"prompt after session/resume answered {err.code} {err.message}") from None
    return f"no replay; prompt after resume ended {shown(result.get('stopReason'))}"


async def _unknown(ctx: CheckContext, method: str) -> str:
    p = await initialized(ctx)
    unknown = unknown_session_id(ctx)
    try:
        await p.call(method, {"sessionId": unknown, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        if err.code == AUTH_REQUIRED:  # it may not say anything of sessions before authentication
            raise blocked_by_error(err, method) or CheckBlocked(err.message) from None
        if err.code != RESOURCE_NOT_FOUND:
            raise CheckFailed(f"{method} of an unknown id answered {err.code} {shown(err.message)}, "
                              "not -32002") from None
        return f"-32002 {shown(err.message)}"
    raise CheckFailed(f"{method} of an unknown id {shown(unknown)} succeeded")


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
    p, sid = await session_of(ctx)
    unknown = unknown_session_id(ctx)
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
       f"{SPEC}/session-list: session/list returns the sessions the Agent knows.", needs="list",
       tck=("ACP-LIST-001",))
async def list_sessions(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
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
        raise CheckFailed(f"session {shown(sid)} is missing from session/list ({len(seen)} listed)")
    return f"{len(seen)} session(s) listed, including the new one"


@check("ACP-CLOSE-001", Tier.CAPABILITY, "session/close closes a session",
       f"{SPEC}/session-setup: session/close closes an active session.", needs="close",
       tck=("ACP-CLOSE-001",))
async def close_session(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    try:
        await p.call("session/close", {"sessionId": sid})
    except RpcError as err:
        raise CheckFailed(f"session/close answered {err.code} {err.message}") from None
    return "closed"


# Advisory: no MUST says an agent that answers -32000 must list a method (the TCK files it advisory too), but a
# client can do nothing with such an agent but tell its user to log in elsewhere.
@check("ACP-AUTH-001", Tier.ADVISORY, "an agent that requires authentication advertises how",
       f"{SPEC}/initialization: authMethods lists the authentication methods the Agent supports; -32000 means "
       "authentication is required.", fresh=True, tck=("ACP-AUTH-005",))
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


@check("ACP-AUTH-002", Tier.MANDATORY, "no terminal sign-in is advertised to a client that does not run them",
       f"{SPEC}/authentication: Agents MUST NOT include terminal auth methods unless the client advertised "
       "clientCapabilities.auth.terminal.", tck=("ACP-AUTH-002",), from_init=True)
async def terminal_auth_only_when_offered(ctx: CheckContext) -> str:
    if ctx.options.offer.terminal_auth:
        raise CheckSkipped("--offer terminal-auth=on: the client offered terminal sign-ins, nothing to judge")
    # The run's first initialize offered no `auth.terminal`: its answer is the evidence.
    methods = [m for m in ctx.caps.get("authMethods") or [] if isinstance(m, dict)]
    terminal = [str(m.get("id")) for m in methods if m.get("type") == "terminal"]
    if terminal:
        raise CheckFailed(f"initialize without clientCapabilities.auth.terminal advertised terminal sign-in "
                          f"method(s) {', '.join(terminal)}: a client that cannot run them offers its user a dead end")
    return f"{len(methods)} auth method(s), none of type terminal"


_OFFERED_BY = {"fs/read_text_file": "fs.readTextFile", "fs/write_text_file": "fs.writeTextFile",
               "elicitation/create": "elicitation"}


@check("ACP-CLIENTCAP-001", Tier.MANDATORY, "the agent calls no file, terminal or elicitation method the client did "
       "not offer",
       f"{SPEC}/file-system, {SPEC}/terminals, {SPEC}/elicitation: if the capability is false or not present, the "
       "Agent MUST NOT attempt to call its methods.", fresh=True,
       tck=("ACP-CLIENTCAP-001", "ACP-CLIENTCAP-002", "ACP-CLIENTCAP-003"))
async def offers_honoured(ctx: CheckContext) -> str:
    p = await initialized(ctx, ClientOffer.nothing())
    sid = await p.new_session(ctx.workdir)
    result = await p.prompt(sid, ctx.prompts.tools)
    await _settle(p)
    called = sorted({str(m["method"]) for m in p.requests_in if str(m["method"]).startswith(("fs/", "terminal/"))
                     or m["method"] == "elicitation/create"})
    if called:
        raise CheckFailed("offered no files, terminals or questions (clientCapabilities fs false, terminal false, no "
                          "elicitation), the agent called "
                          + ", ".join(f"{m} (needs {_OFFERED_BY.get(m, 'terminal')})" for m in called))
    return (f"offered none, called none; the turn ended {shown(result.get('stopReason'))} (PASS holds for an agent "
            "that needed none, too)")


# Advisory: the spec makes the agent "responsible for releasing the terminal" (terminal/create), not a MUST; a
# client ends an agent's terminals with the agent anyway (the gateway does), but until then each holds a process.
@check("ACP-TERMINAL-001", Tier.ADVISORY, "terminals the agent creates are released (terminal/release)",
       f"{SPEC}/terminals: The Agent is responsible for releasing the terminal by using the terminal/release method.",
       fresh=True)
async def terminals_released(ctx: CheckContext) -> str:
    p = await initialized(ctx, ClientOffer(terminal=True))
    sid = await p.new_session(ctx.workdir)
    await p.prompt(sid, ctx.prompts.tools)
    await _settle(p)
    host = p.terminals
    assert host is not None
    if not host.created:
        raise CheckSkipped("the agent ran no command in a terminal of the client's (the `tools` prompt; set [check] "
                           "tools to one that makes it)")
    left = host.unreleased()
    if left:
        raise CheckFailed(f"{len(left)} of {len(host.created)} terminal(s) still held when the turn had ended: "
                          f"{', '.join(left)} (never terminal/release'd)")
    return f"{len(host.created)} terminal(s) created, each released"


@check("ACP-CLIENT-001", Tier.MANDATORY, "the agent survives -32601 from the client for a method it does not have",
       "https://www.jsonrpc.org/specification#error_object: -32601 Method not found.")
async def unknown_client_method(ctx: CheckContext) -> str:
    if ctx.prompts.client_method is None:
        raise CheckSkipped("no prompt makes an agent call a client method the checker lacks; set [check] "
                           "client_method (or --prompt client_method=TEXT) to one that does")
    p, sid = await session_of(ctx)
    try:
        result = await p.prompt(sid, ctx.prompts.client_method)
    except RpcError as err:
        raise CheckFailed(f"the turn failed: {err.code} {err.message}") from None
    asked = [m["method"] for m in p.requests_in if m["method"] not in
             ("fs/read_text_file", "fs/write_text_file", "session/request_permission")]
    if not asked:
        raise CheckSkipped("the agent called no method the client lacks")
    return f"answered -32601 to {shown(asked[0])}; the turn still ended {shown(result.get('stopReason'))}"


@check("ACP-SHUTDOWN-001", Tier.ADVISORY, "the agent exits when its stdin closes",
       f"{SPEC}/transports: The client closes the agent's stdin to end the connection; the agent SHOULD exit.",
       fresh=True, tck=("ACP-SHUTDOWN-001",))
async def shutdown_on_stdin_close(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    with contextlib.suppress(Exception):
        p.client.process.stdin.close()
    try:
        rc = await asyncio.wait_for(p.client.process.wait(), 3.0)
    except TimeoutError:
        raise CheckFailed("still running 3 s after its stdin closed") from None
    return f"exited with status {rc}"


@check("ACP-INFO-001", Tier.INFORMATIONAL, "what the agent says about itself",
       f"{SPEC}/initialization: agentInfo, agentCapabilities and authMethods.", tck=("ACP-INIT-004",))
async def agent_info(ctx: CheckContext) -> str:
    info = ctx.caps.get("agentInfo") or {}
    caps = ctx.caps.get("agentCapabilities") or {}
    flags = [c for c in ("loadSession", "resume", "list", "close") if ctx.advertised(c)]
    advertised = ", ".join(flags) or "no optional methods"
    prompt_caps = sorted(k for k, v in (caps.get("promptCapabilities") or {}).items() if v)
    name = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    return f"{name}; advertises {advertised}; prompt capabilities: {', '.join(prompt_caps) or 'none'}"


# Judged from what every other check saw, not run on their own.
STARTUP_CHECK = Check("ACP-STARTUP-001", Tier.ADVISORY, "initialize is answered within a few seconds",
                      f"{SPEC}/initialization: Before a Session can be created, Clients MUST initialize the "
                      "connection; clients wait for the answer before showing anything.", lambda ctx: _never())
SCHEMA_CHECK = Check("ACP-SCHEMA-001", Tier.MANDATORY, "every message the agent sent matches the ACP v1 JSON Schema",
                     f"{SPEC}/schema: the ACP v1 JSON Schema (schema/v1/schema.json).", lambda ctx: _never(),
                     tck=("ACP-SCHEMA-001",))



def startup_verdict(init_seconds: float | None, options: CheckOptions, unusable: str | None) -> tuple[Result, str]:
    """ACP-STARTUP-001 from the first initialize: slow is a finding (advisory), never a transport failure."""
    if init_seconds is None:
        return Result.BLOCKED, unusable or "initialize was not answered (see ACP-INIT-001)"
    if init_seconds > options.slow_initialize:
        return Result.FAIL, (f"initialize took {init_seconds:.1f} s (over {options.slow_initialize:g} s): clients "
                             "with a shorter timeout give up; answer initialize first and do slow set-up (finding a "
                             "CLI, logging in) afterwards or on session/new")
    return Result.PASS, f"initialize answered in {init_seconds:.2f} s"

