"""`acp-gateway sessions|status|resume|prompt|cancel|watch`: a small frontend on the client library."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson

from agents.profiles import default_state_dir

from .client import GatewayClient, OwnerSessionClient, RpcCallError

COMMANDS = ("sessions", "status", "resume", "prompt", "cancel", "watch")


def add_parsers(sub: Any) -> None:
    for name, help_text in (("sessions", "list your sessions"), ("status", "a session's status"),
                            ("resume", "resume a session"), ("prompt", "send a prompt and stream the answer"),
                            ("cancel", "cancel a session for good"), ("watch", "print live events")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--url", default=os.environ.get("ACP_GATEWAY_URL", "ws://127.0.0.1:8765/rpc"))
        p.add_argument("--token", help="default: ACP_GATEWAY_TOKEN, else the token file in --state-dir")
        p.add_argument("--state-dir", type=Path, default=None)
        p.add_argument("--json", action="store_true", help="print JSON")
        if name in ("status", "resume", "cancel"):
            p.add_argument("session_id")
        if name == "prompt":
            p.add_argument("session_id")
            p.add_argument("text")
        if name == "watch":
            p.add_argument("--session", dest="session_id", default=None)
            p.add_argument("--since", type=int, default=None)
        if name == "sessions":
            p.add_argument("--state", action="append", dest="states", default=None)


def _token(args: argparse.Namespace) -> str | None:
    if args.token:
        return str(args.token)
    if os.environ.get("ACP_GATEWAY_TOKEN"):
        return os.environ["ACP_GATEWAY_TOKEN"]
    path = (args.state_dir or default_state_dir()) / "token"
    return path.read_text().strip() if path.exists() else None


def _print(args: argparse.Namespace, value: Any, human: str) -> None:
    print(orjson.dumps(value).decode() if args.json else human)


def _describe_event(event: dict[str, Any]) -> str:
    data = event.get("data", {})
    if event["type"] == "session_update":
        update = data.get("update") or {}
        content = update.get("content")
        text = content.get("text") if isinstance(content, dict) else None
        tag = " (replay)" if data.get("replay") else ""
        return f"{event['session_id']} {update.get('sessionUpdate')}{tag}: {text if text is not None else ''}"
    return f"{event['session_id']} {event['type']}: {orjson.dumps(data).decode()[:300]}"


async def run_frontend(args: argparse.Namespace) -> int:
    token = _token(args)
    try:
        client = await GatewayClient.connect(args.url, token)
    except Exception as exc:
        print(f"acp-gateway {args.command}: cannot connect to {args.url}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command == "sessions":
            listed = await client.call("task.session.list", {"states": args.states} if args.states else {})
            lines = [f"{s['session_id']}  {s['state']:18} {s['agent']:10} {s['title'] or ''}"
                     for s in listed["sessions"]]
            _print(args, listed, "\n".join(lines) or "no sessions")
        elif args.command == "status":
            status = await client.call("task.session.status", {"session_id": args.session_id})
            _print(args, status, f"{status['state']} (task {status['task_state']}); agent running: "
                   f"{status['is_agent_running']}; needs_resume: {status['needs_resume']} "
                   f"({status['resume_reason']})" + (f"; error: {status['error_message']}"
                                                     if status['error_message'] else ""))
        elif args.command == "resume":
            view = await client.call("task.session.resume", {"session_id": args.session_id})
            _print(args, view, f"{view['state']}; agent running: {view['is_agent_running']}"
                   + (f"; error: {view['error_message']}" if view["error_message"] else ""))
        elif args.command == "cancel":
            await client.close()
            osc = OwnerSessionClient(args.url, token)
            osc.start()
            await asyncio.wait_for(osc.connected.wait(), 30)
            try:
                result = await osc.cancel(args.session_id)
            finally:
                await osc.close()
            _print(args, result, f"{result['state']}")
        elif args.command == "prompt":
            await client.call("task.session.subscribe", {"session_id": args.session_id})
            printer = asyncio.ensure_future(_print_stream(client, args.json, until="turn_ended"))
            try:
                result = await client.call("task.session.prompt", {"session_id": args.session_id,
                                                                   "prompt": args.text})
                # The turn's events were sent before its answer: print them all.
                await asyncio.wait_for(printer, 10)
            finally:
                printer.cancel()
            _print(args, result, f"stop reason: {result['stop_reason']}")
        elif args.command == "watch":
            params: dict[str, Any] = {}
            if args.since is not None:
                params["since"] = args.since
            if args.session_id:
                params["session_id"] = args.session_id
            await client.call("task.session.subscribe", params)
            await _print_stream(client, args.json)
        return 0
    except RpcCallError as err:
        print(f"acp-gateway {args.command}: {err.message} (code {err.code})", file=sys.stderr)
        return 1
    except ConnectionError:
        # The session is the gateway's, not this command's: a turn it started goes on (or, if the gateway
        # died, is closed as interrupted when it starts again).
        session = getattr(args, "session_id", None)
        then = f": `acp-gateway status {session}` says what became of the session" if session else ""
        print(f"acp-gateway {args.command}: the connection to the gateway at {args.url} closed{then}",
              file=sys.stderr)
        return 2
    finally:
        await client.close()


async def _print_stream(client: GatewayClient, as_json: bool, until: str | None = None) -> None:
    while True:
        note = await client.notifications.get()
        event = note.get("params") or {}
        if event.get("type") in ("heartbeat", "caught_up"):
            continue
        print(orjson.dumps(event).decode() if as_json else _describe_event(event), flush=True)
        if until is not None and event.get("type") == until:
            return
