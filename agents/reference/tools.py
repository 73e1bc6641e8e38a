"""What the reference agent does during a turn beyond talking: tool calls, and its calls to the client (permissions,
files, terminals, questions) as far as the client offered them, and its own shell. The slash commands
(`commands.py`) and the per-turn fault flags (`faults.py`) use them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from typing import Any

import orjson

from acp.errors import RpcError
from acp.jsonrpc import Connection

from .example import ExampleAgent
from .store import Session


def _conn(agent: ExampleAgent) -> Connection:
    assert agent.conn is not None
    return agent.conn


def _call_id() -> str:
    return f"call-{uuid.uuid4().hex[:8]}"


async def _unless_cancelled(session: Session, asking: asyncio.Future[Any]) -> None:
    """Until `asking` is done or the turn is cancelled, whichever comes first."""
    cancelled: asyncio.Future[Any] = asyncio.ensure_future(session.cancel.wait())
    await asyncio.wait([asking, cancelled], return_when=asyncio.FIRST_COMPLETED)
    cancelled.cancel()


def not_offered(agent: ExampleAgent, method: str, mode: str = "form") -> str | None:
    """Why the client did not offer `method` (None: it did, or it is no capability's). A conformant agent calls
    nothing the client did not offer (`--ignore-client-capabilities` is the fault that does)."""
    caps = agent.client_caps
    fs = caps.get("fs") or {}
    offered = {"fs/read_text_file": fs.get("readTextFile") is True,
               "fs/write_text_file": fs.get("writeTextFile") is True,
               "elicitation/create": isinstance((caps.get("elicitation") or {}).get(mode), dict)}
    if method.startswith("terminal/"):
        offered[method] = caps.get("terminal") is True
    if agent.config.ignore_client_capabilities or offered.get(method, True):
        return None
    return f"{method}: not offered by the client (its clientCapabilities), so not called"


async def report(agent: ExampleAgent, session: Session, method: str, params: dict[str, Any],
                 gated: bool = True) -> None:
    """Call `method` of the client's and say its answer or error (or why it was not called)."""
    refused = not_offered(agent, method) if gated else None
    if refused is not None:
        await agent.message(session, refused)
        return
    try:
        result = await _conn(agent).request(method, params)
        await agent.message(session, f"{method} ok: {orjson.dumps(result).decode()}")
    except RpcError as err:
        await agent.message(session, f"{method} error {err.code}: {err.message}")


async def tool_call(agent: ExampleAgent, session: Session, title: str, result: str) -> None:
    """A tool call reported as pending, then completed with `result`."""
    call_id = _call_id()
    await agent.update(session, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title,
                                 "kind": "read", "status": "pending"})
    await agent.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed",
                                 "content": [{"type": "content", "content": {"type": "text", "text": result}}]})


async def ask_permission(agent: ExampleAgent, session: Session) -> Any:
    """Permission to write notes.txt: the client's outcome, or `{"error": ...}`."""
    call_id = _call_id()
    path = os.path.join(session.cwd, "notes.txt")
    tool = {"toolCallId": call_id, "title": "Write notes.txt", "kind": "edit", "status": "pending",
            "locations": [{"path": path}],
            "content": [{"type": "diff", "path": path, "oldText": "draft\n", "newText": "final\n"}]}
    request = asyncio.ensure_future(_conn(agent).request("session/request_permission", {
        "sessionId": session.session_id,
        "toolCall": tool,
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


async def ask_form(agent: ExampleAgent, session: Session) -> Any:
    """One form elicitation, its answer's action (or the error): a part of a question flood."""
    try:
        answer = await _conn(agent).request("elicitation/create", {
            "sessionId": session.session_id, "message": "Your name?", "mode": "form",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}})
    except RpcError as err:
        return {"error": err.to_dict()}
    return {"outcome": answer.get("action")} if isinstance(answer, dict) else answer


async def shell(agent: ExampleAgent, session: Session, command: str) -> str | None:
    """Run `command` with `sh -c` in the session's directory, as the agent's own process, streaming its output
    back as it comes (a tool call, then its output as message chunks, then the exit status)."""
    call_id = _call_id()
    await agent.update(session, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": f"sh: {command}",
                                 "kind": "execute", "status": "in_progress"})
    proc = await asyncio.create_subprocess_exec("sh", "-c", command, cwd=session.cwd,
                                                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(65536):
        await agent.message(session, chunk.decode("utf-8", "replace"))
        if session.cancel.is_set():
            proc.kill()
    status = await proc.wait()
    await agent.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                                 "status": "completed" if status == 0 else "failed",
                                 "content": [{"type": "content",
                                              "content": {"type": "text", "text": f"exit status {status}"}}]})
    return "cancelled" if session.cancel.is_set() else None


def _terminal_words(rest: str) -> tuple[dict[str, Any], list[dict[str, str]], str]:
    """`/term`'s flags (`--limit N`, `--cwd DIR` and the bare ones), its `--env NAME=VALUE`s, and its command."""
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
    return options, env, " ".join(words)


async def terminal(agent: ExampleAgent, session: Session, rest: str) -> str | None:
    """`/term [--limit N] [--cwd DIR] [--env NAME=VALUE]… [--keep] [--kill] [--detach] CMD`: CMD run with `sh -c`
    in a terminal of the client's (with those variables), embedded in a tool call; its exit and output asked for,
    and the terminal released (unless `--keep`: its id is said instead). `--kill` kills it at once. `--detach`
    ends the turn at once, the command left running (its id said; it ends with the session). A cancel kills and
    releases it."""
    conn = _conn(agent)
    refused = not_offered(agent, "terminal/create")
    if refused is not None:
        await agent.message(session, refused)
        return None
    options, env, command = _terminal_words(rest)
    params: dict[str, Any] = {"sessionId": session.session_id, "command": "sh", "args": ["-c", command]}
    if env:
        params["env"] = env
    if "--limit" in options:
        params["outputByteLimit"] = int(options["--limit"])
    if "--cwd" in options:
        params["cwd"] = options["--cwd"]
    try:
        created = await conn.request("terminal/create", params)
    except RpcError as err:
        await agent.message(session, f"terminal/create error {err.code}: {err.message}")
        return None
    terminal_id = created["terminalId"]
    call_id = _call_id()
    await agent.update(session, {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": f"$ {command}",
                                 "kind": "execute", "status": "in_progress",
                                 "content": [{"type": "terminal", "terminalId": terminal_id}]})
    if options.get("--detach"):
        await agent.message(session, f"terminal {terminal_id} detached")
        return None
    return await _run_terminal(agent, session, options, {"sessionId": session.session_id, "terminalId": terminal_id},
                               call_id)


async def _run_terminal(agent: ExampleAgent, session: Session, options: dict[str, Any], ids: dict[str, Any],
                        call_id: str) -> str | None:
    """A created terminal waited for (killed first with `--kill`, or when the turn is cancelled), its output
    asked for and said, and the terminal released unless it is to be kept."""
    conn = _conn(agent)
    if options.get("--kill"):
        await conn.request("terminal/kill", ids)
    waiting = asyncio.ensure_future(conn.request("terminal/wait_for_exit", ids))
    await _unless_cancelled(session, waiting)
    if not waiting.done():  # the turn was cancelled: the command is killed with it
        await conn.request("terminal/kill", ids)
        await waiting
    status = waiting.result()
    output = await conn.request("terminal/output", ids)
    await agent.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": call_id,
                                 "status": "completed" if status.get("exitCode") == 0 else "failed"})
    if options.get("--keep") or agent.config.keep_terminals:
        await agent.message(session, f"terminal {ids['terminalId']} kept")
    else:
        await conn.request("terminal/release", ids)
    await agent.message(session, f"terminal exit {orjson.dumps(status).decode()}; kept "
                        f"{len(output['output'].encode())} bytes, truncated {output['truncated']}; "
                        f"ends with {output['output'][-40:]!r}")
    return "cancelled" if session.cancel.is_set() else None


def _question(session: Session, kind: str) -> dict[str, Any]:
    """The `elicitation/create` params of `/elicit KIND`: a link to open, or a form (`bad`: one no client can take)."""
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
    return params


async def elicit(agent: ExampleAgent, session: Session, kind: str) -> str | None:
    """`/elicit form|url|bad`: ask the person at the client, say what came back."""
    conn = _conn(agent)
    refused = not_offered(agent, "elicitation/create", "url" if kind == "url" else "form")
    if refused is not None:
        await agent.message(session, refused)
        return None
    params = _question(session, kind)
    asking = asyncio.ensure_future(conn.request("elicitation/create", params))
    await _unless_cancelled(session, asking)
    try:
        answer = await asking  # after a cancel the client answers `cancel` itself
    except RpcError as err:
        await agent.message(session, f"elicitation/create error {err.code}: {err.message}")
        return None
    await agent.message(session, f"elicitation: {orjson.dumps(answer).decode()}")
    if kind == "url" and answer.get("action") == "accept":
        await conn.notify("elicitation/complete", {"elicitationId": params["elicitationId"]})
    # A client cancels the questions of a turn before it cancels the turn: the same stop, whichever comes first.
    return "cancelled" if session.cancel.is_set() or answer.get("action") == "cancel" else None


async def withdraw(agent: ExampleAgent, session: Session) -> None:
    """A permission request, withdrawn (`$/cancel_request`) as soon as it has gone out: the client must stop
    asking and answer -32800."""
    conn = _conn(agent)
    sent = asyncio.Event()

    def on_frame(direction: str, msg: dict[str, Any]) -> None:
        if direction == "out" and msg.get("method") == "session/request_permission":
            sent.set()

    conn.observers.append(on_frame)
    try:
        asking = asyncio.ensure_future(conn.request("session/request_permission", {
            "sessionId": session.session_id, "toolCall": {"toolCallId": "call-w", "title": "Withdrawn"},
            "options": [{"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"}]}))
        await sent.wait()
        # A round trip behind it: once this is answered, the client has begun asking (it handles requests in
        # the order they came); then the question is withdrawn.
        with contextlib.suppress(RpcError):
            await conn.request("fs/read_text_file", {"sessionId": session.session_id, "path": ".withdraw"})
        asking.cancel()  # the connection tells the client ($/cancel_request)
        with contextlib.suppress(asyncio.CancelledError):
            await asking
    finally:
        conn.observers.remove(on_frame)
    await agent.message(session, "withdrew the permission request")
