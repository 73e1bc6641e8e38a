"""The gateway's side of an agent host: start one (`start_host`) and attach to it (`HostConnection`).

A connection reads like the agent's pipes did: `stdout` is a reader with `read`/`readline` (what `acp.jsonrpc`'s
peer reads) that knows the offset of the last agent line it handed out whole (`consumed`, what the gateway commits),
and `stdin` a byte sink (`write`/`drain`/`close`/`is_closing`) whose lines go out numbered, kept in `GatewayLines`
until the host has taken them, and sent again on the next attach: the host writes each to the agent once (AH-8).
The agent's terminals run in the host: `term_start`, `term_kill` and `term_release` say what to do with them, their
news (`term_output`, `term_exit`) goes to `on_terminal` (`remote_terminals.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import protocol
from .host import FrameReader
from .protocol import FrameError, TermStart
from .spec import HostSpec, private_directory, socket_address, write_spec

log = logging.getLogger(__name__)

# At most what one read of the agent's stdout hands the ACP reader, as a pipe's 64 KiB would: each read is one group
# commit and one fan-out, and groups four times that size overflowed a subscriber's outbox under a flood, moving it
# onto the (far costlier) journal feed: relay through a host 0.49x -> 0.74x of the unhosted relay.
PIPE_BYTES = 64 * 1024
QUEUE_BYTES = 1024 * 1024  # agent lines received and not yet read, past which the socket is not read


class HostError(Exception):
    """The host could not be started, refused the attach, or ended the connection."""

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule  # the protocol rule (AH-…) when the host named one


class HostDisconnected(HostError):
    """The connection to the host ended before the agent's exit was read: attach again."""


def new_secret() -> tuple[str, str]:
    """A per-execution secret and the hash the host keeps of it."""
    secret = secrets.token_urlsafe(32)
    return secret, protocol.secret_hash(secret)


@dataclass(frozen=True)
class HostHandle:
    socket_path: str
    spool_dir: str
    host_pid: int
    agent_pid: int


async def start_host(spec: HostSpec, timeout: float = 30.0, starter: Sequence[str] | None = None) -> HostHandle:
    """Writes the spec file beside the socket, starts the host detached and returns once its socket listens.
    `starter`: how to run the host (default: this Python's `-m gateway.agenthost`; the shipped application,
    `shipping.py`, is `python3 -I host.pyz`), the spec file's path added."""
    spec.check()
    socket_path = Path(spec.socket_path)
    private_directory(socket_path.parent)
    spec_path = socket_path.parent / f".{socket_path.name}.{secrets.token_hex(4)}.spec"
    write_spec(spec, spec_path)
    try:
        starter_process = await asyncio.create_subprocess_exec(
            *(starter or (sys.executable, "-I", "-m", "gateway.agenthost")), str(spec_path),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, env={"PATH": os.environ.get("PATH", os.defpath)}, pass_fds=tuple(spec.pass_fds),
            cwd="/")
        try:
            # The starter exits at once; the pipes stay open until the forked host says ready and lets them go.
            said, complaint = await asyncio.wait_for(starter_process.communicate(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                starter_process.kill()
            raise HostError(f"the agent host did not start within {timeout} s") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            spec_path.unlink()
    words = said.decode(errors="replace").strip().split(" ", 2)
    if len(words) == 3 and words[0] == "ready":
        return HostHandle(spec.socket_path, spec.spool_dir, int(words[1]), int(words[2]))
    if words[0] == "error":
        raise HostError(f"the agent host could not start: {' '.join(words[1:])}")
    tail = complaint.decode(errors="replace").strip().splitlines()[-3:]
    raise HostError(f"the agent host ended before it was ready: {' | '.join(tail) or 'no output'}")


class GatewayLines:
    """The gateway's lines to the agent, numbered; each kept until the host has taken it (`written`). One per agent
    execution, across connections: the next attach sends again what the host had not taken."""

    def __init__(self, written: int = 0) -> None:
        self.next_seq = written + 1
        self.unwritten: dict[int, bytes] = {}

    def add(self, line: bytes) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.unwritten[seq] = line
        return seq

    def taken(self, written: int) -> None:
        for seq in [s for s in self.unwritten if s <= written]:
            del self.unwritten[seq]
        self.next_seq = max(self.next_seq, written + 1)


@dataclass(frozen=True)
class Welcome:
    head: int
    written: int
    host_pid: int
    agent_pid: int
    exit_code: int | None
    terminals: tuple[dict[str, Any], ...] = ()  # TM-4: every terminal the host holds, as it reports it
    runs_terminals: bool = False  # its welcome lists terminals: it runs them (a host of an older gateway does not)
    serves_files: bool = False  # FS-1: it reads and writes the agent's files where it runs


@dataclass(slots=True)
class _Run:
    """Agent lines of consecutive offsets in the line queue (a raw batch arrives as one: a slice of the lines its
    read was split into), taken from `index` on."""

    first: int  # the offset of lines[index]
    lines: list[bytes]
    index: int
    size: int  # bytes of lines[index:]


_END = _Run(-1, [], 0, 0)  # the agent's exit, in the line queue


@dataclass(frozen=True)
class Relink:
    """How a connection whose link dropped gets a new one: `again()` brings a link back (a new forward) and returns
    the socket to attach on and a newer incarnation; tried until `timeout` seconds have passed."""

    again: Callable[[], Awaitable[tuple[str, int]]]
    timeout: float = 60.0
    name: str = "an agent host"  # what the log calls it: the session and its remote host


async def _hello(socket_path: str, secret: str, incarnation: int, committed: int,
                 timeout: float) -> tuple[asyncio.StreamWriter, FrameReader, Welcome]:
    """A connection to the host's socket, attached (hello, welcome). HostDisconnected when nothing answers;
    HostError when the host refused."""
    with socket_address(socket_path) as address:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(address), timeout)
        except (OSError, TimeoutError) as exc:
            raise HostDisconnected(f"the agent host's socket does not answer: "
                                   f"{getattr(exc, 'strerror', None) or exc or 'timed out'}") from exc
    writer.write(protocol.encode({"t": protocol.HELLO, "secret": secret, "incarnation": incarnation,
                                  "committed": committed, "raw": True}))
    frames = FrameReader(reader)
    try:
        answer = await asyncio.wait_for(frames.next(), timeout)
    except (FrameError, ConnectionError, TimeoutError) as exc:
        writer.close()
        raise HostDisconnected(f"the agent host did not answer the hello: {exc}") from exc
    if answer is None:  # a forward whose far end is not there yet closes at once
        writer.close()
        raise HostDisconnected("the agent host's socket closed before its welcome")
    if answer.get("t") != protocol.WELCOME:
        writer.close()
        raise HostError(f"the agent host refused the attach: {answer.get('reason', 'it closed the connection')}",
                        answer.get("rule"))
    welcome = Welcome(answer["head"], answer["written"], answer["host_pid"], answer["agent_pid"], answer["exit"],
                      tuple(t for t in answer.get("terminals") or () if isinstance(t, dict)),
                      isinstance(answer.get("terminals"), list), answer.get("files") is True)
    return writer, frames, welcome


class HostConnection:
    """One attachment to a host (over one link, or — with `relink` — over as many as it takes)."""

    def __init__(self, writer: asyncio.StreamWriter, welcome: Welcome, committed: int, outbox: GatewayLines,
                 frames: FrameReader) -> None:
        self._writer = writer
        self.welcome = welcome
        self.committed = committed  # what the attach said: the lines read here come after it
        self.outbox = outbox
        self._frames = frames
        self._lines: deque[_Run] = deque()
        self._batches = protocol.AgentLines()
        self._queued_bytes = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._answers: deque[asyncio.Future[dict[str, Any]]] = deque()  # stderr and status, answered in order
        self.exit_code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.closed_reason: HostError | None = None
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # the connection's end
        self.on_taken: Callable[[int], None] | None = None  # the host took the gateway's lines up to a seq
        self.on_sent: Callable[[int, bytes], None] | None = None  # a line for the agent got its seq
        self._on_terminal: Callable[[dict[str, Any]], None] | None = None
        self._terminal_news: list[dict[str, Any]] = []  # what came before anyone listened
        self._terminal_answers: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        self._file_answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._file_ids = 0
        self._secret = ""
        self._received = committed  # the last agent line queued here: a new link's replay goes on after it
        self._acked = committed  # the last the gateway acked (committed): a new link attaches with it
        self._closing = False  # `close` or `release`: the end is the gateway's doing
        self.relink: Relink | None = None  # set for a host reached over a link that may drop (ssh)
        self.relinks = 0
        self._linked = asyncio.Event()  # clear while a dropped link is being replaced
        self._linked.set()
        self._held: list[dict[str, Any]] = []  # what must reach the host, said while its link was down
        self.on_relinked: Callable[[Welcome], None] | None = None  # what the host says at a new link's welcome
        self.stdout = AgentStdout(self)
        self.stdin = AgentStdin(self)
        self._reading = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def attach(cls, socket_path: str, secret: str, incarnation: int, committed: int,
                     outbox: GatewayLines | None = None, timeout: float = 30.0) -> HostConnection:
        """Attach as gateway `incarnation`, having committed the agent's lines up to `committed`; the lines after it
        follow. `outbox`: the lines this execution's earlier connection had not seen taken (sent again, in order)."""
        writer, frames, welcome = await _hello(socket_path, secret, incarnation, committed, timeout)
        outbox = outbox if outbox is not None else GatewayLines(welcome.written)
        outbox.taken(welcome.written)
        connection = cls(writer, welcome, committed, outbox, frames)
        connection._secret = secret
        connection._resend_unwritten()
        return connection

    # -- a new link, the same connection (remote hosts: docs/remote-hosts.md) ---------------------------------------
    async def _relink(self, relink: Relink) -> None:
        """The link to the host dropped (not the host: it said nothing): a new one, attached as a newer incarnation
        with what the gateway acked, the lines already received here passed over as they come again, so the reader
        sees the lines go on as if nothing happened (the caller sends again the gateway's lines the host had not
        taken). HostError once `relink.timeout` has passed."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + relink.timeout, 0.1
        while True:
            try:
                try:
                    socket_path, incarnation = await relink.again()
                except HostError as exc:  # ssh could not link (yet): tried again until the deadline
                    if exc.rule is not None:  # not for a link: nothing to try again
                        raise
                    raise HostDisconnected(str(exc)) from exc
                except Exception as exc:
                    raise HostError(f"the link could not be made again: {exc}") from exc
                # Attached with what the gateway committed (acked), never more: a gateway that dies next attaches
                # from its journal, and the host must still hold every line after that. What came here since is
                # passed over as it comes again (`_queue_run`).
                writer, frames, welcome = await _hello(socket_path, self._secret, incarnation, self._acked,
                                                       max(1.0, deadline - loop.time()))
                break
            except HostDisconnected as exc:  # the link is not back yet
                if loop.time() + pause > deadline:
                    raise HostDisconnected(f"the link to the agent host did not come back within "
                                           f"{relink.timeout:g} s: {exc}") from exc
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
        self._writer, self._frames, self._batches = writer, frames, protocol.AgentLines()
        self.welcome = welcome
        self.relinks += 1
        self.outbox.taken(welcome.written)
        if self.on_taken is not None:
            self.on_taken(welcome.written)
        if welcome.exit_code is not None and not self.exit_code.done():
            self.exit_code.set_result(welcome.exit_code)
        if self.on_relinked is not None:
            self.on_relinked(welcome)

    # -- reading -----------------------------------------------------------------------------------------------------
    async def _read(self) -> None:
        reason: HostError = HostDisconnected("the agent host closed the connection")
        try:
            while True:
                reason = await self._read_link()
                relink = self.relink
                if (relink is None or self._closing or self.exit_code.done() or reason.rule is not None
                        or not isinstance(reason, HostDisconnected)):
                    return
                self._writer.close()
                self._linked.clear()
                self._fail_answers(reason)  # asked on the dropped link: the asker asks again
                log.warning("%s: the link to its agent host dropped (%s); linking again", relink.name, reason)
                try:
                    await self._relink(relink)
                except HostError as exc:
                    log.warning("%s: %s; its agent counts as gone", relink.name, exc)
                    reason = exc
                    return
                log.info("%s: linked to its agent host again (link %d)", relink.name, self.relinks + 1)
                held, self._held = self._held, []
                self._linked.set()
                self._resend_unwritten()  # the lines the host had not taken, then what waited for the link
                for frame in held:
                    self._writer.write(protocol.encode(frame))
        finally:
            self.closed_reason = reason
            self._linked.set()
            self._writer.close()
            self._fail_answers(reason)
            self._arrived.set()
            if not self.ended.done():
                self.ended.set_result(None)

    def _fail_answers(self, reason: HostError) -> None:
        for answer in [*self._answers, *self._terminal_answers.values(), *self._file_answers.values()]:
            if not answer.done():
                answer.set_exception(reason)
        self._answers.clear()
        self._terminal_answers.clear()
        self._file_answers.clear()

    async def _read_link(self) -> HostError:
        """Frames of the current link until it ends; why it ended."""
        batches, lines = self._batches, self._lines
        try:
            while (frames := await self._frames.next_lines()) is not None:
                for item in batches.feed(frames):
                    if isinstance(item, tuple):  # the agent's lines: the bulk of what arrives, never looked into
                        self._queue_run(*item)
                        continue
                    stop = self._handle(item)
                    if stop is not None:
                        return stop
                if lines:
                    self._arrived.set()
                if self._queued_bytes >= QUEUE_BYTES:  # a slow reader: the host waits, its spool holds the rest
                    self._room.clear()
                    await self._room.wait()
        except (FrameError, ConnectionError) as exc:
            return HostDisconnected(f"the agent host's connection failed: {exc}")
        return HostDisconnected("the agent host closed the connection")

    def _handle(self, frame: dict[str, Any]) -> HostError | None:
        """A frame other than a raw line; the reason the connection ends, when the host ended it."""
        kind = frame.get("t")
        if kind == protocol.LINE:  # a host that sends JSON frames (an older version)
            self._queue_run(frame["offset"], [protocol.carried(frame)])
        elif kind == protocol.EXIT:
            if not self.exit_code.done():
                self.exit_code.set_result(frame["code"])
            self._lines.append(_END)
            self._arrived.set()
        elif kind == protocol.WRITTEN:
            self.outbox.taken(frame["seq"])
            if self.on_taken is not None:
                self.on_taken(frame["seq"])
        elif kind in (protocol.STDERR, protocol.STATUS):
            if self._answers:
                self._answers.popleft().set_result(frame)
        elif kind in protocol.TERMINAL_FRAMES:
            if self._on_terminal is not None:
                self._on_terminal(frame)
            else:
                self._terminal_news.append(frame)
        elif kind in protocol.TERMINAL_ANSWERS:
            waiter = self._terminal_answers.pop(
                ("release" if kind == protocol.TERM_RELEASED else "start", str(frame.get("id"))), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(frame)
        elif kind == protocol.FILE_DONE:
            waiter = self._file_answers.pop(str(frame.get("id")), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(frame)
        elif kind in (protocol.SUPERSEDED, protocol.VIOLATION):
            return HostDisconnected(f"the agent host ended this connection: {frame.get('reason')}", frame.get("rule"))
        return None

    def _queue_run(self, first: int, lines: list[bytes]) -> None:
        if first <= self._received:  # a new link's replay of lines already here: only what is new is taken
            if first + len(lines) - 1 <= self._received:
                return
            lines = lines[self._received - first + 1:]
            first = self._received + 1
        self._received = first + len(lines) - 1
        size = sum(map(len, lines))
        self._lines.append(_Run(first, lines, 0, size))
        self._queued_bytes += size

    def _taken(self, size: int) -> None:
        self._queued_bytes -= size
        if self._queued_bytes < QUEUE_BYTES:
            self._room.set()

    async def wait_lines(self) -> None:
        """Until a line (or the agent's exit) is here to take. Raises HostDisconnected when the connection ended
        first."""
        while not self._lines:
            if self.closed_reason is not None:
                raise self.closed_reason
            self._arrived.clear()
            await self._arrived.wait()

    def take_runs(self, max_bytes: int) -> list[tuple[int, list[bytes]]] | None:
        """The agent's lines here now, as runs of consecutive offsets (their first offset, their lines), whole runs up
        to about `max_bytes` (at least one); None once the agent exited and every line was taken."""
        taken: list[tuple[int, list[bytes]]] = []
        size = 0
        lines = self._lines
        while lines and size < max_bytes:
            run = lines[0]
            if run is _END:
                break
            lines.popleft()
            taken.append((run.first, run.lines[run.index:] if run.index else run.lines))
            size += run.size
        if not taken and lines and lines[0] is _END:
            return None
        self._taken(size)
        return taken

    async def next_line(self) -> tuple[int, bytes] | None:
        """The agent's next line and its offset; None once the agent exited and every line was read. Raises
        HostDisconnected when the connection ended first."""
        await self.wait_lines()
        return self._take()

    def _take(self) -> tuple[int, bytes] | None:
        run = self._lines[0]
        if run is _END:
            return None
        first, line = run.first, run.lines[run.index]
        if run.index + 1 == len(run.lines):
            self._lines.popleft()
        else:
            run.first, run.index, run.size = first + 1, run.index + 1, run.size - len(line)
        self._taken(len(line))
        return first, line

    async def __aiter__(self) -> AsyncIterator[tuple[int, bytes]]:
        while (item := await self.next_line()) is not None:
            yield item

    # -- writing -----------------------------------------------------------------------------------------------------
    def _send(self, frame: dict[str, Any]) -> None:
        if self.closed_reason is not None:
            raise self.closed_reason
        if not self._linked.is_set():  # the link is being replaced: what must reach the host waits for the new one
            kind = frame.get("t")
            if kind in (protocol.STOP, protocol.RELEASE, protocol.TERM_KILL):
                self._held.append(frame)
                return
            if kind in (protocol.LINE, protocol.ACK):  # lines go again from the outbox; a later ack says more
                return
            raise HostDisconnected("the link to the agent host is being re-established: ask again")
        self._writer.write(protocol.encode(frame))

    def _resend_unwritten(self) -> None:
        """The gateway's lines the host had not taken when the last link ended, again, in order (AH-8 drops any it
        had taken after all)."""
        for seq, line in sorted(self.outbox.unwritten.items()):
            self._send_line(seq, line)

    def _send_line(self, seq: int, line: bytes) -> None:
        self._send({"t": protocol.LINE, "seq": seq, **protocol.carry(line)})

    def send(self, line: bytes) -> int:
        """A line for the agent (without its newline); its sequence number. Kept until the host has taken it: when
        this connection ends first, the next attach with the same `outbox` sends it again."""
        seq = self.outbox.add(line)
        if self.on_sent is not None:
            self.on_sent(seq, line)
        with contextlib.suppress(HostError):
            self._send_line(seq, line)
        return seq

    async def wait_linked(self) -> None:
        """Until a dropped link has been replaced (at once when it was not dropped, or the connection ended)."""
        await self._linked.wait()

    async def drain(self) -> None:
        await self._linked.wait()  # a dropped link: the lines wait in the outbox for the new one
        if self.closed_reason is not None:  # as a pipe whose reader is gone: the peer's write fails as such
            raise ConnectionResetError(str(self.closed_reason))
        await self._writer.drain()

    def ack(self, offset: int, sent: int | None = None) -> None:
        """The gateway committed the agent's lines up to `offset`: the host may drop them (and its own lines up to
        `sent`)."""
        self._send({"t": protocol.ACK, "offset": offset, **({"sent": sent} if sent is not None else {})})
        self._acked = max(self._acked, offset)

    async def _ask(self, frame: dict[str, Any]) -> dict[str, Any]:
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._send(frame)
        self._answers.append(answer)
        return await answer

    async def stderr_tail(self, lines: int = 20) -> list[str]:
        answer = await self._ask({"t": protocol.STDERR, "lines": lines})
        return list(answer["lines"])

    async def stderr(self, lines: int = 200) -> tuple[list[str], int]:
        """The agent's last stderr lines and how many bytes it wrote to stderr in all."""
        answer = await self._ask({"t": protocol.STDERR, "lines": lines})
        return list(answer["lines"]), int(answer.get("total", 0))

    async def status(self) -> dict[str, Any]:
        """The host's figures: the spool's head, acked offset and bytes, whether it paused reading the agent..."""
        return await self._ask({"t": protocol.STATUS})

    # -- terminals ---------------------------------------------------------------------------------------------------
    @property
    def on_terminal(self) -> Callable[[dict[str, Any]], None] | None:
        return self._on_terminal

    @on_terminal.setter
    def on_terminal(self, listener: Callable[[dict[str, Any]], None] | None) -> None:
        """Who hears the terminals' news (`term_output`, `term_exit`); what came before is handed on first."""
        self._on_terminal = listener
        if listener is not None:
            news, self._terminal_news = self._terminal_news, []
            for frame in news:
                listener(frame)

    async def _term_ask(self, key: tuple[str, str], frame: dict[str, Any]) -> dict[str, Any]:
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._send(frame)
        self._terminal_answers[key] = answer
        return await answer

    async def term_start(self, start: TermStart) -> dict[str, Any]:
        """TM-1: the host starts this terminal; its answer (`term_started` with the pid, or `term_failed`)."""
        return await self._term_ask(("start", start.id), protocol.term_start_frame(start))

    async def file(self, op: str, path: str, **more: Any) -> dict[str, Any]:
        """FS-1: a file read or written by the host, where the agent runs; its `file_done` answer (HostError when
        the link drops first: the agent is answered an error and may ask again)."""
        self._file_ids += 1
        file_id = f"f{self._file_ids}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._send({"t": protocol.FILE, "id": file_id, "op": op, "path": path, **more})
        self._file_answers[file_id] = answer
        return await answer

    def term_kill(self, terminal_id: str) -> None:
        """TM-5: the terminal's process group killed; its `term_exit` follows."""
        self._send({"t": protocol.TERM_KILL, "id": terminal_id})

    async def term_release(self, terminal_id: str) -> None:
        """TM-5: the terminal's whole tree killed and forgotten by the host."""
        await self._term_ask(("release", terminal_id), {"t": protocol.TERM_RELEASE, "id": terminal_id})

    def stop(self, grace: float | None = None) -> None:
        """Stop the agent's tree (stdin closed, SIGTERM, SIGKILL); its exit follows as usual."""
        self._send({"t": protocol.STOP, **({"grace": grace} if grace is not None else {})})

    async def release(self) -> None:
        """The gateway is done with this host: it stops the agent if running, and exits (LG-2)."""
        self._closing = True
        with contextlib.suppress(HostError):
            self._send({"t": protocol.RELEASE})
            await self._writer.drain()
        with contextlib.suppress(Exception):
            await self._reading

    async def close(self) -> None:
        """Detach: the host and its agent go on (until LG-1)."""
        self._closing = True
        self._writer.close()
        with contextlib.suppress(Exception):  # a peer that reads nothing more (a dropped link) is not waited for
            await asyncio.wait_for(self._writer.wait_closed(), 2.0)
        if self._writer.transport.get_write_buffer_size():  # still unsent: dropped, not flushed to no one
            self._writer.transport.abort()
        self._reading.cancel()
        with contextlib.suppress(BaseException):
            await self._reading


class AgentStdout:
    """The agent's stdout as a stream reader: `read(n)` hands out whole lines with their newlines, as many as have
    arrived (so a flood is read, dispatched and committed a chunk at a time, as from a pipe). Whoever splits them
    calls `line_done()` as it takes each line: `consumed` is then that line's offset — the peer's observers see each
    message with its own line's offset, whatever else came in the same chunk."""

    def __init__(self, connection: HostConnection) -> None:
        self._connection = connection
        # The lines handed out whose `line_done` has not come yet: runs of [next offset, lines left].
        self._runs: deque[list[int]] = deque()
        self._skipped = 0  # the last line a reattach passed over
        self.consumed = connection.committed
        self._eof = False
        # Lines a reattach passes over (their effects are committed: `ledger.Ledger.skip`); they count as consumed.
        self.skip: Callable[[int], bool] | None = None
        self.skip_until = -1  # no line past this offset is skipped (`skip` is not asked about them)

    def line_done(self) -> None:
        """The next line handed out is being handled now."""
        runs = self._runs
        if runs:
            run = runs[0]
            self.consumed = run[0]
            if run[1] == 1:
                runs.popleft()
            else:
                run[0] += 1
                run[1] -= 1
        if not runs and self._skipped > self.consumed:
            self.consumed = self._skipped

    async def read(self, n: int = -1) -> bytes:
        """At least one whole line (b"" at the end), then every line already here, up to about `n` bytes (at most
        PIPE_BYTES)."""
        lines = await self.read_lines(n)
        return b"\n".join(lines) + b"\n" if lines else b""

    async def read_lines(self, n: int = -1) -> list[bytes]:
        """`read`'s lines, without their newlines, not joined ([] at the end): the ACP reader takes them as they are
        instead of splitting what was joined for it. Whole runs as they arrived: only the lines a reattach may pass
        over (up to `skip_until`) are looked at one by one."""
        out: list[bytes] = []
        n = min(n, PIPE_BYTES) if n > 0 else PIPE_BYTES
        connection, runs = self._connection, self._runs
        while not out:
            if self._eof:
                return out
            await connection.wait_lines()
            taken = connection.take_runs(n)
            if taken is None:
                self._eof = True
                return out
            for first, lines in taken:
                if self.skip is None or first > self.skip_until:
                    out += lines
                    runs.append([first, len(lines)])
                    continue
                for offset, line in enumerate(lines, first):
                    if self.skip(offset):
                        self._skipped = offset
                        if not runs and not out:
                            self.consumed = offset
                    else:
                        out.append(line)
                        runs.append([offset, 1])
        return out

    async def readline(self) -> bytes:
        return await self.read(1)

    def at_eof(self) -> bool:
        return self._eof


class AgentStdin:
    """The agent's stdin as a byte sink: whole lines go out numbered (`HostConnection.send`). Closing it detaches
    this writer only: the agent's own stdin is closed by `HostConnection.stop` (or the host's end), never by a
    gateway that goes away."""

    def __init__(self, connection: HostConnection) -> None:
        self._connection = connection
        self._partial = b""
        self._closed = False

    def write(self, data: bytes) -> None:
        if self._closed:
            return
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            self._connection.send(line)

    async def drain(self) -> None:
        await self._connection.drain()

    def close(self) -> None:
        self._closed = True

    def is_closing(self) -> bool:
        return self._closed or self._connection.closed_reason is not None

