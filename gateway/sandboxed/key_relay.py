"""`python -I -m gateway.sandboxed.key_relay --socket PATH [--url VAR=PATH]… -- CMD…`: inside an agent's sandbox,
a loopback port that leads to the gateway's key proxy (`runtime/key_proxy.py`) through its unix socket; CMD runs
with each VAR set to `http://127.0.0.1:PORT` + PATH (its API's base URL) and this process keeps its stdin and
stdout untouched.

It lives outside `gateway.runtime` so that starting it imports nothing but the standard library (a launch and each
terminal pay for it). It holds no key: a stand-in is all that passes through it, and the sandbox's network
namespace (`none`, `outbound`) keeps its port to the sandbox; under `host` it is on the host's loopback, where a
caller still needs a stand-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys

USAGE = "usage: python -I -m gateway.sandboxed.key_relay --socket PATH [--url VAR=PATH]... -- CMD ARGS..."
PR_SET_PDEATHSIG = 1
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


async def _relay(socket_path: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    try:
        proxy_r, proxy_w = await asyncio.open_unix_connection(socket_path)
    except OSError:
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, proxy_w), _pipe(proxy_r, client_w))
    finally:
        for writer in (proxy_w, client_w):
            writer.close()


async def run(socket_path: str, urls: list[tuple[str, str]], command: list[str]) -> int:
    server = await asyncio.start_server(lambda r, w: _relay(socket_path, r, w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    env = dict(os.environ)
    for var, path in urls:
        env[var] = f"http://127.0.0.1:{port}{path}"
    try:
        child = await asyncio.create_subprocess_exec(*command, env=env, preexec_fn=_die_with_relay)
    except OSError as exc:
        print(f"{command[0]}: {exc.strerror}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    loop = asyncio.get_running_loop()
    for signum in FORWARDED_SIGNALS:  # a stop meant for the agent reaches it; this process ends when it does
        loop.add_signal_handler(signum, _send, child, signum)
    status = await child.wait()
    server.close()
    return 128 - status if status < 0 else status


def _die_with_relay() -> None:
    """In the child before it runs CMD: killed when this process dies, however it dies (the agent never outlives
    its relay, as it would not outlive the gateway)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _send(child: asyncio.subprocess.Process, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signum)


def main(argv: list[str]) -> int:
    socket_path = ""
    urls: list[tuple[str, str]] = []
    while len(argv) >= 2 and argv[0] in ("--socket", "--url"):
        if argv[0] == "--socket":
            socket_path = argv[1]
        else:
            var, _, path = argv[1].partition("=")
            urls.append((var, path))
        argv = argv[2:]
    if not socket_path or not argv or argv[0] != "--" or len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    return asyncio.run(run(socket_path, urls, argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
