"""The agent host process: runs one agent as its child, spools every line, serves one gateway at a time on its unix
socket, and ends by the LG rules (docs/agent-hosts.md). It decides nothing itself: `protocol.py` does; this performs.

Started by `python -m gateway.agenthost SPEC` (`__main__.py`), detached from the gateway. The agent leads its own
process group and gets SIGKILL when the host dies (PR_SET_PDEATHSIG); it is stopped like `acp.process` stops it
(stdin closed, SIGTERM to the group, SIGKILL, then every process carrying its tree marker). The terminals the agent
opens run here too, as the gateway says (`host_terminals.py`, TM-…), and end with the agent's tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from acp import fs
from acp.errors import INTERNAL_ERROR, METHOD_NOT_FOUND, RpcError
from acp.process import AgentProcess, ExitProtocol, StderrRing

from . import protocol
from .host_terminals import HostTerminals, terminal_preexec
from .protocol import FrameError, LineSplitter
from .spec import HostSpec, private_directory, socket_address
from .spool import AGENT, GATEWAY, Spool, SpoolError, reading_paced

READ_CHUNK = 64 * 1024
STDOUT_LIMIT = 1 << 20  # asyncio's pipe buffer before it stops reading the agent (as acp.process)
SEND_BATCH_BYTES = 256 * 1024  # agent lines read from the spool per write to a gateway taking JSON frames
# A raw batch: about what a pipe holds, so the gateway hands its ACP reader a batch at a time (one group commit each).
RAW_BATCH_BYTES = 64 * 1024
HELLO_TIMEOUT = 10.0  # a connection that says nothing is closed (it holds no attachment)
PR_SET_PDEATHSIG = 1


class StartError(Exception):
    """The agent could not be started: said to the gateway through the ready pipe."""


def die_with_host() -> Callable[[], None]:
    """A preexec_fn that has the kernel SIGKILL the child when the host dies, however it dies (a terminal's, with no
    descriptor to move)."""
    return terminal_preexec([])


async def spawn_agent(spec: HostSpec) -> AgentProcess:
    """The agent, as `acp.process.AgentProcess.spawn` starts it, plus the parent-death signal."""
    loop = asyncio.get_running_loop()
    try:
        transport, exit_protocol = await loop.subprocess_exec(
            lambda: ExitProtocol(STDOUT_LIMIT, loop), *spec.argv,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=spec.cwd, env=dict(spec.env), start_new_session=True, preexec_fn=die_with_host(),
            pass_fds=tuple(spec.pass_fds))
    except FileNotFoundError as exc:
        raise StartError(f"agent command not found: {spec.argv[0]!r} ({exc.strerror})") from exc
    except PermissionError as exc:
        raise StartError(f"agent command not executable: {spec.argv[0]!r}") from exc
    except NotADirectoryError as exc:
        raise StartError(f"working directory is not usable: {spec.cwd!r}") from exc
    except OSError as exc:
        raise StartError(f"agent could not start: {exc.strerror or exc}") from exc
    process = asyncio.subprocess.Process(transport, exit_protocol, loop)
    marker = spec.tree_marker
    tree = (marker, spec.env[marker]) if marker and spec.env.get(marker) else None
    return AgentProcess(process, spec.argv, StderrRing(spec.stderr_bytes), exit_protocol.exited, tree)


FILE_OPERATIONS = 4  # file reads and writes served at once (FS-1): more wait their turn
FILE_READ_BYTES = 8 * 1024 * 1024  # a file read there (it crosses the link as one frame, then the gateway's socket)


class FrameReader:
    """A connection's frames, one at a time; None at its end."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._splitter = LineSplitter()
        self._ready: list[bytes] = []

    async def _fill(self) -> bool:
        """Until a whole frame is read (newest last in `_ready`, reversed); False at the connection's end."""
        while not self._ready:
            chunk = await self._reader.read(READ_CHUNK)
            if not chunk:
                return False
            self._ready = self._splitter.feed(chunk)
            self._ready.reverse()
        return True

    async def next(self) -> dict[str, Any] | None:
        return protocol.decode(self._ready.pop()) if await self._fill() else None

    async def next_lines(self) -> list[bytes] | None:
        """Every whole frame already read (at least one), in order and undecoded; None at the connection's end."""
        if not await self._fill():
            return None
        lines, self._ready = self._ready, []
        lines.reverse()
        return lines


class Attachment:
    """The attached gateway's connection."""

    def __init__(self, writer: asyncio.StreamWriter, incarnation: int, cursor: int, raw: bool = False) -> None:
        self.writer = writer
        self.incarnation = incarnation
        self.raw = raw  # its hello asked for the agent's lines as raw batches
        self.cursor = cursor  # the last agent line sent on it
        self.exit_sent = False
        self.sender: asyncio.Task[None] | None = None

    def send(self, frame: dict[str, Any]) -> None:
        self.send_bytes(protocol.encode(frame))

    def send_bytes(self, frames: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(frames)

    def end(self, frame: dict[str, Any] | None = None) -> None:
        if frame is not None:
            self.send(frame)
        if self.sender is not None:
            self.sender.cancel()
        self.writer.close()


class Host:
    def __init__(self, spec: HostSpec, agent: AgentProcess, spool: Spool) -> None:
        self.spec = spec
        self.agent = agent
        self.spool = spool
        self.attached: Attachment | None = None
        self.newest_incarnation: int | None = None
        self.written = 0  # the last gateway line taken into the spool: it reaches the agent, in order, once
        self.delivered = 0  # the last gateway line written to the agent's stdin
        self.exit_code: int | None = None
        self.released = False  # LG-2
        self.detached_since = time.monotonic()
        self.ended_by: str | None = None  # the LG rule the host ended by
        self._agent_lines = asyncio.Event()  # new agent lines or its exit
        # The gateway acknowledged agent lines, or was sent some, or detached: SP-1 or SP-3 may let reading go on.
        self._may_read = asyncio.Event()
        self._gateway_lines = asyncio.Event()  # new gateway lines for the agent
        self._life = asyncio.Event()  # something LG-* looks at changed
        self._tasks: set[asyncio.Task[Any]] = set()
        self.terminals = HostTerminals(self._to_gateway, self._gateway_took)
        # FS-1: the agent's files, where it runs: its directory pinned now, reached without a link (as a sandbox
        # there binds it: a directory swapped for a link meanwhile is refused, never followed), so a link swapped
        # in later moves nothing; at most FILE_OPERATIONS at once, each read at most FILE_READ_BYTES
        self.files: fs.PinnedRoot | None = None
        self._files_refused = "its gateway serves them"
        if spec.files_root:
            try:
                self.files = fs.PinnedRoot.open_without_links(spec.files_root)
            except OSError as exc:
                self._files_refused = f"{spec.files_root} is not a directory reached without links ({exc})"
        self._file_slots = asyncio.Semaphore(FILE_OPERATIONS)

    def _to_gateway(self, frame: dict[str, Any]) -> None:
        """A frame for the attached gateway; nothing while none is (what it says is kept for the next one)."""
        if self.attached is not None:
            self.attached.send(frame)

    async def _gateway_took(self) -> None:
        """Until the attached gateway's connection took what was written to it (at once when none is attached)."""
        attachment = self.attached
        if attachment is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await attachment.writer.drain()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the agent's side --------------------------------------------------------------------------------------------
    async def read_agent(self) -> None:
        """Every stdout line into the spool; paused while SP-1 or SP-3 says so. Then the exit (the agent's whole
        tree)."""
        splitter, stdout, spool = LineSplitter(), self.agent.stdout, self.spool
        while True:
            # SP-1 (backpressure) and SP-3 (pacing): the agent blocks on its full pipe, nothing is lost.
            while spool.paused or reading_paced(self._unsent_lines()):
                self._may_read.clear()
                if spool.paused or reading_paced(self._unsent_lines()):
                    await self._may_read.wait()
            chunk = await stdout.read(READ_CHUNK)
            if not chunk:
                break
            if lines := splitter.feed(chunk):
                spool.append(AGENT, lines)
                self._agent_lines.set()
        if (tail := splitter.tail()) is not None:
            spool.append(AGENT, [tail])
        code = await self.agent.wait()
        await self.terminals.kill_all()  # TM-6: the agent's terminals end with it (their exits are told first)
        self.exit_code = code
        self._agent_lines.set()
        self._life.set()

    def _unsent_lines(self) -> int | None:
        """The agent's lines spooled and not yet sent to the attached gateway; None when none is attached."""
        attachment = self.attached
        return None if attachment is None else self.spool.head(AGENT) - attachment.cursor

    async def write_agent(self) -> None:
        """The gateway's lines to the agent's stdin, from the spool, in sequence order, each once."""
        stdin = self.agent.stdin
        while True:
            self._gateway_lines.clear()
            if self.delivered >= self.written:
                await self._gateway_lines.wait()
                continue
            for seq, line in self.spool.read_after(GATEWAY, self.delivered):
                self.delivered = seq
                if not stdin.is_closing():
                    stdin.write(line + b"\n")
            with contextlib.suppress(ConnectionError):  # the agent is gone: its exit says so
                await stdin.drain()

    # -- the gateway's side ------------------------------------------------------------------------------------------
    def facts(self) -> protocol.HostFacts:
        return protocol.HostFacts(self.spec.secret_hash, self.newest_incarnation, self.attached is not None,
                                  self.spool.head(AGENT), self.spool.floor(AGENT))

    def status(self) -> dict[str, Any]:
        spool = self.spool
        return {"t": protocol.STATUS, "head": spool.head(AGENT), "acked": spool.acked(AGENT),
                "floor": spool.floor(AGENT), "unacked_bytes": spool.unacked_bytes(AGENT),
                "stored_bytes": spool.stored_bytes(), "paused": spool.paused, "written": self.written,
                "delivered": self.delivered, "exit": self.exit_code, "agent_pid": self.agent.pid,
                "host_pid": os.getpid()}

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameReader(reader)
        try:
            first = await asyncio.wait_for(frames.next(), HELLO_TIMEOUT)
        except (TimeoutError, FrameError, ConnectionError):
            first = None
        verdict, hello = protocol.decide_hello(first or {}, self.facts())
        if not verdict.accepted or hello is None:
            writer.write(protocol.encode(protocol.refused(verdict)))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()
            return
        if verdict.supersede and self.attached is not None:  # AH-3
            self.attached.end({"t": protocol.SUPERSEDED, "rule": "AH-3",
                               "reason": f"incarnation {hello.incarnation} attached"})
        self.newest_incarnation = hello.incarnation
        if hello.committed > self.spool.acked(AGENT):  # AH-6: what the gateway committed it never needs again
            self.spool.ack(AGENT, hello.committed)
            self._may_read.set()
        attachment = self.attached = Attachment(writer, hello.incarnation, hello.committed, hello.raw)
        self._life.set()
        attachment.send(protocol.welcome(self.spool.head(AGENT), self.written, os.getpid(), self.agent.pid,
                                         self.exit_code, self.terminals.reports(), bool(self.spec.files_root)))
        attachment.sender = self._spawn(self.send_agent_lines(attachment))
        try:
            await self.receive(attachment, frames)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            attachment.end()
            if self.attached is attachment:
                self.attached = None
                self._may_read.set()
                self.detached_since = time.monotonic()
                self._life.set()

    async def send_agent_lines(self, attachment: Attachment) -> None:
        """Replay after the committed offset, then live: one loop, always from the spool; the exit after the last
        line."""
        spool = self.spool
        try:
            while True:
                self._agent_lines.clear()
                if attachment.cursor < spool.head(AGENT):
                    if attachment.raw:  # one batch, never split into lines here
                        block = spool.read_block_after(AGENT, attachment.cursor, RAW_BATCH_BYTES)
                        attachment.send_bytes(protocol.encode_raw_batch(attachment.cursor + 1, block))
                        attachment.cursor += block.count(b"\n")
                    else:
                        for offset, line in spool.read_after(AGENT, attachment.cursor, SEND_BATCH_BYTES):
                            attachment.send({"t": protocol.LINE, "offset": offset, **protocol.carry(line)})
                            attachment.cursor = offset
                    await attachment.writer.drain()
                    self._may_read.set()
                    continue
                if self.exit_code is not None and not attachment.exit_sent:
                    attachment.exit_sent = True
                    attachment.send({"t": protocol.EXIT, "code": self.exit_code, "head": spool.head(AGENT)})
                    await attachment.writer.drain()
                await self._agent_lines.wait()
        except SpoolError as exc:  # the gateway acknowledged lines it had not been sent
            attachment.end(protocol.violation("AH-11", str(exc)))
        except ConnectionError:
            attachment.end()

    async def receive(self, attachment: Attachment, frames: FrameReader) -> None:
        spool = self.spool
        while self.attached is attachment:
            try:
                frame = await frames.next()
                if frame is None:
                    return
                request = protocol.parse_request(frame)
            except FrameError as exc:
                attachment.end(protocol.violation("AH-13", str(exc)))
                return
            if request.kind == protocol.LINE:
                rule, action = protocol.decide_gateway_line(request.seq, self.written)
                if action == "violation":
                    attachment.end(protocol.violation(rule, f"line {request.seq} after {self.written}: a gap"))
                    return
                if action == "write":
                    spool.append(GATEWAY, [request.data])
                    self.written = request.seq
                    self._gateway_lines.set()
                attachment.send({"t": protocol.WRITTEN, "seq": self.written})
            elif request.kind == protocol.ACK:
                rule, ack = protocol.decide_ack(request.offset, spool.acked(AGENT), spool.head(AGENT))
                if ack == "violation":
                    attachment.end(protocol.violation(rule, f"ack {request.offset} past head {spool.head(AGENT)}"))
                    return
                if ack == "trim":
                    spool.ack(AGENT, request.offset)
                    self._may_read.set()
                if request.sent is not None:  # the gateway's own lines: kept until delivered and acknowledged
                    spool.ack(GATEWAY, min(request.sent, self.delivered))
            elif request.kind == protocol.STDERR:
                attachment.send({"t": protocol.STDERR, "lines": self.agent.stderr.tail_lines(request.lines),
                                 "total": self.agent.stderr.total_bytes})
            elif request.kind == protocol.STATUS:
                attachment.send(self.status())
            elif request.kind == protocol.STOP:
                self._spawn(self.stop_tree(self.spec.stop_grace if request.grace is None else request.grace))
            elif request.kind == protocol.TERM_START and request.start is not None:  # TM-1, TM-2
                attachment.send(await self.terminals.start(request.start))
            elif request.kind == protocol.TERM_KILL:  # TM-5
                self.terminals.kill(request.terminal_id)
            elif request.kind == protocol.TERM_RELEASE:  # TM-5: its tree may take a while to end; lines go on
                self._spawn(self._release_terminal(attachment, request.terminal_id))
            elif request.kind == protocol.FILE and request.file is not None:  # FS-1, off the loop
                self._spawn(self._serve_file(attachment, request.file))
            elif request.kind == protocol.RELEASE:  # LG-2
                self.released = True
                self._life.set()
                return
            await attachment.writer.drain()

    async def _serve_file(self, attachment: Attachment, request: protocol.FileRequest) -> None:
        answer: dict[str, Any] = {"t": protocol.FILE_DONE, "id": request.id}
        try:
            if self.files is None:
                raise RpcError(METHOD_NOT_FOUND, f"this agent host serves no files: {self._files_refused}")
            async with self._file_slots:
                if request.op == "read":
                    answer["content"] = await asyncio.to_thread(fs.read_text_file, self.files, request.path,
                                                                request.line, request.limit, self.spec.files_never,
                                                                (), FILE_READ_BYTES)
                else:
                    await asyncio.to_thread(fs.write_text_file, self.files, request.path, request.content,
                                            self.spec.files_never)
        except RpcError as exc:
            answer["error"] = {"code": exc.code, "message": exc.message, "data": exc.data}
        except Exception as exc:  # the gateway is answered whatever happens
            answer["error"] = {"code": INTERNAL_ERROR, "message": f"{request.op} {request.path}: {exc}", "data": None}
        if self.attached is attachment:
            attachment.send(answer)

    async def _release_terminal(self, attachment: Attachment, terminal_id: str) -> None:
        answer = await self.terminals.release(terminal_id)
        attachment.send(answer)

    async def stop_tree(self, grace: float) -> None:
        """The agent's tree stopped, and its terminals (TM-6)."""
        await self.agent.stop(grace)
        await self.terminals.kill_all()

    # -- the host's life ---------------------------------------------------------------------------------------------
    def terminate(self) -> None:
        """SIGTERM to the host: as if released (LG-2)."""
        self.released = True
        self._life.set()

    async def live(self) -> str:
        """Until an LG rule ends the host; returns its id."""
        while True:
            self._life.clear()
            detached_for = time.monotonic() - self.detached_since
            rule, life = protocol.decide_life(released=self.released, attached=self.attached is not None,
                                              detached_for=detached_for, linger=self.spec.linger)
            if life == "end":
                return rule
            wait = None if self.attached is not None else self.spec.linger - detached_for
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._life.wait(), wait)


async def run(spec: HostSpec, ready: Callable[[str], None]) -> str:
    """The host's whole life. `ready` is told `ready <host pid> <agent pid>` once the socket listens, or `error
    <why>` when it cannot start. Returns the LG rule it ended by."""
    socket_path = Path(spec.socket_path)
    private_directory(socket_path.parent)
    try:
        spool = Spool(Path(spec.spool_dir), spec.spool_max_bytes)
    except (OSError, ValueError) as exc:
        ready(f"error the spool cannot be made: {exc}")
        return "start"
    try:
        agent = await spawn_agent(spec)
    except StartError as exc:
        spool.remove()
        ready(f"error {exc}")
        return "start"
    for fd in spec.pass_fds:  # the agent has its copies
        with contextlib.suppress(OSError):
            os.close(fd)
    host = Host(spec, agent, spool)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, host.terminate)
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()  # a dead host's socket: nothing listens on it
    with socket_address(spec.socket_path) as address:
        server = await asyncio.start_unix_server(host.serve, path=address, limit=READ_CHUNK)
    os.chmod(socket_path, 0o600)  # and the umask made it so from the start (__main__)
    reading = host._spawn(host.read_agent())
    writing = host._spawn(host.write_agent())
    ready(f"ready {os.getpid()} {agent.pid}")
    rule = await host.live()
    server.close()
    with contextlib.suppress(FileNotFoundError):
        socket_path.unlink()
    if host.attached is not None:
        host.attached.end()
    if agent.returncode is None:
        await agent.stop(spec.stop_grace)
    await host.terminals.kill_all()  # TM-6 (they carry the agent's marker: most ended with its tree already)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(reading), spec.stop_grace)
    for task in (reading, writing, *host._tasks):
        task.cancel()
    spool.remove()
    return rule
