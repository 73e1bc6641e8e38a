"""The replay agent (`acp-gateway replay FILE.jsonl`): plays a recorded transcript back as an ACP agent.

The recording is a script. Agent messages are sent in recorded order; each recorded client message
is waited for and matched by method and params — request ids are rewritten, `_meta` is ignored,
MCP servers' secrets (recorded as `[secret]`) match whatever is sent, and `cwd` matches any path (a
recording made in one directory replays in another). A request that does not match gets `-32603`
with a short diff, and the divergence is said on stderr. `--realtime` reproduces the recorded pacing
of the agent's messages.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from acp.framing import LineSplitter
from acp.mcp import redacted_params

WILDCARD_KEYS = frozenset({"cwd"})


def load_script(path: Path) -> list[dict[str, Any]]:
    steps = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
        if entry.get("dir") in ("client_to_agent", "agent_to_client") and isinstance(entry.get("msg"), dict):
            steps.append(entry)
    return steps


def normalize(value: Any) -> Any:
    """What matching compares: no `_meta`, no JSON-RPC envelope, any `cwd`."""
    if isinstance(value, dict):
        return {k: ("<any>" if k in WILDCARD_KEYS else normalize(v)) for k, v in sorted(value.items())
                if k != "_meta"}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def kind(msg: dict[str, Any]) -> str:
    if "method" in msg:
        return "request" if "id" in msg else "notification"
    return "response"


def matches(expected: dict[str, Any], got: dict[str, Any]) -> bool:
    if kind(expected) != kind(got):
        return False
    if kind(got) == "response":
        return True  # answers to the agent's own requests: the client's choice is the client's
    # A recording holds MCP servers' secrets as `[secret]`: the request is compared with its own redacted the same way.
    return bool(expected.get("method") == got.get("method")
                and normalize(expected.get("params")) == normalize(redacted_params(got.get("params"))))


def short_diff(expected: dict[str, Any], got: dict[str, Any], lines: int = 12) -> str:
    def view(msg: dict[str, Any]) -> list[str]:
        shown = {"method": msg.get("method"), "params": normalize(msg.get("params"))}
        return orjson.dumps(shown, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode().splitlines()

    diff = list(difflib.unified_diff(view(expected), view(got), "recorded", "received", lineterm="", n=1))
    return "\n".join(diff[: lines + 2])


class ReplayAgent:
    def __init__(self, steps: list[dict[str, Any]], realtime: bool, out: Any, err: Any) -> None:
        self.steps = steps
        self.realtime = realtime
        self.out = out
        self.err = err
        self.ids: dict[Any, Any] = {}  # recorded client request id -> live id
        self.incoming: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.divergences = 0
        self._last_ts: float | None = None

    def send(self, msg: dict[str, Any]) -> None:
        self.out.write(orjson.dumps(msg) + b"\n")
        self.out.flush()

    async def emit(self, entry: dict[str, Any]) -> None:
        msg = dict(entry["msg"])
        if self.realtime and self._last_ts is not None:
            await asyncio.sleep(max(0.0, entry["ts"] - self._last_ts))
        self._last_ts = entry["ts"]
        if kind(msg) == "response" and msg.get("id") in self.ids:
            msg["id"] = self.ids[msg["id"]]
        self.send(msg)

    def diverged(self, expected: dict[str, Any] | None, got: dict[str, Any]) -> None:
        self.divergences += 1
        what = got.get("method", "a response")
        if expected is None:
            detail = "the recording has no more client messages"
        else:
            detail = f"expected {expected.get('method', 'a response')}\n{short_diff(expected, got)}"
        self.err.write(f"replay: divergence at {what}: {detail}\n")
        self.err.flush()
        if kind(got) == "request":
            self.send({"jsonrpc": "2.0", "id": got["id"], "error": {
                "code": -32603, "message": f"replay divergence: {detail.splitlines()[0]}",
                "data": {"diff": detail}}})

    async def run(self) -> int:
        i = 0
        while i < len(self.steps):
            entry = self.steps[i]
            if entry["dir"] == "agent_to_client":
                await self.emit(entry)
                i += 1
                continue
            got = await self.incoming.get()
            if got is None:
                return 0
            if matches(entry["msg"], got):
                if kind(got) == "request":
                    self.ids[entry["msg"].get("id")] = got["id"]
                i += 1
            else:
                self.diverged(entry["msg"], got)
        while (got := await self.incoming.get()) is not None:
            self.diverged(None, got)
        return 0

    async def read(self, reader: asyncio.StreamReader) -> None:
        splitter = LineSplitter()
        while chunk := await reader.read(65536):
            for line in splitter.feed(chunk):
                if not line.strip():
                    continue
                try:
                    msg = orjson.loads(line)
                except orjson.JSONDecodeError:
                    self.err.write("replay: ignoring a line that is not JSON\n")
                    continue
                if isinstance(msg, dict):
                    self.incoming.put_nowait(msg)
        self.incoming.put_nowait(None)


async def serve(path: Path, realtime: bool) -> int:
    steps = load_script(path)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    agent = ReplayAgent(steps, realtime, out, sys.stderr)
    reading = asyncio.ensure_future(agent.read(reader))
    rc = await agent.run()
    reading.cancel()
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acp-gateway replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fixture", type=Path)
    parser.add_argument("--realtime", action="store_true", help="reproduce the recorded pacing")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(serve(args.fixture, args.realtime))
    except (OSError, ValueError) as exc:
        print(f"acp-gateway replay: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
