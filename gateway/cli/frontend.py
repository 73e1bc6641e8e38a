"""`acp-gateway sessions|start|status|resume|recover|prompt|history|permission|config|commands|fork|cancel-turn|cancel|
delete|diff|checkpoints|rewind|merge|discard|watch`:
a frontend in the terminal, on the client library. Human output by default, `--json` for machines.

Sessions are named by id or by the name given at start (the gateway takes either); `prompt` without one uses the
current directory's session, as acpx does. The gateway is the one `--url` or ACP_GATEWAY_URL names, else the one
`serve` last announced in the state directory. Exit status: 0 done (an "already terminal" answer, -32009, is
success: the API says so), 1 the gateway refused the request, 2 a usage error or no gateway to talk to, 130
interrupted (Ctrl-C).

Each verb is a row of `VERBS` (at the end): its help, its arguments and the coroutine that runs it."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from agents.paths import default_state_dir

from ..clients.chat_text import ChatPrinter
from ..clients.resume_reasons import resume_reason_words
from ..clients.view_text import (
    answer_command,
    describe_command,
    describe_event,
    describe_question,
    describe_request,
    option_line,
    pending_lines,
    permission_command,
    status_text,
    unapplied_lines,
    yes_no,
)
from ..error_codes import AGENT_FAILED, ALREADY_TERMINAL, NOT_RESUMABLE
from .argspec import Arg, Argument, OneOf, arg
from .form_rules import FieldRefused, form_answer
from .git_verbs import checkpoints as checkpoints_verb
from .git_verbs import diff as diff_verb
from .git_verbs import discard as discard_verb
from .git_verbs import merge as merge_verb
from .git_verbs import parse_against
from .git_verbs import rewind as rewind_verb
from .questions import StdinLines, ask_permission, ask_question, give_up, open_question, open_questions

# The client (websockets' client side) is imported when a verb runs: every command line, `serve` and `--help`
# included, imports this module for its verbs' rows (main.py), and needs none of it.
if TYPE_CHECKING:
    from ..clients.client import GatewayClient, OwnerSessionClient

DEFAULT_URL = "ws://127.0.0.1:8765/rpc"
URL_FILE = "url"  # written by `serve` in its state directory: where it listens
TERMINAL = ("CANCELLED", "FAILED", "COMPLETED")
# What `--state` takes: the states of docs/api.md (a wire-only verb imports nothing of the runtime; a unit test holds
# this beside gateway.runtime.states.SessionState).
SESSION_STATES = ("CREATED", "STARTING", "RUNNING", "WAITING_FOR_INPUT", "COMPLETED", "FAILED", "CANCELLED")
INTERRUPTED = 130  # the exit status of a command stopped by Ctrl-C: 128 + SIGINT, as shells report it

# The flags every verb takes: which gateway, as whom, and in what form to print.
CONNECTION: tuple[Arg, ...] = (
    arg("--url", default=None, help="the gateway (default: ACP_GATEWAY_URL, else where `serve` "
        f"listens, from the state directory's `{URL_FILE}`, else {DEFAULT_URL})"),
    arg("--token", help="default: ACP_GATEWAY_TOKEN, else the token file in --state-dir"),
    arg("--state-dir", type=Path, default=None,
        help="where to find the generated token (default: the per-user state directory)"),
    arg("--json", action="store_true", help="print JSON (events as JSON lines)"),
)
SESSION = arg("session_id", help="the session's id or name (see `acp-gateway sessions`)")


@dataclass(frozen=True)
class Verb:
    """A row of `VERBS`: `acp-gateway NAME`'s help, its arguments after the connection's, and what runs it (with
    a connected client; `args.url` and `args.token` resolved)."""

    help: str
    arguments: tuple[Argument, ...]
    run: Callable[[argparse.Namespace, GatewayClient], Awaitable[int]]

    @property
    def parser_arguments(self) -> tuple[Argument, ...]:
        return (*CONNECTION, *self.arguments)


def gateway_url(args: argparse.Namespace) -> str:
    """--url, else ACP_GATEWAY_URL, else where the gateway of this state directory said it listens, else the
    default address (read again at each reconnect: a restarted gateway may listen elsewhere)."""
    if args.url:
        return str(args.url)
    if os.environ.get("ACP_GATEWAY_URL"):
        return os.environ["ACP_GATEWAY_URL"]
    path = (args.state_dir or default_state_dir()) / URL_FILE
    try:
        announced = path.read_text().strip()
    except OSError:
        announced = ""
    return announced or DEFAULT_URL


def gateway_token(args: argparse.Namespace) -> str | None:
    if args.token:
        return str(args.token)
    if os.environ.get("ACP_GATEWAY_TOKEN"):
        return os.environ["ACP_GATEWAY_TOKEN"]
    path = (args.state_dir or default_state_dir()) / "token"
    return path.read_text().strip() if path.exists() else None


def _print(args: argparse.Namespace, value: Any, human: str) -> None:
    print(orjson.dumps(value).decode() if args.json else human)


def _view_line(view: dict[str, Any]) -> str:
    return (f"{view['session_id']}  {view['state']}; agent running: {yes_no(view['is_agent_running'])}"
            + (f"; name: {view['name']}" if view.get("name") else "")
            + (f"; error: {view['error_message']}" if view.get("error_message") else ""))


def _sign_in_lines(view: dict[str, Any], session_id: str) -> str:
    """What a session whose agent asks to be signed in offers, and how to answer."""
    auth = (view.get("config") or {}).get("auth")
    if not auth:
        return ""
    lines = ["\nthe agent asks to be signed in" + (f": {auth['reason']}" if auth.get("reason") else "")]
    for method in auth.get("methods") or []:
        needs = (" " + " ".join(f"{v}=VALUE" for v in method.get("vars") or [])) if method["kind"] == "env_var" else ""
        lines.append(f"  acp-gateway sign-in {session_id} {method['id']}{needs}    "
                     f"# {method['name']} ({method['kind']})")
    return "\n".join(lines)


async def run_frontend(args: argparse.Namespace) -> int:
    from ..clients.client import GatewayClient, HandshakeRefused, RpcCallError

    args.token = gateway_token(args)
    args.url_given = args.url
    args.url = gateway_url(args)
    try:
        client = await GatewayClient.connect(args.url, args.token)
    except HandshakeRefused as refused:  # the gateway is there and said no: its words name the token to set
        print(f"acp-gateway {args.command}: {refused}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"acp-gateway {args.command}: cannot connect to {args.url}: {exc} (is `acp-gateway serve` running? "
              "--url or ACP_GATEWAY_URL name another gateway)", file=sys.stderr)
        return 2
    try:
        return await VERBS[args.command].run(args, client)
    except RpcCallError as err:
        if err.code == ALREADY_TERMINAL:  # "treat as success" (docs/api.md): a second cancel, an answered request
            print(f"acp-gateway {args.command}: already done: {err.message} (code {err.code})", file=sys.stderr)
            return 0
        print(f"acp-gateway {args.command}: {err.message} (code {err.code})", file=sys.stderr)
        return 1
    except ConnectionError as exc:
        # The session is the gateway's, not this command's: a turn it started goes on (or, if the gateway
        # died, is closed as interrupted when it starts again).
        session = getattr(args, "session_id", None)
        then = f": `acp-gateway status {session}` says what became of the session" if session else ""
        why = f" ({exc})" if isinstance(exc, TurnNotFollowed) else ""
        if isinstance(exc, TurnNotFollowed) and session:  # no gateway to ask: what can be seen without one
            then = (f": `acp-gateway hosts` shows whether its agent still runs in its host; once a gateway serves "
                    f"again, `acp-gateway watch --session {session}` follows the session")
        print(f"acp-gateway {args.command}: the connection to the gateway at {args.url} closed{why}{then}",
              file=sys.stderr)
        return 2
    finally:
        await client.close()


async def _sessions(args: argparse.Namespace, client: GatewayClient) -> int:
    listed = await client.call("task.session.list", {"states": args.states} if args.states else {})
    lines = []
    for view in listed["sessions"]:
        needs = ""
        if view["state"] not in TERMINAL and not view["is_agent_running"]:
            status = await client.call("task.session.status", {"session_id": view["session_id"]})
            view.update(needs_resume=status["needs_resume"], resume_reason=status["resume_reason"])
            if status["needs_resume"] or status["resume_reason"] == "not_started":
                needs = f"  needs resume: {resume_reason_words(status['resume_reason'])}"
        tree = view.get("worktree")
        where = f"{tree['repo']} on {tree['branch']}" if tree else view["cwd"]  # a worktree: its repository, branch
        if view.get("host"):  # a directory of its remote host's
            where = f"{view['host']}:{where}"
        label = " · ".join(str(x) for x in (view.get("name"), view["title"], where) if x)
        lines.append(f"{view['session_id']}  {view['state']:18} {view['agent']:10} {label}{needs}")
    _print(args, listed, "\n".join(lines) or "no sessions")
    return 0


async def _start(args: argparse.Namespace, client: GatewayClient) -> int:
    cwd = os.getcwd() if args.cwd is None else args.cwd  # here: where the command runs
    params: dict[str, Any] = {"cwd": os.path.abspath(cwd), "wait_ready": not args.no_wait}
    if args.host is not None:  # a directory on that machine: taken as given, never resolved here
        if args.cwd is None or args.worktree is not None:
            print("acp-gateway start: --host needs --cwd (a directory on the remote host) and takes no --worktree",
                  file=sys.stderr)
            return 2
        params.update(cwd=args.cwd, host=args.host)
    elif args.worktree is not None:  # a worktree of its own, from the repository named (default: where it runs)
        params.pop("cwd")
        params["worktree"] = {"repo": os.path.abspath(args.worktree or cwd),
                              **{k: v for k, v in (("base", args.base), ("branch", args.branch)) if v}}
    elif args.base or args.branch:
        print("acp-gateway start: --base and --branch go with --worktree", file=sys.stderr)
        return 2
    params.update({k: v for k, v in (("agent", args.agent), ("title", args.title), ("name", args.name),
                                     ("description", args.description), ("task_id", args.task_id)) if v})
    try:
        params.update(_start_choices(args))
    except ValueError as exc:
        print(f"acp-gateway start: {exc}", file=sys.stderr)
        return 2
    view = await client.call("task.session.start", params)
    tree = view.get("worktree")
    _print(args, view, _view_line(view) + (f"\nworktree {tree['path']} on branch {tree['branch']} (from "
                                           f"{tree['base']})" if tree else "")
           + (f"\non remote host {view['host']}, in {view['cwd']}" if view.get("host") else "")
           + "".join(f"\n  {line}" for line in unapplied_lines(view["config"]))
           + _sign_in_lines(view, view["session_id"]))
    # 1: its agent could not start (the error says why), or waits for a sign-in (the lines above say how)
    return 1 if view["state"] in TERMINAL or (view["config"] or {}).get("auth") else 0


async def _commands(args: argparse.Namespace, client: GatewayClient) -> int:
    view = await client.call("task.session.get", {"session_id": args.session_id})
    commands = view["config"]["commands"]
    _print(args, commands, "\n".join(describe_command(c) for c in commands if isinstance(c, dict))
           or "the agent has announced no commands (yet: an agent announces them once its session is up)")
    return 0


async def _status(args: argparse.Namespace, client: GatewayClient) -> int:
    status = await client.call("task.session.status", {"session_id": args.session_id})
    _print(args, status, "\n".join([status_text(status), *pending_lines(status, args.session_id)])
           + _sign_in_lines(status, args.session_id))
    return 0


async def _sign_out(args: argparse.Namespace, client: GatewayClient) -> int:
    view = await client.call("task.session.logout", {"session_id": args.session_id})
    _print(args, view, _view_line(view) + "\nsigned out: the agent's next start asks for a sign-in if it needs one")
    return 0


async def _sign_in(args: argparse.Namespace, client: GatewayClient) -> int:
    given: dict[str, str] = dict(pair.partition("=")[::2] for pair in args.values)
    for name, value in given.items():
        if value == "-":  # typed, not on the command line (where `ps` and the shell's history would keep it)
            given[name] = (getpass.getpass(f"{name}: ") if sys.stdin.isatty()
                           else sys.stdin.readline().rstrip("\n"))
    values = given or None
    # A `terminal` method runs the agent's own login program, whose output (a link to open, a code to enter) is
    # what the person needs while the call waits: the session's `terminal_*` events of it are printed as they come.
    asked = ((await client.call("task.session.status", {"session_id": args.session_id})).get("config") or {})
    kinds = {m.get("id"): m.get("kind") for m in (asked.get("auth") or {}).get("methods") or []}
    await client.call("task.session.subscribe", {"session_id": args.session_id})
    chat = ChatPrinter(sys.stderr if args.json else sys.stdout)  # --json keeps standard output for the answer
    call = asyncio.ensure_future(client.call("task.session.authenticate", {
        "session_id": args.session_id, "method_id": args.method_id, "values": values}))
    try:
        await _login_output(client, call, chat, kinds.get(args.method_id) == "terminal")
    finally:
        call.cancel()  # done, unless this command was interrupted
        chat.end()
    view = call.result()
    _print(args, view, _view_line(view) + _sign_in_lines(view, args.session_id))
    return 0 if view["is_agent_running"] else 1


LOGIN_TERMINAL = "login-"  # the id of a terminal sign-in's terminal begins so (gateway/runtime/launcher.py)
LOGIN_TAIL_SECONDS = 10.0  # how long the login's last events may trail the call's answer


async def _login_output(client: GatewayClient, call: asyncio.Future[Any], chat: ChatPrinter, login: bool) -> None:
    """Prints the login terminal's events until `call` is answered and, for a `login` (a terminal method), the
    login's end is printed: the gateway may answer ahead of the events it has queued (`LOGIN_TAIL_SECONDS` bounds
    that wait). A refusal before the login ran has no events to wait for."""
    from ..clients.client import RpcCallError

    running: set[str] = set()
    ended = False

    def finished() -> bool:
        if not call.done():
            return False
        error = call.exception()
        ran = error is None or (isinstance(error, RpcCallError) and error.code == AGENT_FAILED)
        return not (login and ran) or (ended and not running)

    while not finished():
        note: asyncio.Future[Any] = asyncio.ensure_future(client.notifications.get())
        if call.done():
            done, _ = await asyncio.wait({note}, timeout=LOGIN_TAIL_SECONDS)
            if note not in done:
                note.cancel()
                return  # the call's answer is in, the login's end never came: nothing more to wait for
        else:
            done, _ = await asyncio.wait({note, call}, return_when=asyncio.FIRST_COMPLETED)
            if note not in done:
                note.cancel()
                continue
        event = note.result().get("params") or {}
        kind, data = str(event.get("type")), event.get("data") or {}
        terminal_id = str(data.get("terminal_id", ""))
        if not kind.startswith("terminal_") or not terminal_id.startswith(LOGIN_TERMINAL):
            continue
        if kind == "terminal_started":
            running.add(terminal_id)
            chat.note("the agent's sign-in program runs (its output follows; it takes no input):")
        chat.terminal(kind, data, colour=chat.out.isatty())
        if kind == "terminal_exited":
            running.discard(terminal_id)
            ended = True
            chat.note("the sign-in program ended")


async def _delete(args: argparse.Namespace, client: GatewayClient) -> int:
    await client.call("task.session.delete", {"session_id": args.session_id, "discard": args.discard})
    _print(args, {"deleted": args.session_id}, f"deleted {args.session_id}")
    return 0


async def _fork(args: argparse.Namespace, client: GatewayClient) -> int:
    fork_params = {"session_id": args.session_id, **{k: v for k, v in (("title", args.title), ("name", args.name))
                                                   if v}}
    view = await client.call("task.session.fork", fork_params)
    _print(args, view, _view_line(view) + f"\nforked from {view['forked_from']}: "
           f"acp-gateway prompt {view['name'] or view['session_id']} '…' goes on from there")
    return 0


async def _cancel_turn(args: argparse.Namespace, client: GatewayClient) -> int:
    """Only a running turn is cancelled: a turn that starts after the look is not this command's to stop."""
    view = await client.call("task.session.get", {"session_id": args.session_id})
    if view["state"] != "RUNNING":  # RUNNING: a turn runs (docs/api.md, states)
        _print(args, {**view, "cancelled": False},
               f"session {args.session_id} has no turn running ({view['state']}); nothing to cancel")
        return 0
    view = await client.call("task.session.cancel_turn", {"session_id": args.session_id})
    _print(args, {**view, "cancelled": True}, _view_line(view) + "\nthe turn was cancelled")
    return 0


async def _cancel(args: argparse.Namespace, client: GatewayClient) -> int:
    """On the owner-session client, which takes an "already terminal" answer as success."""
    from ..clients.client import OwnerSessionClient

    await client.close()
    osc = OwnerSessionClient(args.url, args.token)
    osc.start()
    await asyncio.wait_for(osc.when_live(), 30)
    try:
        result = await osc.cancel(args.session_id)
    finally:
        await osc.close()
    _print(args, result, f"{result['state']}")
    return 0


async def _history(args: argparse.Namespace, client: GatewayClient) -> int:
    page = await client.call("task.session.history", {"session_id": args.session_id, "after": args.after,
                                                      "limit": args.limit})
    lines = [f"[{e['kind']}{' ' + e['name'] if e['name'] else ''}] {e['content']}".rstrip()
             for e in page["entries"]]
    if page["next"] is not None:
        lines.append(f"(more: --after {page['next']})")
    _print(args, page, "\n".join(lines) or "no history")
    return 0


async def _answer(args: argparse.Namespace, client: GatewayClient) -> int:
    if args.request_id is None and (args.decline or args.cancel or args.open):
        # Not ignored: the only question waiting is the one meant; with several (or none), which one is asked for.
        flag = "--decline" if args.decline else "--cancel" if args.cancel else "--open"
        waiting = await open_questions(client, args.session_id)
        if len(waiting) != 1:
            which = (f"{len(waiting)} are waiting: " + ", ".join(str(q["request_id"]) for q in waiting) if waiting
                     else "no question of the agent is waiting")
            print(f"acp-gateway answer: {flag} needs the REQUEST_ID of the question ({which}): "
                  f"acp-gateway answer {args.session_id} REQUEST_ID {flag}", file=sys.stderr)
            return 2
        args.request_id = str(waiting[0]["request_id"])
        if not args.json:
            print(f"question {args.request_id} (the only one waiting):")
    if args.request_id is None:
        waiting = await open_questions(client, args.session_id)
        _print(args, waiting, "\n\n".join(f"{describe_question(q)}\n  answer: "
                                          f"{answer_command(args.session_id, q['request_id'], q.get('mode'))}"
                                          for q in waiting) or "no question of the agent is waiting")
        return 0
    action = "decline" if args.decline else "cancel" if args.cancel else "accept"
    reply: dict[str, Any] = {"session_id": args.session_id, "request_id": args.request_id, "action": action}
    if action == "accept" and not args.open:
        question = await open_question(client, args.session_id, args.request_id)
        if question is not None and not args.fields and not args.json and sys.stdin.isatty():
            # Nothing given, a person at a terminal: the form is asked here, field by field, as `prompt` asks it.
            chat = ChatPrinter(sys.stdout)
            chat.note(describe_question(question))
            return 0 if await ask_question(client, args.session_id, question, chat, StdinLines()) else 1
        try:
            reply["content"] = form_answer(question.get("requested_schema") if question else None, args.fields)
        except FieldRefused as refused:
            print(f"acp-gateway answer: {refused}; nothing was sent: the question stays open", file=sys.stderr)
            return 2
    answered = await client.call("task.session.elicitation.respond", reply)
    _print(args, answered, f"answered: {answered['action']}")
    return 0


async def _resume(args: argparse.Namespace, client: GatewayClient) -> int:
    view = await client.call("task.session.resume", {"session_id": args.session_id})
    how = "its agent was already running" if view["already_running"] else view.get("how")
    _print(args, view, _view_line(view) + (f"\n{how}" if how else ""))
    return 0 if view["is_agent_running"] else 1


async def _recover(args: argparse.Namespace, client: GatewayClient) -> int:
    view = await client.call("task.session.recover", {"session_id": args.session_id,
                                                      "action": "fresh_start" if args.fresh else "retry"})
    _print(args, view, _view_line(view) + ("\nits agent was already running" if view["already_running"] else ""))
    return 0 if view["is_agent_running"] else 1


async def _watch(args: argparse.Namespace, connected: GatewayClient) -> int:
    """Every event, as it happens, across reconnects: the client library keeps the cursor, resubscribes from it
    after a lost connection (a gateway restart), and this says when the link went and came back."""
    from ..clients.client import GatewayClient, HandshakeRefused, OwnerSessionClient

    await connected.close()  # the owner-session client below connects (and reconnects) on its own
    token, said = args.token, {"lost": False}

    def on_link(up: bool, cursor: int | None) -> None:
        if up and said["lost"]:
            print(f"acp-gateway watch: reconnected to {client.url}; going on after event {cursor}", file=sys.stderr,
                  flush=True)
        elif not up and not said["lost"]:
            print(f"acp-gateway watch: connection to {client.url} lost; reconnecting (nothing after event {cursor} "
                  "is missed)", file=sys.stderr, flush=True)
        said["lost"] = not up

    def on_event(event: dict[str, Any]) -> None:
        if event.get("type") in ("heartbeat", "caught_up"):
            return
        if args.session_id and event.get("session_id") not in wanted:
            return
        print(orjson.dumps(event).decode() if args.json else describe_event(event), flush=True)

    client = OwnerSessionClient(args.url, token,
                                connector=lambda _url, tok: GatewayClient.connect(_reaimed(client, args), tok))
    client.cursor = args.since
    client.on_event.append(on_event)
    client.on_link.append(on_link)
    wanted: set[str] = set()
    if args.session_id:  # a name is resolved once, to the id the events carry
        probe = await GatewayClient.connect(args.url, token)
        try:
            wanted.add((await probe.call("task.session.get", {"session_id": args.session_id}))["session_id"])
        finally:
            await probe.close()
    client.start()
    try:
        await client.wait_closed()  # returns at close(); raises if the gateway refuses the token later
    except HandshakeRefused as refused:
        print(f"acp-gateway watch: {refused}", file=sys.stderr)
        return 2
    finally:
        await client.close()
    return 0


def _reaimed(client: OwnerSessionClient, args: argparse.Namespace) -> str:
    client.url = _aimed_again(args)
    return client.url


def _aimed_again(args: argparse.Namespace) -> str:
    """The address to (re)connect to: a restarted gateway may have announced another one in the state directory."""
    args.url = args.url_given
    args.url = gateway_url(args)
    return str(args.url)


async def _directory_session(args: argparse.Namespace, client: GatewayClient) -> str:
    """acpx's default: the newest session of this directory that has not ended, or a new one started for it."""
    from ..clients.client import RpcCallError

    cwd = os.path.abspath(os.getcwd())
    listed = await client.call("task.session.list", {"cwd": cwd, "states": ["CREATED", "STARTING", "RUNNING",
                                                                             "WAITING_FOR_INPUT"], "limit": 1})
    if listed["sessions"]:
        found = listed["sessions"][0]
        print(f"acp-gateway prompt: session {found.get('name') or found['session_id']} of {cwd}", file=sys.stderr)
        return str(found["session_id"])
    params: dict[str, Any] = {"cwd": cwd, "wait_ready": True, **({"agent": args.agent} if args.agent else {})}
    view = await client.call("task.session.start", params)
    print(f"acp-gateway prompt: started session {view['session_id']} for {cwd} (agent {view['agent']})",
          file=sys.stderr)
    if view["state"] in TERMINAL:
        raise RpcCallError(NOT_RESUMABLE, f"the session's agent could not start: {view['error_message']}")
    return str(view["session_id"])


def _start_choices(args: argparse.Namespace) -> dict[str, Any]:
    """`start`'s --mode, --config, --add-dir and --mcp-server as `task.session.start` params."""
    config: dict[str, Any] = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--config {item!r}: expected ID=VALUE")
        config[key] = {"true": True, "false": False}.get(value, value)
    if args.mode:
        config["mode"] = args.mode
    params: dict[str, Any] = {"config": config} if config else {}
    if args.add_dirs:
        params["additional_directories"] = [os.path.abspath(d) for d in args.add_dirs]
    if args.mcp_servers:
        try:
            params["mcp_servers"] = [orjson.loads(text) for text in args.mcp_servers]
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"--mcp-server: not JSON ({exc})") from None
    return params


async def _config(args: argparse.Namespace, client: GatewayClient) -> int:
    view = await client.call("task.session.get", {"session_id": args.session_id})
    config = view["config"]
    if args.option_id is None:
        lines = [option_line(o, config["chosen"]) for o in config["options"]]
        usage = config.get("usage")
        if isinstance(usage, dict) and "used" in usage:
            cost = usage.get("cost") or {}
            lines.append(f"usage: {usage['used']} of {usage.get('size')} tokens"
                         + (f", {cost.get('amount')} {cost.get('currency')}" if cost else ""))
        lines += unapplied_lines(config)
        _print(args, config, "\n".join(lines) or "the agent offers no options for this session")
        return 0
    if args.unset:
        view = await client.call("task.session.set_config_option", {"session_id": args.session_id,
                                                                   "config_id": args.option_id, "value": None})
        _print(args, view["config"], f"{args.option_id}: no longer chosen")
        return 0
    if args.value is None:
        print("acp-gateway config: give both ID and VALUE to set an option (or neither to list them)", file=sys.stderr)
        return 2
    options = {o.get("id"): o for o in config["options"]}
    option = options.get(args.option_id)
    if option is None and args.option_id in ("mode", "model"):  # the mode or model, whatever its id here
        option = next((o for o in config["options"] if o.get("category") == args.option_id), None)
    value: str | bool = args.value
    if option is not None and option.get("type") == "boolean":
        if args.value.lower() not in ("true", "false"):
            print(f"acp-gateway config: {args.option_id} is a boolean: give true or false", file=sys.stderr)
            return 2
        value = args.value.lower() == "true"
    option_id = str(option.get("id")) if option is not None else args.option_id
    view = await client.call("task.session.set_config_option", {"session_id": args.session_id,
                                                               "config_id": option_id, "value": value})
    updated = next((o for o in view["config"]["options"] if o.get("id") == option_id), None)
    _print(args, view["config"], option_line(updated, view["config"]["chosen"]) if updated else "set")
    return 0


async def _pending(client: GatewayClient, session_id: str) -> list[dict[str, Any]]:
    """The session's permission requests still waiting (re-offered to a new subscription, then `caught_up`)."""
    await client.call("task.session.subscribe", {"session_id": session_id})
    found: list[dict[str, Any]] = []
    while True:
        event = (await asyncio.wait_for(client.notifications.get(), 30)).get("params") or {}
        if event.get("type") == "permission_requested" and event["data"].get("reoffered"):
            found.append(event["data"])
        elif event.get("type") == "caught_up":
            return found


async def _permission(args: argparse.Namespace, client: GatewayClient) -> int:
    if args.request_id is None:
        pending = await _pending(client, args.session_id)
        _print(args, pending, "\n".join(f"{describe_request(p)}\n  answer: "
                                        f"{permission_command(args.session_id, p['request_id'])}" for p in pending)
               or "no permission request is waiting")
        return 0
    if bool(args.option_id) == bool(args.cancel):
        print("acp-gateway permission: give an OPTION_ID or --cancel", file=sys.stderr)
        return 2
    answer: dict[str, Any] = {"session_id": args.session_id, "request_id": args.request_id}
    answer.update({"cancelled": True} if args.cancel else {"option_id": args.option_id})
    await client.call("task.session.permission.respond", answer)
    _print(args, {"answered": args.request_id}, "answered")
    return 0


class TurnNotFollowed(ConnectionError):
    """`prompt` lost its gateway mid-turn and could not follow the turn again: why, in words."""


# How long `prompt` tries to reach a gateway that went away mid-turn (a restart, an upgrade): its turn goes on in the
# gateway (or in the agent's host, docs/agent-hosts.md), and this terminal follows it again when the gateway is back.
RECONNECT_FOR = 120.0
RECONNECT_SAY_EVERY = 15.0
RECONNECT_PAUSE_CAP = 2.0


async def _prompt(args: argparse.Namespace, client: GatewayClient) -> int:
    if args.session_id is None:
        args.session_id = await _directory_session(args, client)
    cursor = (await client.call("task.session.subscribe", {"session_id": args.session_id}))["cursor"]
    chat = ChatPrinter(sys.stdout)
    interactive = sys.stdin.isatty() and not args.json
    turn: asyncio.Future[Any] = asyncio.ensure_future(client.call("task.session.prompt", {
        "session_id": args.session_id, "prompt": args.text}))
    lines = StdinLines() if interactive else None
    asking: asyncio.Future[Any] | None = None  # a permission request or a question being asked on the terminal
    question: dict[str, Any] | None = None  # the question `asking` asks, if it is one
    started = False  # the turn's `turn_started` came: the gateway took the prompt
    ended: dict[str, Any] | None = None  # the turn's `turn_ended`, when it came
    reconnected: GatewayClient | None = None  # the connection that replaced the first one, if any
    closed = asyncio.ensure_future(client.ws.wait_closed())
    try:
        while True:
            if closed.done() and ended is None and not (turn.done() and not turn.exception()):
                # The gateway went away mid-turn: the turn goes on there; follow it again from the last event seen
                # (whether it took the prompt at all, its events after the reconnect say).
                if getattr(args, "reconnect_for", RECONNECT_FOR) <= 0:
                    raise ConnectionError("the gateway went away")
                _let_go(turn)
                if asking is not None:
                    _let_go(asking)  # asked again when the gateway offers the request again after the reconnect
                client = reconnected = await _follow_again(args, cursor, reconnected)
                closed = asyncio.ensure_future(client.ws.wait_closed())
                turn = asyncio.get_running_loop().create_future()  # its answer is the `turn_ended` event now
            if turn.done() and (ended is not None or turn.exception() is not None or closed.done()):
                break  # refused, or answered and every event of the turn printed (or no more can come)
            note = asyncio.ensure_future(client.notifications.get())
            # The answer may come before the turn's last events (the gateway answers calls ahead of a backlog):
            # once it is in, the events are read on to the turn's end.
            await asyncio.wait({note, closed} if turn.done() else {note, turn, closed},
                               return_when=asyncio.FIRST_COMPLETED)
            if not note.done():
                note.cancel()
                continue
            event = note.result().get("params") or {}
            if isinstance(event.get("id"), int):
                cursor = event["id"]
            if event.get("type") == "turn_started":
                started = True
            if event.get("type") == "caught_up" and reconnected is not None and not started:
                raise TurnNotFollowed("it went away before it took the prompt: send it again")
            if event.get("type") == "turn_ended" and started:  # the subscription is this session's (named or not)
                ended = event.get("data") or {}
                if reconnected is not None and not turn.done():  # after a reconnect: the event is the answer
                    turn.set_result({"stop_reason": ended.get("stop_reason")})
            if args.json:
                if event.get("type") not in ("heartbeat", "caught_up"):
                    print(orjson.dumps(event).decode(), flush=True)
            elif event.get("type") == "session_update":
                chat.update(event["data"].get("update") or {}, bool(event["data"].get("replay")))
            elif str(event.get("type")).startswith("terminal_"):
                chat.terminal(str(event["type"]), event["data"], colour=sys.stdout.isatty())
            elif event.get("type") == "permission_requested":
                chat.note(describe_request(event["data"]))
                if lines is not None and (asking is None or asking.done()):
                    asking, question = asyncio.ensure_future(ask_permission(client, args.session_id, event["data"],
                                                                            chat, lines)), None
                elif not interactive:
                    chat.note("  answer with: " + permission_command(args.session_id, event["data"]["request_id"]))
            elif event.get("type") == "elicitation_requested":
                chat.note(describe_question(event["data"]))
                if lines is not None and (asking is None or asking.done()):
                    question = event["data"]
                    asking = asyncio.ensure_future(ask_question(client, args.session_id, question, chat, lines))
                elif not interactive:
                    chat.note("  answer with: " + answer_command(args.session_id, event["data"]["request_id"],
                                                                 event["data"].get("mode")))
            elif event.get("type") == "elicitation_resolved":
                resolved = event["data"]
                if (asking is not None and not asking.done() and question is not None and lines is not None
                        and lines.waiting and question["request_id"] == resolved["request_id"]):
                    asking.cancel()  # answered from elsewhere while this terminal waited for a line: stop asking
                chat.note(f"question {resolved['request_id']}: {resolved['action']} (by {resolved['by']})")
            elif event.get("type") == "permission_resolved":
                chat.note(f"permission {event['data']['request_id']}: "
                          f"{orjson.dumps(event['data']['outcome']).decode()} (by {event['data'].get('by')})")
        result = turn.result()
    except asyncio.CancelledError:
        # Ctrl-C. The turn goes on without this terminal (docs/cli.md), but a question being asked here is
        # cancelled: no one would be left to answer it, and the agent would wait on it.
        if asking is not None and not asking.done() and question is not None:
            asking.cancel()
            await give_up(client, args.session_id, question, chat, "cancel")
        raise
    finally:
        closed.cancel()
        # Left behind on Ctrl-C, the turn's call would fail when the connection closes, with no one to read it
        # (asyncio would print "Task exception was never retrieved" and a traceback): it is let go here.
        for task in (turn, asking):
            if task is not None:
                _let_go(task)
        chat.end()
        if reconnected is not None:
            await reconnected.close()
    _print(args, result, f"stop reason: {result['stop_reason']}")
    return 0


async def _follow_again(args: argparse.Namespace, cursor: int, previous: GatewayClient | None) -> GatewayClient:
    """A new connection to the gateway (found again as at the start: a restarted one may listen elsewhere),
    subscribed to the session after event `cursor`; tried for `--reconnect-for` seconds."""
    import random

    from ..clients.client import GatewayClient, HandshakeRefused
    from ..clients.policy import backoff_delay

    if previous is not None:
        await previous.close()
    wait = float(getattr(args, "reconnect_for", RECONNECT_FOR))
    print(f"acp-gateway prompt: the connection to {args.url} closed; reconnecting for up to {wait:.0f} s "
          "(a turn its agent host keeps goes on meanwhile)", file=sys.stderr, flush=True)
    began = asyncio.get_running_loop().time()
    deadline, said_at = began + wait, began
    attempt = 0
    while True:
        now = asyncio.get_running_loop().time()
        if now - said_at >= RECONNECT_SAY_EVERY:  # alive, and how long it has left
            said_at = now
            print(f"acp-gateway prompt: still reconnecting to {args.url} ({now - began:.0f} s of "
                  f"{wait:.0f} s)", file=sys.stderr, flush=True)
        try:
            client = await GatewayClient.connect(_aimed_again(args), args.token)
        except HandshakeRefused as refused:
            raise TurnNotFollowed(f"it refused the reconnect: {refused}") from None
        except Exception:
            # A restart takes about a second: retried soon, never more than RECONNECT_PAUSE_CAP apart.
            pause = backoff_delay(attempt, random.random(), RECONNECT_PAUSE_CAP)
            attempt += 1
            if asyncio.get_running_loop().time() + pause > deadline:
                raise TurnNotFollowed(f"it did not come back within {wait:.0f} s") from None
            await asyncio.sleep(pause)
            continue
        try:
            await client.call("task.session.subscribe", {"session_id": args.session_id, "since": cursor})
        except Exception:
            await client.close()
            raise
        print(f"acp-gateway prompt: reconnected to {args.url}; going on after event {cursor}", file=sys.stderr,
              flush=True)
        return client


def _let_go(task: asyncio.Future[Any]) -> None:
    """Cancel `task` if it runs, and take its outcome whenever it comes: no one waits for it any more."""
    task.cancel()
    task.add_done_callback(lambda done: None if done.cancelled() else done.exception())


def session_state(text: str) -> str:
    """`--state`: a session state, in any case (`waiting_for_input` is WAITING_FOR_INPUT)."""
    if text.upper() not in SESSION_STATES:
        raise argparse.ArgumentTypeError(f"no state {text!r}: give one of {', '.join(SESSION_STATES)}")
    return text.upper()


def count_between(low: int, high: int) -> Callable[[str], int]:
    """A flag's whole number from `low` to `high`, refused as the gateway would refuse it, but naming the flag."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"give a number from {low} to {high}, not {value}")
        return value
    parse.__name__ = "number"
    return parse


# The verbs, in the order `acp-gateway --help` lists them: name -> help, arguments (after CONNECTION's), handler.
VERBS: dict[str, Verb] = {
    "sessions": Verb("list your sessions, newest first", (
        arg("--state", action="append", dest="states", default=None, type=session_state,
            help=f"only sessions in this state, in any case: {', '.join(SESSION_STATES)} (repeatable)"),
    ), _sessions),
    "start": Verb("start a session (its id is printed; the agent is ready when it returns)", (
        arg("--agent", help="agent profile id (default: the gateway's default agent)"),
        arg("--cwd", default=None, help="the session's working directory (default: here)"),
        arg("--title", help="a title for the session"),
        arg("--name", help="a name for the session, accepted wherever its id is (unique among yours)"),
        arg("--description", help="the task: sent as the first prompt"),
        arg("--task-id", help="group the session under this task id of yours"),
        arg("--no-wait", action="store_true", help="return once the session exists, before its agent is ready"),
        arg("--mode", help="the session's mode (kept across restores)"),
        arg("--config", action="append", default=[], metavar="ID=VALUE",
            help="an option to choose, by its id, e.g. model=sonnet (repeatable; true/false for a boolean option; "
                 "kept across restores)"),
        arg("--add-dir", action="append", default=[], metavar="DIR", dest="add_dirs",
            help="an additional directory the agent may work in (repeatable)"),
        arg("--mcp-server", action="append", default=[], metavar="JSON", dest="mcp_servers",
            help="an MCP server, as ACP's McpServer JSON (repeatable)"),
        arg("--worktree", nargs="?", const="", default=None, metavar="REPO",
            help="run it in a git worktree of its own, made from REPO (a repository's top; default: --cwd or "
                 "here) on a new branch"),
        arg("--base", help="with --worktree: the branch, tag or commit it starts from (default: the repository's "
                           "HEAD)"),
        arg("--branch", help="with --worktree: its branch (default: acp/NAME or acp/SESSION-ID)"),
        arg("--host", help="run its agent on this remote host (a name the gateway's configuration gives under "
                           "[remote_hosts]); --cwd is then a directory there"),
    ), _start),
    "status": Verb("a session's status: state, whether its agent runs, whether it needs a resume", (SESSION,), _status),
    "resume": Verb("bring a session's agent back (by the restore rules)", (SESSION,), _resume),
    "recover": Verb("retry a session whose restore failed, or start its agent afresh (--fresh: a new ACP session; "
                    "a worktree that is gone is made again from its branch)", (
        SESSION, arg("--fresh", action="store_true", help="a fresh start instead of a retry"),
    ), _recover),
    "prompt": Verb("send a prompt and stream the answer; permission requests and questions are asked here on a "
                   "terminal", (
        arg("session_id", nargs="?", help="the session's id or name (default: this directory's session, started if "
            "there is none)"),
        arg("--agent", help="the agent of a session started for this directory (default: the gateway's default "
            "agent)"),
        arg("--reconnect-for", type=float, default=RECONNECT_FOR, metavar="SECONDS",
            help=f"how long to try to reach a gateway that went away mid-turn, to follow the turn again (default "
            f"{RECONNECT_FOR:.0f}; 0: say so and exit 2 at once)"),
        arg("text", help="the prompt"),
    ), _prompt),
    "history": Verb("what a session recorded: your messages, the agent's, tool calls", (
        SESSION,
        arg("--after", type=count_between(0, 2**63 - 1), default=0, help="only entries after this entry id"),
        arg("--limit", type=count_between(1, 1000), default=100, help="at most this many entries (1 to 1000)"),
    ), _history),
    "permission": Verb("answer a permission request (list the pending ones without REQUEST_ID)", (
        SESSION,
        arg("request_id", nargs="?", help="the request (from `permission_requested`)"),
        arg("option_id", nargs="?", help="the option to choose (its optionId)"),
        arg("--cancel", action="store_true", help="answer `cancelled` instead of an option"),
    ), _permission),
    "sign-in": Verb("sign a session's agent in with one of the methods it offers (VAR=VALUE for an API key), and "
                    "start it", (
        SESSION,
        arg("method_id", help="one of the methods `acp-gateway status ID` lists"),
        arg("values", nargs="*", metavar="VAR=VALUE", help="an API-key method's variables (kept for your agents of "
            "this profile, never shown again); VAR=- asks for the value (or reads it from standard input), so it is "
            "not on the command line"),
    ), _sign_in),
    "sign-out": Verb("sign a session's agent out, and forget what you gave its profile's agents to sign in",
                     (SESSION,), _sign_out),
    "answer": Verb("answer an agent's question (an elicitation): FIELD=VALUE … for its form, or "
                   "--open/--decline/--cancel (list the waiting ones without REQUEST_ID)", (
        SESSION,
        arg("request_id", nargs="?", help="the question (from `elicitation_requested`, as `prompt` and `status` "
            "print it; without it, the questions waiting are listed)"),
        arg("fields", nargs="*", metavar="FIELD=VALUE", help="the form's answer, a field at a time (numbers, "
            "true/false and comma-separated lists as the form asks; each is checked before anything is sent). "
            "None on a terminal: the form is asked field by field"),
        OneOf((arg("--open", action="store_true", help="a link: say you opened it (accept)"),
               arg("--decline", action="store_true", help="decline to answer"),
               arg("--cancel", action="store_true", help="cancel the question"))),
    ), _answer),
    "config": Verb("a session's options (mode, model, …) and what was chosen; with ID VALUE, set one and keep it", (
        SESSION,
        arg("option_id", nargs="?", help="the option to set (its id; `mode` and `model` also name the agent's mode "
            "and model whatever their ids)"),
        arg("value", nargs="?", help="the value (true or false for a boolean option)"),
        arg("--unset", action="store_true", help="forget the choice of OPTION_ID: the agent keeps its value, and no "
            "restore sets it again"),
    ), _config),
    "commands": Verb("the agent's slash commands in a session (send one as a prompt: acp-gateway prompt ID "
                     "'/name …')", (SESSION,), _commands),
    "fork": Verb("a new session with a session's conversation so far, where its agent forks sessions; the original "
                 "goes on", (
        SESSION,
        arg("--title", help="the new session's title (default: the original's, marked (fork))"),
        arg("--name", help="a name for the new session, accepted wherever its id is"),
    ), _fork),
    "cancel-turn": Verb("stop the running turn; the session stays", (SESSION,), _cancel_turn),
    "cancel": Verb("end a session for good", (SESSION,), _cancel),
    "delete": Verb("delete a session and its history (and its worktree)", (
        SESSION,
        arg("--discard", action="store_true", help="a worktree session: delete its branch too"),
    ), _delete),
    "diff": Verb("what a session changed in its files (a worktree's: since its base; else since its first "
                 "checkpoint)", (
        SESSION,
        arg("--against", metavar="N|base|head", type=parse_against,
            help="a checkpoint's number, base, or head (the commit checked out)"),
        arg("--stat", action="store_true", help="the files only, without the patch"),
    ), diff_verb),
    "checkpoints": Verb("a session's checkpoints: its files at the start of each turn", (SESSION,),
                        checkpoints_verb),
    "rewind": Verb("put a session's files back as at a checkpoint (its agent is told at its next prompt)", (
        SESSION, arg("checkpoint", type=count_between(1, 2**63 - 1), help="the checkpoint's number (see checkpoints)"),
    ), rewind_verb),
    "merge": Verb("merge a worktree session's branch (its files as they are now) into its base branch",
                  (SESSION,), merge_verb),
    "discard": Verb("delete a worktree session with its worktree and its branch", (SESSION,), discard_verb),
    "watch": Verb("print your events as they happen; reconnects and goes on from where it was across gateway "
                  "restarts", (
        arg("--session", dest="session_id", default=None, help="only this session's events"),
        arg("--since", type=int, default=None, help="replay the events after this event id first"),
    ), _watch),
}
