"""`acp-gateway diff|checkpoints|rewind|merge|discard`: a session's files in git (docs/worktrees.md), from the
terminal. Human output by default, `--json` for machines; each verb's row is in `frontend.VERBS`."""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from ..clients.client import GatewayClient

STATUS_WORDS = {"A": "added", "M": "modified", "D": "deleted", "T": "type changed"}


def _print(args: argparse.Namespace, value: Any, human: str) -> None:
    print(orjson.dumps(value).decode() if args.json else human)


def file_lines(files: list[dict[str, Any]]) -> list[str]:
    """One line a file: what happened to it, and its lines added and deleted (`-` for a binary file)."""
    def count(value: int | None) -> str:
        return "-" if value is None else str(value)
    return [f"  {STATUS_WORDS.get(f['status'], f['status']):<9} +{count(f['added'])} -{count(f['deleted'])}  "
            f"{f['path']}" for f in files]


def against_words(against: dict[str, Any]) -> str:
    if "checkpoint" in against:
        return f"checkpoint {against['checkpoint']}"
    if "base" in against:
        return f"its base ({str(against['base'])[:12]})"
    return "the commit checked out"


def parse_against(text: str | None) -> int | str | None:
    if text is None or text in ("base", "head"):
        return text
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise argparse.ArgumentTypeError(f"give a checkpoint's number, base or head, not {text!r}")


async def diff(args: argparse.Namespace, client: GatewayClient) -> int:
    params: dict[str, Any] = {"session_id": args.session_id}
    if args.against is not None:
        params["against"] = args.against  # parse_against took it
    answer = await client.call("task.session.diff", params)
    files = answer["files"]
    head = (f"{len(files)} file{'s' if len(files) != 1 else ''} changed since {against_words(answer['against'])}"
            + (":" if files else ""))
    text = "\n".join([head, *file_lines(files)])
    if not args.stat and answer["patch"]:
        text += "\n\n" + answer["patch"].rstrip("\n") + ("\n… (the patch was cut at 2 MiB)" if answer["truncated"]
                                                         else "")
    _print(args, answer, text)
    return 0


async def checkpoints(args: argparse.Namespace, client: GatewayClient) -> int:
    answer = await client.call("task.session.checkpoints", {"session_id": args.session_id})
    lines = []
    for point in answer["checkpoints"]:
        at = datetime.datetime.fromtimestamp(point["at"]).strftime("%Y-%m-%d %H:%M:%S")
        what = (f"before a turn: {point['prompt']!r}" if point["kind"] == "turn"
                else "the files just before a rewind")
        changed = point["files_changed"]
        lines.append(f"  {point['checkpoint']:>4}  {at}  {what}"
                     + (f"  ({changed} file{'s' if changed != 1 else ''} changed after it)" if changed is not None
                        else ""))
    _print(args, answer, "\n".join(["checkpoints (rewind to one with acp-gateway rewind "
                                    f"{args.session_id} NUMBER):", *lines]) if lines
           else f"session {args.session_id} has no checkpoint yet: one is taken at the start of each turn")
    return 0


async def rewind(args: argparse.Namespace, client: GatewayClient) -> int:
    answer = await client.call("task.session.rewind", {"session_id": args.session_id,
                                                       "checkpoint": args.checkpoint})
    files = answer["files"]
    _print(args, answer, "\n".join([
        f"rewound the files of {args.session_id} to checkpoint {answer['checkpoint']}: {len(files)} changed",
        *file_lines(files),
        f"undo with: acp-gateway rewind {args.session_id} {answer['undo_checkpoint']}"]))
    return 0


async def merge(args: argparse.Namespace, client: GatewayClient) -> int:
    answer = await client.call("task.session.worktree.merge", {"session_id": args.session_id})
    where = f"; its checkout at {answer['checkout']} moved with it" if answer["checkout"] else ""
    _print(args, answer, f"merged branch {answer['branch']} into {answer['base']} (commit "
                         f"{answer['commit'][:12]}){where}" if answer["merged"] else
           f"nothing to merge: {answer['base']} already has everything of branch {answer['branch']}")
    return 0


async def discard(args: argparse.Namespace, client: GatewayClient) -> int:
    view = await client.call("task.session.get", {"session_id": args.session_id})
    tree = view.get("worktree")
    if not tree:  # a plain session has no branch to discard: deleting it is `delete`'s to do
        print(f"acp-gateway discard: session {args.session_id} has no worktree of its own (discard deletes a worktree "
              f"session with its branch); to delete it: acp-gateway delete {args.session_id}", file=sys.stderr)
        return 1
    await client.call("task.session.delete", {"session_id": args.session_id, "discard": True})
    _print(args, {"deleted": args.session_id, "discarded": tree},
           f"deleted {args.session_id}" + (f", its worktree {tree['path']} and its branch {tree['branch']}" if tree
                                           else ""))
    return 0
