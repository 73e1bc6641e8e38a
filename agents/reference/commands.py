"""The reference agent's slash commands: a prompt that starts with `/WORD` runs the command WORD (the rest of the
prompt is its argument), so that a test can make a turn do one thing: call the client, flood it, hang, crash, fail.
`COMMANDS` is the table; `options.COMMANDS` is what the agent advertises of them (`available_commands_update`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from acp.errors import INTERNAL_ERROR, RpcError

from .example import ExampleAgent
from .options import described
from .store import Session
from .tools import ask_form, ask_permission, elicit, report, shell, terminal, tool_call, withdraw

# (agent, session, the prompt after the command word) -> the turn's stop reason, or None to end it as usual.
Command = Callable[[ExampleAgent, Session, str], Awaitable[str | None]]


async def run_command(agent: ExampleAgent, session: Session, text: str) -> str | None:
    """Run the slash command `text` starts with; an unknown one is echoed like any prompt."""
    word, _, rest = text.partition(" ")
    command = COMMANDS.get(word)
    if command is None:
        await agent.message(session, f"echo: {text}")
        return None
    return await command(agent, session, rest)


def _int(args: list[str], index: int, default: int) -> int:
    return int(args[index]) if len(args) > index else default


# -- calls to the client -------------------------------------------------------------------------------------------
async def _read(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/read PATH [LINE [LIMIT]]` through the client."""
    args = rest.split()
    params: dict[str, Any] = {"sessionId": session.session_id, "path": args[0] if args else ""}
    if len(args) > 1:
        params["line"] = int(args[1])
    if len(args) > 2:
        params["limit"] = int(args[2])
    await report(agent, session, "fs/read_text_file", params)
    return None


async def _write(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    path, _, content = rest.partition(" ")
    await report(agent, session, "fs/write_text_file", {"sessionId": session.session_id, "path": path,
                                                        "content": content})
    return None


async def _call(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    args = rest.split()
    # any method at all, offered or not (the client's answer to what it does not serve is the point)
    await report(agent, session, args[0] if args else "", {"sessionId": session.session_id}, gated=False)
    return None


async def _termout(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/termout ID`: the output of a terminal by id, known to the client or not."""
    args = rest.split()
    await report(agent, session, "terminal/output", {"sessionId": session.session_id,
                                                     "terminalId": args[0] if args else ""})
    return None


async def _work(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """What a coding agent does with a client: a file written and read, a command run."""
    name = os.path.join(session.cwd, "acp-reference-work.txt")
    await report(agent, session, "fs/write_text_file", {"sessionId": session.session_id, "path": name,
                                                        "content": "work\n"})
    await report(agent, session, "fs/read_text_file", {"sessionId": session.session_id, "path": name})
    return await terminal(agent, session, "echo work")


async def _term(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    return await terminal(agent, session, rest)


async def _elicit(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    args = rest.split()
    return await elicit(agent, session, args[0] if args else "form")


async def _withdraw(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """Asks for permission, then withdraws the question before any answer."""
    await withdraw(agent, session)
    return None


# -- permissions and questions -------------------------------------------------------------------------------------
async def _permission(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    outcome = await ask_permission(agent, session)
    if session.cancel.is_set() or outcome == {"outcome": "cancelled"}:
        return "cancelled"
    await agent.message(session, f"permission: {orjson.dumps(outcome).decode()}")
    return None


async def _permissions(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/permissions N [--and-questions]`: N permission requests at once (a flood a gateway must bound), with as
    many form elicitations besides, interleaved; then a tally of the outcomes."""
    args = rest.split()
    count = _int(args, 0, 10)
    kinds = (ask_permission, ask_form) if "--and-questions" in args else (ask_permission,)
    asking = [asyncio.ensure_future(ask(agent, session)) for _ in range(count) for ask in kinds]
    for _ in range(3):  # each request is under way (written, or queued on the connection's writer) ...
        await asyncio.sleep(0)
    await agent.message(session, f"asked {count} permissions")  # ... so this goes out after all of them
    tally: dict[str, int] = {}
    for outcome in await asyncio.gather(*asking):
        key = (f"error {outcome['error']['code']}" if isinstance(outcome, dict) and "error" in outcome
               else str(outcome.get("outcome")) if isinstance(outcome, dict) else str(outcome))
        tally[key] = tally.get(key, 0) + 1
    await agent.message(session, f"permissions: {orjson.dumps(tally, option=orjson.OPT_SORT_KEYS).decode()}")
    # a client answers a permission `cancelled`, and a question's action `cancel`, once it cancels
    if session.cancel.is_set() or tally.get("cancelled") or tally.get("cancel"):
        return "cancelled"
    return None


# -- updates, big and many -----------------------------------------------------------------------------------------
async def _tool(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    args = rest.split()
    await tool_call(agent, session, args[0] if args else "tool", " ".join(args[1:]) or "done")
    return None


async def _stream(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    for i in range(_int(rest.split(), 0, 10)):
        await agent.message(session, f"chunk {i} ")
        if session.cancel.is_set():
            return "cancelled"
    return None


async def _gate(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/gate PATH N`: chunks 0..N/2-1, then waits (polling) until the file PATH exists, then the other chunks: a
    turn that is under way for as long as a test needs (a gateway restarted in the middle of it, say)."""
    args = rest.split()
    path, count = args[0], _int(args, 1, 10)
    for i in range(count):
        if i == count // 2:
            while not os.path.exists(path) and not session.cancel.is_set():  # noqa: ASYNC110 (a file, not an event)
                await asyncio.sleep(0.02)
        if session.cancel.is_set():
            return "cancelled"
        await agent.message(session, f"chunk {i} ")
    return None


async def _trickle(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/trickle PATH`: chunk 0, chunk 1, ... a few milliseconds apart, until the file PATH exists."""
    path, i = rest.split()[0], 0
    while not os.path.exists(path):
        if session.cancel.is_set():
            return "cancelled"
        await agent.message(session, f"chunk {i} ")
        i += 1
        await asyncio.sleep(0.003)
    return None


async def _flood(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/flood N SIZE`: N message chunks of SIZE bytes, not kept in the history (only the client has to cope)."""
    args = rest.split()
    count, size = _int(args, 0, 100), _int(args, 1, 1000)
    chunk = "z" * size
    for _ in range(count):
        await agent.update(session, {"sessionUpdate": "agent_message_chunk",
                                     "content": {"type": "text", "text": chunk}}, record=False)
    return None


async def _huge(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    await agent.message(session, "y" * _int(rest.split(), 0, 1 << 20))
    return None


async def _plan(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/plan A; B`: a plan of the given steps (default two), the first done."""
    steps = [step.strip() for step in rest.split(";") if step.strip()] or ["look around", "make the change"]
    await agent.update(session, {"sessionUpdate": "plan", "entries": [
        {"content": step, "priority": "medium", "status": "completed" if i == 0 else "pending"}
        for i, step in enumerate(steps)]})
    return None


async def _unknown_update(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    await agent.update(session, {"sessionUpdate": "_reference_future_kind", "payload": {"x": 1}})
    return None


async def _meta(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """Says the prompt request's `_meta`, and sends an update with a `_meta` of its own."""
    assert agent.conn is not None
    await agent.conn.notify("session/update", {
        "sessionId": session.session_id, "_meta": {"example.com/trace": "agent-side"},
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "meta: "}}})
    # The trace context is the gateway's own, set on every request: what was passed through is the rest.
    shown = {k: v for k, v in (session.prompt_meta or {}).items() if k not in ("traceparent", "tracestate")}
    await agent.message(session, orjson.dumps(shown).decode())
    return None


# -- the turn going wrong ------------------------------------------------------------------------------------------
async def _crash(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    await agent.message(session, "crashing now")
    os._exit(5)


async def _hang(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    await agent.message(session, "hanging until cancelled")
    return await _wait(agent, session, None)


async def _sleep(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/sleep S`: S seconds, or until cancelled; without S, the same as `/hang`."""
    args = rest.split()
    if not args:
        return await _hang(agent, session, rest)
    return await _wait(agent, session, float(args[0]))


async def _wait(agent: ExampleAgent, session: Session, limit: float | None) -> str | None:
    """Until the turn is cancelled, or `limit` seconds have passed."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(session.cancel.wait(), limit)
    if session.cancel.is_set():
        return "cancelled"
    await agent.message(session, "done sleeping")
    return None


async def _fail(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    if agent.config.fault_reason:  # why, as real agents say it: on stderr, not in the error
        sys.stderr.write(f"{agent.config.fault_reason}\n")
        sys.stderr.flush()
    raise RpcError(INTERNAL_ERROR, "the reference agent failed this turn as asked")


async def _fill(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/fill BYTES`: the agent itself writes BYTES to a file (a resource limit's test)."""
    with open(os.path.join(session.cwd, "fill.bin"), "wb") as out:
        for _ in range(_int(rest.split(), 0, 1 << 20) // 65536 + 1):
            out.write(b"\0" * 65536)
    await agent.message(session, "filled")
    return None


async def _sh(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """The agent's own shell tool, as every real coding agent has: no ACP call involved."""
    return await shell(agent, session, rest)


# -- what the session is -------------------------------------------------------------------------------------------
async def _recall(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """The prompts this session remembers, this one included (a fork's proof of context)."""
    said = [b.get("text", "") for u in session.history if u.get("sessionUpdate") == "user_message_chunk"
            for b in [u.get("content") or {}] if isinstance(b, dict) and b.get("type") == "text"]
    await agent.message(session, f"recall: {len(said)} prompts: " + " | ".join(said))
    return None


async def _mode(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/mode M`: the agent changes its own mode, mid-turn."""
    args = rest.split()
    catalogue = agent.catalogue
    try:
        mode = catalogue.check(session.options, "mode", args[0] if args else "",
                               "session/set_mode" if catalogue.has_modes else "session/set_config_option")
    except RpcError as err:
        await agent.message(session, f"mode not changed: {err.message}")
        return None
    if "silent-mode-change" in agent.config.quirks:  # the fault: changed, and the client never told
        session.options.values["mode"] = mode
        agent.store.save(session)
    else:
        await agent.switch_mode(session, mode)
    await agent.message(session, f"switched to mode {mode}")
    return None


async def _config(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    await agent.message(session, f"config: {described(session.options.values)}")
    return None


async def _mcp(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    await agent.message(session, "mcp: " + (", ".join(
        f"{m['name']} ({m['type']}; {', '.join(m['keys']) or 'no keys'}"
        + (f" = {', '.join(map(str, m['values']))}" if m.get("values") else "") + ")"
        for m in session.mcp) or "none"))
    return None


async def _dirs(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    await agent.message(session, "dirs: " + (", ".join(session.directories) or "none"))
    return None


COMMANDS: dict[str, Command] = {
    "/read": _read, "/write": _write, "/call": _call, "/termout": _termout, "/work": _work, "/term": _term,
    "/elicit": _elicit, "/withdraw": _withdraw,
    "/permission": _permission, "/permissions": _permissions,
    "/tool": _tool, "/stream": _stream, "/gate": _gate, "/trickle": _trickle, "/flood": _flood, "/huge": _huge,
    "/plan": _plan,
    "/unknown-update": _unknown_update, "/meta": _meta,
    "/crash": _crash, "/hang": _hang, "/sleep": _sleep, "/fail": _fail, "/fill": _fill, "/sh": _sh,
    "/recall": _recall, "/mode": _mode, "/config": _config, "/mcp": _mcp, "/dirs": _dirs,
}
