"""The replay agent (`acp-gateway replay FILE.jsonl|DIR ...`): plays recordings back as an ACP agent.

A recording is a script: each client frame is waited for and matched, the agent frames after it are sent in
recorded order. Given several recordings (or a corpus directory, every `*.jsonl` in it) the replay follows all
that agree with what the client sent and speaks for the nearest. What "agree" tolerates is a list of numbered
rules (`acp/replay/rules.py`, docs/agent-authors.md); `--strict` keeps only those no two runs can avoid. A
request that matches nothing is answered `-32603` with the recorded and the received frame side by side, and
said on stderr. Frames keep their recorded spacing up to 0.25 s a gap (`--realtime`: all of it);
`--forget-sessions` plays the agent after it lost the sessions it handed out before (a restore then meets its
answer to an unknown session).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from ..framing import LineSplitter
from .arguments import PACE, add_arguments
from .rules import kind
from .script import Divergence, Entry, Replay, Script


def load_script(path: Path) -> list[dict[str, Any]]:
    """A recording's client and agent frames, as recorded (for tests and tools that read fixtures)."""
    script = Script.from_lines(str(path), path.read_bytes().splitlines())
    return [{"dir": e.direction, "msg": dict(e.msg), "ts": e.ts} for e in script.entries]


def load_scripts(paths: Sequence[Path]) -> list[Script]:
    """The recordings named, a directory standing for every `*.jsonl` in it (sorted, so the order is stable)."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"no recording (*.jsonl) in {', '.join(map(str, paths))}")
    return [Script.from_lines(f.name if len(files) > 1 else str(f), f.read_bytes().splitlines()) for f in files]


class ReplayAgent:
    def __init__(self, replay: Replay, realtime: bool, out: Any, err: Any, pace: float = PACE) -> None:
        self.replay = replay
        self.realtime = realtime
        self.pace = pace
        self.out = out
        self.err = err
        self.incoming: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.divergences = 0

    def send(self, msg: Mapping[str, Any]) -> None:
        self.out.write(orjson.dumps(msg) + b"\n")
        self.out.flush()

    async def emit(self, entries: Sequence[Entry], since: float | None = None) -> None:
        """Sends the agent's frames with their recorded spacing — each gap up to PACE (all of it, up to 30 s, with
        `--realtime`): what a real agent says while it works reaches the client a moment after the answer before it,
        and a client may count on that moment (it clears what it waits for, then prompts)."""
        last = since
        for entry in entries:
            if last is not None:
                await asyncio.sleep(max(0.0, min(entry.ts - last, 30.0 if self.realtime else self.pace)))
            last = entry.ts
            self.send(entry.msg)

    def diverged(self, divergence: Divergence) -> None:
        self.divergences += 1
        self.err.write(f"replay: divergence: {divergence.summary()}\n{divergence.side_by_side()}\n")
        self.err.flush()
        if kind(divergence.received) == "request":
            self.send({"jsonrpc": "2.0", "id": divergence.received["id"], "error": divergence.error()})

    async def run(self) -> int:
        await self.emit(self.replay.start())
        while (got := await self.incoming.get()) is not None:
            played = self.replay.receive(got)
            if played.divergence is not None:
                self.diverged(played.divergence)
            else:
                await self.emit(played.send, played.since)
        code = self.replay.ending()
        if code is None:  # the recorded agent did not exit when its stdin closed: it was killed, and so is this
            await asyncio.Event().wait()
        return code or 0

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


async def serve(paths: Sequence[Path], realtime: bool, strict: bool = False, forget: bool = False,
                pace: float = PACE) -> int:
    replay = Replay(load_scripts(paths), strict=strict, forget=forget)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    agent = ReplayAgent(replay, realtime, out, sys.stderr, pace)
    reading = asyncio.ensure_future(agent.read(reader))
    rc = await agent.run()
    reading.cancel()
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="acp-gateway replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_replay(args.fixture, args.realtime, args.strict, args.forget_sessions, args.pace)


def run_replay(paths: Sequence[Path], realtime: bool = False, strict: bool = False, forget: bool = False,
               pace: float = PACE) -> int:
    if not 0 <= pace <= 30:
        print("acp-gateway replay: --pace takes 0 to 30 seconds", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(paths, realtime, strict, forget, pace))
    except (OSError, ValueError) as exc:
        print(f"acp-gateway replay: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
