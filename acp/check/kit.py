"""The checks that cover the rest of the ACP conformance kit's v1 requirements (acp-tck): the JSON-RPC envelope,
the optional session methods' finer points, and what a session offers (modes, config options).

Registered after `core.py`'s own (this module imports it first), so they run after them in the shared
process. Each names the kit's requirement ids it covers (`tck`); docs/agent-authors.md has the table. Judged
run-wide in `run.py`: the envelope of every response (ENVELOPE_CHECK), error messages' shape
(ERROR_CHECK) and UTF-8 on stdout (UTF8_CHECK).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from ..errors import METHOD_NOT_FOUND, RequestTimeout, RpcError
from . import core as _core  # noqa: F401  (the core checks register first, however this module is reached)
from .framework import (
    SPEC,
    Check,
    CheckBlocked,
    CheckContext,
    CheckFailed,
    CheckInconclusive,
    CheckSkipped,
    Probe,
    Tier,
    _never,
    _settle,
    blocked_by_error,
    check,
    initialized,
    session_of,
    shown,
    unknown_session_id,
)

PING = "_acp_check/ping"  # a custom method no agent has: every agent must answer it (an error is an answer)
JSONRPC = "https://www.jsonrpc.org/specification"


async def _answered(p: Probe, method: str, request_id: int | str, timeout: float) -> RpcError | Any:
    """The answer to a request with this exact id: its result, or its error (returned, not raised)."""
    try:
        return await p.client.conn.request(method, {}, timeout=timeout, request_id=request_id)
    except RpcError as err:
        return err


@check("ACP-JSONRPC-001", Tier.MANDATORY, "every request is answered, its id echoed exactly (integer and string)",
       f"{JSONRPC}#response_object: id MUST be the same as the value of the id member in the Request; "
       f"{SPEC}/extensibility: recipients must respond to custom requests.", tck=("ACP-JSONRPC-001", "ACP-EXT-001"))
async def ids_echoed(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    wait = min(ctx.options.setup_timeout, 5.0)  # an unknown method is answered at once by any agent
    said = []
    for request_id in (f"acp-check-{ctx.nonce(8)}", 2**40 + 7):
        try:
            answer = await _answered(p, PING, request_id, wait)
        except RequestTimeout:
            stray = [m.get("id") for m in p.responses_in if m.get("id") != request_id]
            raise CheckFailed(f"no answer with id {shown(request_id)} to {PING} within {wait:g} s"
                              + (f" (answers came with id(s) {shown(stray)} instead)" if stray else
                                 " (a custom method still gets an answer: an error is one)")) from None
        said.append(f"{shown(request_id)} → {answer.code if isinstance(answer, RpcError) else 'a result'}")
    return "answered with the same id: " + ", ".join(said)


@check("ACP-JSONRPC-004", Tier.ADVISORY, "an unknown method is answered -32601, and the connection stays usable",
       f"{SPEC}/extensibility: ... SHOULD respond with the standard \"Method not found\" error (-32601).",
       tck=("ACP-JSONRPC-004", "ACP-JSONRPC-005"))
async def unknown_method(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    wait = min(ctx.options.setup_timeout, 5.0)
    # A custom (`_`) method, and one that is no custom method but no ACP method either, without params (JSON-RPC
    # lets a request omit them): SDKs route the two apart, and some agents read a request's params before its name.
    for method, params in ((PING, {}), ("acp_check/no_such_method", None)):
        try:
            await p.client.conn.request(method, params, timeout=wait)
        except RpcError as err:
            if err.code != METHOD_NOT_FOUND:
                raise CheckFailed(f"{method} (a method no agent has) answered {err.code} {shown(err.message)}, not "
                                  "-32601") from None
        except RequestTimeout:
            raise CheckFailed(f"{method} got no answer within {wait:g} s (ACP-JSONRPC-001 says more)") from None
        else:
            raise CheckFailed(f"{method} (a method no agent has) answered a result")
    try:  # after the errors, the connection still answers
        await p.client.conn.request(PING, {}, timeout=wait)
    except RpcError:
        pass
    except RequestTimeout:
        raise CheckFailed(f"after two errors, {PING} got no answer within {wait:g} s") from None
    return "-32601 for a custom and a plain unknown method, and the connection answers after them"


@check("ACP-JSONRPC-003", Tier.MANDATORY, "notifications are never answered",
       f"{JSONRPC}#notification: The Server MUST NOT reply to a Notification.", fresh=True, tck=("ACP-JSONRPC-003",))
async def notifications_unanswered(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    await p.client.conn.notify("_acp_check/notice", {})
    await p.client.conn.notify("session/cancel", {"sessionId": unknown_session_id(ctx)})
    await _settle(p, 0.5)  # a quiet period: any response now answers a notification (no request is out)
    answers = [m for m in p.responses_in if m.get("id") is None or not isinstance(m.get("id"), (int, str))]
    if answers:
        raise CheckFailed(f"{len(answers)} response(s) to notifications (a custom one and a session/cancel of an "
                          f"unknown session): {str(answers[0])[:200]}")
    return "a custom notification and a session/cancel of an unknown session: no answer to either"


@check("ACP-AUTHIDS-001", Tier.ADVISORY, "auth method ids are unique",
       f"{SPEC}/schema#authmethod: id — Unique identifier for this authentication method.", tck=("ACP-AUTH-001",),
       from_init=True)
async def auth_ids_unique(ctx: CheckContext) -> str:
    ids = [str(m.get("id")) for m in ctx.caps.get("authMethods") or [] if isinstance(m, dict)]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise CheckFailed(f"auth method id(s) advertised more than once: {', '.join(repeated)}")
    return f"{len(ids)} auth method id(s), each once"


def _values(option: dict[str, Any]) -> list[Any]:
    """A select option's values, its groups flattened."""
    found = []
    for entry in option.get("options") or []:
        if isinstance(entry, dict) and "group" in entry and isinstance(entry.get("options"), list):
            found += [o.get("value") for o in entry["options"] if isinstance(o, dict)]
        elif isinstance(entry, dict):
            found.append(entry.get("value"))
    return found


def offer_findings(answer: dict[str, Any]) -> list[str]:
    """What is wrong with a session set-up answer's `modes` and `configOptions` (kit ACP-MODES-001, ACP-CONFIG-001)."""
    found = []
    modes = answer.get("modes")
    if isinstance(modes, dict):
        available = [m.get("id") for m in modes.get("availableModes") or [] if isinstance(m, dict)]
        if modes.get("currentModeId") not in available:
            found.append(f"modes.currentModeId {shown(modes.get('currentModeId'))} is not among availableModes "
                         f"{shown(available)}")
    for option in answer.get("configOptions") or []:
        if not isinstance(option, dict):
            continue
        current, kind = option.get("currentValue"), option.get("type")
        if kind == "boolean" and not isinstance(current, bool):
            found.append(f"boolean option {shown(option.get('id'))} has currentValue {shown(current)}")
        elif kind == "select" and current not in _values(option):
            found.append(f"option {shown(option.get('id'))} has currentValue {shown(current)}, not one of its values "
                         f"{shown(_values(option))}")
    return found


async def _offered_session(ctx: CheckContext) -> tuple[Probe, str, dict[str, Any]]:
    p, sid = await session_of(ctx)
    return p, sid, p.last_new or {}


@check("ACP-CONFIG-001", Tier.CAPABILITY, "a session's modes and config options are consistent: each current value "
       "is one it offers", f"{SPEC}/session-config-options, {SPEC}/session-modes: currentValue and currentModeId "
       "name one of the offered values.", tck=("ACP-CONFIG-001", "ACP-MODES-001"))
async def offer_consistent(ctx: CheckContext) -> str:
    _, _, answer = await _offered_session(ctx)
    if not answer.get("modes") and not answer.get("configOptions"):
        raise CheckSkipped("session/new offered no modes and no config options")
    found = offer_findings(answer)
    if found:
        raise CheckFailed("; ".join(found))
    return (f"{len(answer.get('configOptions') or [])} config option(s), "
            f"{len((answer.get('modes') or {}).get('availableModes') or [])} mode(s): every current value offered")


@check("ACP-CONFIG-003", Tier.MANDATORY, "no boolean config option to a client that did not opt in",
       f"{SPEC}/session-config-options: Agents MUST NOT send boolean options unless the client advertised "
       "clientCapabilities.session.configOptions.boolean.", tck=("ACP-CONFIG-003",))
async def booleans_only_when_offered(ctx: CheckContext) -> str:
    if ctx.options.offer.boolean_config:
        raise CheckSkipped("--offer boolean-config=on: the client opted into boolean options, nothing to judge")
    _, _, answer = await _offered_session(ctx)  # the shared process offers no boolean config options
    booleans = [str(o.get("id")) for o in answer.get("configOptions") or []
                if isinstance(o, dict) and o.get("type") == "boolean"]
    if booleans:
        raise CheckFailed(f"session/new offered boolean option(s) {', '.join(booleans)} to a client that did not "
                          "opt into them")
    return f"{len(answer.get('configOptions') or [])} config option(s), none boolean"


def _another(option: dict[str, Any]) -> Any:
    """A value of `option` other than its current one (None: it has no other)."""
    if option.get("type") == "boolean":
        return not option.get("currentValue")
    return next((v for v in _values(option) if v != option.get("currentValue")), None)


@check("ACP-CONFIG-002", Tier.CAPABILITY, "set_config_option and set_mode take another offered value, and "
       "set_config_option answers the whole offer",
       f"{SPEC}/session-config-options: the response MUST contain the complete list of config options with their "
       "current values.", tck=("ACP-CONFIG-002", "ACP-MODES-002"))
async def offer_settable(ctx: CheckContext) -> str:
    p, sid, answer = await _offered_session(ctx)
    options = [o for o in answer.get("configOptions") or [] if isinstance(o, dict) and _another(o) is not None]
    modes = answer.get("modes") if isinstance(answer.get("modes"), dict) else None
    if not options and not modes:
        raise CheckSkipped("session/new offered no config option with a second value and no modes")
    said, undecided = [], []
    ids = {o.get("id") for o in answer.get("configOptions") or [] if isinstance(o, dict)}
    for option in options:  # each option: to another of its values, then back
        value, before = _another(option), option.get("currentValue")
        params = {"sessionId": sid, "configId": option["id"], "value": value,
                  **({"type": "boolean"} if option.get("type") == "boolean" else {})}
        try:
            result = await p.call("session/set_config_option", params)
        except RpcError as err:
            if err.code in (-32602, -32601):  # the agent calls a value it offered invalid
                raise CheckFailed(f"session/set_config_option {option['id']}={shown(value)} (offered) answered "
                                  f"{err.code} {err.message}") from None
            # Another error (-32603, -32000): switching may need what is not here (a model's sign-in, a network).
            undecided.append(f"{option['id']}={shown(value)} answered {err.code} {err.message}")
            continue
        listed = {o.get("id"): o for o in (result or {}).get("configOptions") or [] if isinstance(o, dict)}
        if not ids <= set(listed):  # the complete list: every option offered before (a change may add some)
            raise CheckFailed(f"set_config_option {option['id']} answered option(s) "
                              f"{', '.join(sorted(map(str, listed)))}, not the whole offer: "
                              f"{', '.join(sorted(map(str, ids)))}")
        if listed[option["id"]].get("currentValue") != value:
            raise CheckFailed(f"set_config_option answered {option['id']} = "
                              f"{shown(listed[option['id']].get('currentValue'))}, not the {shown(value)} it was set "
                              "to")
        if option.get("type") == "boolean" or before in _values(option):
            await p.call("session/set_config_option", {**params, "value": before})
            said.append(f"{option['id']} to {shown(value)} and back")
        else:  # its current value was none of its values (ACP-CONFIG-001's finding): nothing valid to go back to
            said.append(f"{option['id']} to {shown(value)} (not back to {shown(before)}, which it does not offer)")
    if modes:
        available = [m.get("id") for m in modes.get("availableModes") or [] if isinstance(m, dict)]
        other = next((m for m in available if m != modes.get("currentModeId")), None)
        if other is not None:
            try:
                await p.call("session/set_mode", {"sessionId": sid, "modeId": other})
            except RpcError as err:
                raise CheckFailed(f"session/set_mode {shown(other)} (offered) answered {err.code} "
                                  f"{err.message}") from None
            await _settle(p, 0.2)
            wrong = [u for u in p.updates if (u.get("update") or {}).get("sessionUpdate") == "current_mode_update"
                     and "currentModeId" not in (u.get("update") or {})]
            if wrong:
                raise CheckFailed(f"current_mode_update without currentModeId: {str(wrong[0])[:200]}")
            await p.call("session/set_mode", {"sessionId": sid, "modeId": modes.get("currentModeId")})
            said.append(f"mode (session/set_mode) to {shown(other)} and back")
    if undecided:
        raise CheckInconclusive("could not be set here: " + "; ".join(undecided) + " (an error other than invalid "
                                "params: the switch may need credentials or a network this run lacks)"
                                + (f"; set: {'; '.join(said)}" if said else ""))
    return "set: " + "; ".join(said)


MODE_REPORTS = ("current_mode_update", "config_option_update")


def current_mode(answer: dict[str, Any]) -> Any:
    """The mode a session set-up answer says the session is in (its `modes`, else a config option of category mode)."""
    modes = answer.get("modes")
    if isinstance(modes, dict) and "currentModeId" in modes:
        return modes["currentModeId"]
    return next((o.get("currentValue") for o in answer.get("configOptions") or []
                 if isinstance(o, dict) and o.get("category") == "mode"), None)


# Advisory: the session-modes page says the agent "can" change its own mode and let the client know, not MUST; but a
# client that is not told shows a mode the agent left, and re-applies the old one after a restore.
@check("ACP-MODES-003", Tier.ADVISORY, "an agent that changes its own mode says so (current_mode_update or "
       "config_option_update)", f"{SPEC}/session-modes#from-the-agent: the Agent can change its own mode and let the "
       "Client know by sending the current_mode_update session notification.", fresh=True)
async def own_mode_change_told(ctx: CheckContext) -> str:
    if ctx.prompts.mode_change is None:
        raise CheckSkipped("no prompt makes the agent change its own mode: set [check] mode_change (or --prompt "
                           "mode_change=TEXT) to one that does")
    p, sid, answer = await _offered_session(ctx)
    before = current_mode(answer)
    if before is None:
        raise CheckSkipped("session/new offered no modes")
    await p.prompt(sid, ctx.prompts.mode_change)
    await _settle(p, 0.2)
    told = [u for u in p.updates if (u.get("update") or {}).get("sessionUpdate") in MODE_REPORTS]
    if told:
        return f"{len(told)} report(s) of the mode in the turn"
    # Nothing said: did the mode change? What a new process restores tells (an agent that changed it keeps it).
    how = "session/resume" if ctx.advertised("resume") else "session/load" if ctx.advertised("loadSession") else None
    if how is None:
        raise CheckInconclusive("the mode_change turn reported no mode, and without load or resume there is no "
                                "telling whether the mode changed")
    await p.client.stop()
    second = await initialized(ctx)
    try:
        after = current_mode(await second.call(how, {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []}) or {})
    except RpcError as err:
        raise CheckInconclusive(f"the mode_change turn reported no mode, and {how} in a new process answered "
                                f"{err.code} {err.message}: no telling whether the mode changed") from None
    if after is not None and after != before:
        raise CheckFailed(f"the mode went from {shown(before)} to {shown(after)} in the mode_change turn (as {how} in "
                          "a new process shows) and the agent said nothing of it: the client still shows the old one")
    raise CheckInconclusive(f"the mode_change turn did not change the mode (still {shown(before)} after {how}): give "
                            "[check] mode_change a prompt that does")


@check("ACP-CONFIG-005", Tier.INFORMATIONAL, "what a session restored in a new process keeps of its configuration",
       f"{SPEC}/session-config-options: (silent on restores) — what the gateway re-applies after a restore when the "
       "agent does not keep it.", fresh=True)
async def config_after_restore(ctx: CheckContext) -> str:
    how = "session/resume" if ctx.advertised("resume") else "session/load" if ctx.advertised("loadSession") else None
    if how is None:
        raise CheckSkipped("the agent neither loads nor resumes sessions")
    first, sid, answer = await _offered_session(ctx)
    option = next((o for o in answer.get("configOptions") or [] if isinstance(o, dict) and o.get("type") == "select"
                   and _another(o) is not None), None)
    if option is None:
        raise CheckSkipped("session/new offered no select config option with a second value")
    value = _another(option)
    try:  # informational: whatever is answered is reported, never judged
        await first.call("session/set_config_option", {"sessionId": sid, "configId": option["id"], "value": value})
        await first.client.stop()
        second = await initialized(ctx)
        restored = await second.call(how, {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        return f"nothing to compare: {err.code} {err.message} (ACP-CONFIG-002 and the restore checks judge it)"
    now = {o.get("id"): o.get("currentValue") for o in (restored or {}).get("configOptions") or []
           if isinstance(o, dict)}
    if option["id"] not in now:
        return f"{how} answered no configOptions: a client keeps {option['id']}={shown(value)} itself and sets it again"
    kept = now[option["id"]] == value
    return (f"{how} in a new process: {option['id']} is {shown(now[option['id']])} — "
            + ("kept" if kept else f"not kept (it was set to {shown(value)}): a client sets it again, as the gateway "
               "does"))


# Advisory: the spec says what an agent offers, not in so many words that it must refuse the rest; but a client that
# is told "done" for a value the agent does not have shows its user a choice that never took effect.
@check("ACP-CONFIG-004", Tier.ADVISORY, "a config option value that is not offered is refused with an error",
       f"{SPEC}/session-config-options: value — one of the option's values.")
async def offer_guarded(ctx: CheckContext) -> str:
    p, sid, answer = await _offered_session(ctx)
    option = next((o for o in answer.get("configOptions") or [] if isinstance(o, dict)
                   and o.get("type") == "select"), None)
    if option is None:
        raise CheckSkipped("session/new offered no select config option")
    bad = f"acp-check-no-such-value-{ctx.nonce(6)}"
    try:
        result = await p.call("session/set_config_option", {"sessionId": sid, "configId": option["id"], "value": bad})
    except RpcError as err:
        return f"{option['id']}={shown(bad)} refused: {err.code} {shown(err.message[:80])}"
    raise CheckFailed(f"set_config_option {option['id']}={shown(bad)} (not among its values) was accepted: "
                      f"{str(result)[:160]}")


@check("ACP-DELETE-001", Tier.CAPABILITY, "session/delete deletes a session", f"{SPEC}/session-delete: "
       "session/delete removes a session from session/list.", needs="delete", tck=("ACP-DELETE-001",))
async def delete_session(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    try:
        result = await p.call("session/delete", {"sessionId": sid})
    except RpcError as err:
        raise CheckFailed(f"session/delete of a session just made answered {err.code} {err.message}") from None
    if not isinstance(result, dict):
        raise CheckFailed(f"session/delete answered {shown(result)}, not an object")
    return "deleted"


@check("ACP-DELETE-002", Tier.ADVISORY, "deleting an unknown session succeeds silently",
       f"{SPEC}/session-delete: deleting a session that does not exist SHOULD succeed.", needs="delete",
       tck=("ACP-DELETE-002",))
async def delete_unknown(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    unknown = unknown_session_id(ctx)
    try:
        await p.call("session/delete", {"sessionId": unknown})
    except RpcError as err:
        if err.code == -32000:
            raise blocked_by_error(err, "session/delete") or CheckBlocked(err.message) from None
        raise CheckFailed(f"session/delete of an unknown id answered {err.code} {shown(err.message)}") from None
    return "succeeded"


@check("ACP-LIST-002", Tier.CAPABILITY, "session/list filtered by a directory no session uses lists none",
       f"{SPEC}/session-list: cwd filters the sessions listed; sessions is an array.", needs="list",
       tck=("ACP-LIST-002",))
async def list_filtered(ctx: CheckContext) -> str:
    p, _ = await session_of(ctx)  # one session somewhere else
    empty = os.path.join(ctx.workdir, f"unused-{ctx.nonce(6)}")
    os.makedirs(empty)
    try:
        result = await p.call("session/list", {"cwd": empty})
    except RpcError as err:
        raise CheckFailed(f"session/list with cwd answered {err.code} {err.message}") from None
    sessions = result.get("sessions") if isinstance(result, dict) else None
    if sessions != []:
        raise CheckFailed(f"session/list for a directory no session uses answered sessions={str(sessions)[:200]}")
    return "sessions: []"


@check("ACP-ADDDIRS-001", Tier.CAPABILITY, "session/new takes the additional directories it advertises",
       f"{SPEC}/session-setup: additionalDirectories are absolute paths the agent may work in.",
       needs="additionalDirectories", tck=("ACP-ADDDIRS-001",))
async def additional_directories(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    extra = os.path.join(ctx.workdir, "also-here")
    os.makedirs(extra, exist_ok=True)
    try:
        await p.new_session(ctx.workdir, additionalDirectories=[extra])
    except CheckFailed as exc:
        raise CheckFailed(f"with additionalDirectories [{extra}]: {exc}") from None
    return "a session with one additional directory"


@check("ACP-LOAD-003", Tier.ADVISORY, "session/load answers an object ({}), not null",
       f"{SPEC}/session-setup#loading-sessions: the response to session/load is a LoadSessionResponse object.",
       needs="loadSession", tck=("ACP-LOAD-003",))
async def load_answers_object(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    try:
        result = await p.call("session/load", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        raise CheckSkipped(f"session/load of a session of this process answered {err.code} {err.message} "
                           "(ACP-LOAD-001 judges load in a new process)") from None
    if not isinstance(result, dict):
        raise CheckFailed(f"session/load answered {shown(result)}, not an object")
    return "an object"


@check("ACP-INFO-002", Tier.INFORMATIONAL, "what session/prompt answers for a session the agent never made",
       f"{SPEC}/schema#errorcode: v1 names no code for it; -32002 (resource not found) is what clients can act on.",
       tck=("ACP-INFO-UNKNOWNSESSION-001",))
async def prompt_unknown_session(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    unknown = unknown_session_id(ctx)
    try:
        await asyncio.wait_for(p.call("session/prompt", {"sessionId": unknown, "prompt": [
            {"type": "text", "text": ctx.prompts.short}]}), min(ctx.options.setup_timeout, 15.0))
    except RpcError as err:
        return f"{err.code} {shown(err.message)}"
    except (TimeoutError, RequestTimeout):
        return "no answer in time"
    return "a result (a turn for a session it never made)"


TINY_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
TINY_WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA="  # a valid, empty 8 kHz mono WAV


async def _content_turn(ctx: CheckContext, what: str, blocks: list[dict[str, Any]],
                        meta: dict[str, Any] | None = None) -> str:
    """A text turn (which must work: BLOCKED otherwise), then the turn the check judges: `blocks` after the text, or
    `meta` as its `_meta`. A refusal of what it carries (-32602, -32601) FAILs; any other error is INCONCLUSIVE."""
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
    try:
        result = await p.prompt(sid, ctx.prompts.short, blocks, meta, judged=True)
    except RpcError as err:
        if err.code in (-32602, -32601):
            raise CheckFailed(f"a prompt with {what} was refused: {err.code} {err.message}") from None
        raise CheckInconclusive(f"a prompt with {what} failed ({err.code} {err.message}) where a text prompt "
                                "worked: it may be the model's answer to it, not the agent's") from None
    return f"a prompt with {what} was taken; it ended {shown(result.get('stopReason'))} (ACP-PROMPT-001 judges that)"


@check("ACP-PROMPT-003", Tier.ADVISORY, "a prompt with a resource_link beside its text is taken",
       f"{SPEC}/initialization#prompt-capabilities: Agents MUST support ... Text and ResourceLink in prompts "
       "(advisory, as the kit: the content page names text alone).", tck=("ACP-PROMPT-003",))
async def resource_link_prompt(ctx: CheckContext) -> str:
    target = os.path.join(ctx.workdir, "notes.txt")
    with open(target, "w") as fh:
        fh.write("hello\n")
    return await _content_turn(ctx, "a resource_link", [{"type": "resource_link", "uri": f"file://{target}",
                                                         "name": "notes.txt", "mimeType": "text/plain"}])


@check("ACP-PROMPTCAP-001", Tier.CAPABILITY, "an image in a prompt is taken where promptCapabilities.image is true",
       f"{SPEC}/initialization#prompt-capabilities: image — the prompt may include ImageContent.",
       needs="prompt:image", tck=("ACP-PROMPTCAP-001",))
async def image_prompt(ctx: CheckContext) -> str:
    return await _content_turn(ctx, "an image", [{"type": "image", "mimeType": "image/png", "data": TINY_PNG}])


@check("ACP-PROMPTCAP-002", Tier.CAPABILITY, "audio in a prompt is taken where promptCapabilities.audio is true",
       f"{SPEC}/initialization#prompt-capabilities: audio — the prompt may include AudioContent.",
       needs="prompt:audio", tck=("ACP-PROMPTCAP-002",))
async def audio_prompt(ctx: CheckContext) -> str:
    return await _content_turn(ctx, "audio", [{"type": "audio", "mimeType": "audio/wav", "data": TINY_WAV}])


@check("ACP-PROMPTCAP-003", Tier.CAPABILITY, "an embedded resource in a prompt is taken where "
       "promptCapabilities.embeddedContext is true", f"{SPEC}/initialization#prompt-capabilities: embeddedContext — "
       "the prompt may include EmbeddedResource.", needs="prompt:embeddedContext", tck=("ACP-PROMPTCAP-003",))
async def embedded_prompt(ctx: CheckContext) -> str:
    return await _content_turn(ctx, "an embedded resource", [{"type": "resource", "resource": {
        "uri": "file:///acp-check/notes.txt", "mimeType": "text/plain", "text": "hello"}}])


@check("ACP-META-001", Tier.ADVISORY, "a prompt carrying _meta (a traceparent) is taken",
       f"{SPEC}/extensibility: _meta ... implementations MUST NOT make assumptions about values at these keys; "
       "traceparent is reserved for W3C trace context.", tck=("ACP-META-001",))
async def meta_prompt(ctx: CheckContext) -> str:
    return await _content_turn(ctx, "_meta", [], {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "acp-check/tag": "t-1"})


@check("ACP-AUTH-003", Tier.CAPABILITY, "after authenticate with the method given, session/new needs no more",
       f"{SPEC}/authentication: authenticate ... then the client can create sessions.", fresh=True,
       tck=("ACP-AUTH-003",))
async def authenticate_then_session(ctx: CheckContext) -> str:
    method = ctx.options.auth_method
    if not method:
        raise CheckSkipped("no auth method given (--auth-method ID, or the profile's auth_method): which of the "
                           "agent's methods works here cannot be guessed")
    p = await ctx.probe()
    init = await p.initialize()
    listed = [m.get("id") for m in init.get("authMethods") or [] if isinstance(m, dict)]
    if method not in listed:
        raise CheckFailed(f"the auth method given, {shown(method)}, is not among those advertised: {shown(listed)}")
    try:
        result = await p.call("authenticate", {"methodId": method})
    except RpcError as err:  # bad or missing credentials here: not a verdict on the agent
        raise CheckSkipped(f"authenticate {shown(method)} answered {err.code} {err.message}: give it working "
                           "credentials to judge what follows") from None
    except RequestTimeout:
        raise CheckInconclusive(f"authenticate {shown(method)} got no answer within {ctx.options.setup_timeout:g} "
                                "s: it may wait for a sign-in server it cannot reach; run again where it can") from None
    if result is not None and not isinstance(result, dict):
        raise CheckFailed(f"authenticate answered {shown(result)}, not an object")
    p.authenticated = True  # no second authenticate: session/new must now work as it is
    try:
        await p.call("session/new", {"cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        if err.code == -32000:
            raise CheckFailed(f"authenticate {shown(method)} succeeded, then session/new still answered -32000 "
                              f"{err.message}") from None
        raise CheckFailed(f"after authenticate, session/new answered {err.code} {err.message}") from None
    return f"authenticate {shown(method)}, then session/new worked"


@check("ACP-INFO-003", Tier.INFORMATIONAL, "what the agent does with a line that is not JSON, and with JSON that is "
       "not JSON-RPC", f"{JSONRPC}#error_object: -32700 Parse error, -32600 Invalid Request (the reference SDKs "
       "differ: one answers, one drops the line).", fresh=True, tck=("ACP-INFO-PARSE-001", "ACP-INFO-INVALIDREQ-001"))
async def garbage_in(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    stdin, before = p.client.process.stdin, len(p.responses_in)
    stdin.write(b"this is not json\n" + b'{"foo": "bar"}\n')
    await stdin.drain()
    await _settle(p, 0.5)  # answers, if any, come in the order of the lines
    answers = [(m.get("error") or {}).get("code") for m in p.responses_in[before:]]
    said = ["a line that is not JSON, then {\"foo\": \"bar\"}: "
            + (f"answered {', '.join(map(str, answers))}" if answers else "no answer to either")]
    try:
        await p.new_session(ctx.workdir)
        said.append("still usable after")
    except CheckFailed as exc:
        said.append(f"not usable after: {exc}")
    return "; ".join(said)


@check("ACP-INFO-004", Tier.INFORMATIONAL, "how much the agent writes to stderr",
       f"{SPEC}/transports: the agent MAY write UTF-8 strings to stderr for logging; clients MAY capture it.",
       tck=("ACP-STDERR-001",))
async def stderr_bytes(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
    await _settle(p, 0.1)
    written = p.client.process.stderr.total_bytes
    tail = " | ".join(line.strip() for line in p.client.process.stderr.tail_lines(2) if line.strip())
    return f"{written} byte(s) of stderr by one process after initialize, session/new and a turn" + (
        f" (the last of it: {shown(tail[-120:])})" if tail else "")


# Judged from every response of the run (`run.py`), not run on their own.
ENVELOPE_CHECK: Check = Check(
    "ACP-JSONRPC-002", Tier.MANDATORY, "every response carries exactly one of result and error; an error is "
    "{code: integer, message: string}", f"{JSONRPC}#response_object", lambda ctx: _never(), tck=("ACP-JSONRPC-002",))
ERROR_CHECK: Check = Check("ACP-ERROR-001", Tier.ADVISORY, "error messages are one non-empty line",
                    f"{SPEC}/schema#error: message — a short description, limited to a concise single sentence.",
                    lambda ctx: _never(), tck=("ACP-ERROR-001",))
UTF8_CHECK: Check = Check("ACP-UTF8-001", Tier.MANDATORY, "everything the agent writes to stdout is UTF-8",
                   f"{SPEC}/transports: messages are UTF-8 encoded.", lambda ctx: _never(), tck=("ACP-TRANSPORT-002",))
