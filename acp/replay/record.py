"""`acp-gateway record`: a transparent stdio proxy that writes both directions of ACP traffic to JSONL.

An editor launches it in place of the agent. Bytes are forwarded exactly as read, chunk by chunk, in
both directions; only the copy written to the fixture is split into lines and parsed (and has its MCP servers' env
and header values replaced by `[secret]`: a recording holds no secret). A chunk's complete lines are
written to the fixture before the chunk is forwarded: whatever the peer has read is in the recording already. Each
fixture line is `{"seq", "ts", "dir", "msg"}` (`dir`: client_to_agent | agent_to_client), `{"seq", "ts", "dir",
"raw"}` for a line that is not JSON, `{"seq", "ts", "dir": "agent_stderr", "line"}` for stderr, and last
`{"seq", "ts", "dir": "agent_exit", "code", "after_eof"}`: how the agent ended.

Two options make a recording fit to share (a fixture, a bug report): `--redact-env NAME` replaces the value of
the environment variable NAME (an API key the agent is given) by `[secret]` wherever it appears, and
`--portable` writes the working directory as `<cwd>` and `$HOME` as `<home>`, which the replay binds to the
paths of the run it plays in; `--alias NAME=PATH` writes another host path (where the agent is installed) as
`<NAME>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

import orjson

from ..framing import DEFAULT_MAX_LINE, LineSplitter
from ..mcp import SECRET, encodings, redacted_params

_CHUNK = 256 * 1024


class Redaction:
    """What never leaves the recorder as it was: secrets (as `[secret]`) and, for a portable recording, the
    host's paths (as `<cwd>`, `<home>`). Applied to each line as JSON text, so a value inside any string is
    caught, escaped or not."""

    def __init__(self, secrets: Sequence[str] = (), paths: Sequence[tuple[str, str]] = ()) -> None:
        self.secrets = [orjson.dumps(s)[1:-1] for s in encodings(secrets)]  # as they are, and URL-encoded
        # Longest first: a cwd inside $HOME is named as the cwd. A path is replaced only where it ends.
        self.paths = [(re.compile(re.escape(orjson.dumps(p)[1:-1]) + rb"(?![A-Za-z0-9._~+-])"),
                       name.encode()) for p, name in sorted(paths, key=lambda pair: -len(pair[0])) if p and p != "/"]

    def __call__(self, line: bytes) -> bytes:
        for secret in self.secrets:
            line = line.replace(secret, SECRET.encode())
        for pattern, name in self.paths:
            line = pattern.sub(name, line)
        return line

    @staticmethod
    def from_env(names: Sequence[str], portable: bool, environ: Mapping[str, str], cwd: str,
                 aliases: Sequence[tuple[str, str]] = ()) -> Redaction:
        secrets = [environ[n] for n in names if environ.get(n)]
        paths = [(path, f"<{name}>") for name, path in aliases]
        paths += [(cwd, "<cwd>"), (environ.get("HOME", ""), "<home>")] if portable else []
        if portable:
            real = os.path.realpath(cwd)
            if real != cwd:
                paths.append((real, "<cwd>"))
        return Redaction(secrets, paths)


class Recorder:
    def __init__(self, out: IO[bytes], redaction: Redaction | None = None) -> None:
        self.out = out
        self.seq = 0
        self.redaction = redaction or Redaction()

    def write_message(self, direction: str, msg: Any) -> None:
        """A frame already parsed (the gateway records what its own client sent and read)."""
        self.seq += 1
        if isinstance(msg, dict) and "params" in msg:
            msg = {**msg, "params": redacted_params(msg["params"])}
        entry = {"seq": self.seq, "ts": time.time(), "dir": direction, "msg": msg}
        self.out.write(self.redaction(orjson.dumps(entry)) + b"\n")
        self.out.flush()

    def write_exit(self, code: int, after_eof: float | None) -> None:
        """How the agent ended: its exit status (negative: killed by that signal) and how long after the client closed
        its stdin (None: before), so a replay can end the same way."""
        self.seq += 1
        entry = {"seq": self.seq, "ts": time.time(), "dir": "agent_exit", "code": code, "after_eof": after_eof}
        self.out.write(orjson.dumps(entry) + b"\n")
        self.out.flush()

    def write(self, direction: str, line: bytes) -> None:
        self.seq += 1
        entry: dict[str, Any] = {"seq": self.seq, "ts": time.time(), "dir": direction}
        text = line.decode("utf-8", "replace")
        if direction == "agent_stderr":
            entry["line"] = text
        else:
            try:
                msg = orjson.loads(line)
            except orjson.JSONDecodeError:
                entry["raw"] = text
            else:
                if isinstance(msg, dict) and "params" in msg:  # MCP servers' secrets are never recorded
                    msg["params"] = redacted_params(msg["params"])
                entry["msg"] = msg
        self.out.write(self.redaction(orjson.dumps(entry)) + b"\n")
        self.out.flush()


async def _pump(source: asyncio.StreamReader, sink: Any, direction: str, recorder: Recorder,
                close_sink: bool) -> None:
    splitter = LineSplitter(DEFAULT_MAX_LINE)
    try:
        while True:
            chunk = await source.read(_CHUNK)
            if not chunk:
                break
            for line in splitter.feed(chunk):
                if line.strip():
                    recorder.write(direction, line)
            sink.write(chunk)
            drain = getattr(sink, "drain", None)
            if drain is not None:
                with contextlib.suppress(ConnectionError):
                    await drain()
            else:
                sink.flush()
        tail = splitter.tail()
        if tail is not None and tail.strip():
            recorder.write(direction, tail)
    finally:
        if close_sink:
            with contextlib.suppress(Exception):
                sink.close()


def open_recording(out_path: str) -> IO[bytes]:
    """`out_path` appended to; a directory (an existing one, or a path ending in `/`) gets the next `NNN.jsonl` of
    its own — one file per process for a client that launches several (`acp-gateway check`)."""
    if not (out_path.endswith("/") or os.path.isdir(out_path)):
        return open(out_path, "ab")
    os.makedirs(out_path, exist_ok=True)
    number = 1
    while True:
        try:
            return open(os.path.join(out_path, f"{number:03d}.jsonl"), "xb")
        except FileExistsError:
            number += 1


async def record(argv: Sequence[str], out_path: str, redaction: Redaction | None = None) -> int:
    loop = asyncio.get_running_loop()
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, functools.partial(proc.send_signal, sig))
    stdin = asyncio.StreamReader(limit=_CHUNK)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin.buffer)
    stdout = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    stderr = os.fdopen(os.dup(sys.stderr.fileno()), "wb", buffering=0)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    with open_recording(out_path) as fixture:
        recorder = Recorder(fixture, redaction)
        to_agent = asyncio.ensure_future(_pump(stdin, proc.stdin, "client_to_agent", recorder, True))
        from_agent = asyncio.ensure_future(_pump(proc.stdout, stdout, "agent_to_client", recorder, False))
        from_stderr = asyncio.ensure_future(_pump(proc.stderr, stderr, "agent_stderr", recorder, False))
        eof_at: list[float] = []
        to_agent.add_done_callback(lambda _: eof_at.append(time.time()))
        rc = await proc.wait()
        await asyncio.gather(from_agent, from_stderr, return_exceptions=True)
        to_agent.cancel()
        recorder.write_exit(rc, time.time() - eof_at[0] if eof_at else None)
    return rc


def record_command(argv: Sequence[str], out_path: str, redact_env: Sequence[str] = (), portable: bool = False,
                   aliases: Sequence[str] = ()) -> int:
    pairs = []
    for alias in aliases:
        name, sep, path = alias.partition("=")
        if not sep or not name.isidentifier() or not path.startswith("/"):
            print(f"acp-gateway record: --alias takes NAME=/absolute/path, not {alias!r}", file=sys.stderr)
            return 2
        pairs.append((name, path))
    redaction = Redaction.from_env(redact_env, portable, os.environ, os.getcwd(), pairs)
    return asyncio.run(record(argv, out_path, redaction))
