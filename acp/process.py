"""The agent as a child process: its own process group, stderr always drained, a staged stop, its whole tree.

An undrained stderr pipe deadlocks agents, so a reader task copies it into a bounded ring
buffer from the first byte. Stopping closes stdin (the polite ACP shutdown), then SIGTERMs the
whole group, then SIGKILLs it: wrappers like `npx`/`uvx` leave grandchildren otherwise.

The agent is its whole process tree. A child that left the group (`setsid`) is found by the marker in its
environment (`tree_marker`, see `acp.proctree`) and killed with the rest, both when the agent is stopped and when
it exits by itself: until then the children would hold its stdout open, and asyncio's `Process.wait()` waits for
its pipes to close, so the agent looked alive for as long as they lived. `wait()` here is the agent's own exit,
then its tree's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Protocol

from . import proctree
from .errors import TransportError

DEFAULT_STDERR_BYTES = 256 * 1024
_STDOUT_LIMIT = 1 << 20


class StderrRing:
    """The last `capacity` bytes of stderr, line-split on demand; counts everything it dropped."""

    def __init__(self, capacity: int = DEFAULT_STDERR_BYTES) -> None:
        self.capacity = capacity
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.total_bytes = 0
        self.dropped_bytes = 0

    def append(self, data: bytes) -> None:
        self.total_bytes += len(data)
        if len(data) >= self.capacity:
            self.dropped_bytes += self._size + len(data) - self.capacity
            self._chunks.clear()
            data = data[-self.capacity :]
            self._size = 0
        self._chunks.append(data)
        self._size += len(data)
        while self._size > self.capacity:
            head = self._chunks[0]
            excess = self._size - self.capacity
            if len(head) <= excess:
                self._chunks.popleft()
                self._size -= len(head)
                self.dropped_bytes += len(head)
            else:
                self._chunks[0] = head[excess:]
                self._size -= excess
                self.dropped_bytes += excess

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")

    def tail_lines(self, n: int = 20, since: int = 0) -> list[str]:
        """The last `n` lines; with `since` (a `total_bytes` read earlier), only of what was written after it."""
        data = b"".join(self._chunks)
        if since:
            data = data[len(data) - min(len(data), max(0, self.total_bytes - since)):]
        return data.decode("utf-8", "replace").splitlines()[-n:]


class ByteSource(Protocol):
    """What the JSON-RPC peer reads an agent from (an asyncio StreamReader, or a hosted agent's lines)."""

    async def read(self, n: int = -1) -> bytes: ...


class ByteSink(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...


class RunningAgent(Protocol):
    """An agent as the client speaks to it: a child process (`AgentProcess`) or one an agent host runs
    (`gateway.runtime.hosting.HostedAgent`)."""

    argv: list[str]
    pid: int
    stderr: StderrRing

    @property
    def stdin(self) -> ByteSink: ...

    @property
    def stdout(self) -> ByteSource: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    async def stderr_tail(self, lines: int = 3, drain_wait: float = 1.0) -> str: ...

    async def stop(self, grace: float = 2.0) -> int: ...


class ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's own protocol, telling when the process itself exited (not when its pipes closed)."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class AgentProcess:
    def __init__(self, proc: asyncio.subprocess.Process, argv: Sequence[str], stderr: StderrRing,
                 exited: asyncio.Future[None], tree: tuple[str, str] | None = None) -> None:
        self.proc = proc
        self.argv = list(argv)
        self.stderr = stderr
        self.pid = proc.pid
        self.tree = tree  # (name, value) of the environment entry every process of the agent carries
        self.stragglers: list[proctree.ProcessFacts] = []  # what outlived the agent and was killed
        loop = asyncio.get_running_loop()
        self._drain_task = loop.create_task(self._drain_stderr())
        self._exited = exited  # the process's own exit (`ExitProtocol`), not its pipes' closing
        self._tree_gone = loop.create_task(self._end_tree())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stderr_bytes: int = DEFAULT_STDERR_BYTES,
        tree_marker: str | None = None,
        pass_fds: Sequence[int] = (),
    ) -> AgentProcess:
        """Start `argv` in a session of its own. `tree_marker` names an entry of `env` unique to this launch: every
        process that carries it is the agent's, and is stopped with it. `pass_fds`: descriptors it inherits."""
        if not argv:
            raise TransportError("empty agent command")
        loop = asyncio.get_running_loop()
        try:
            # asyncio.create_subprocess_exec, with a protocol that tells the process's own exit.
            transport, protocol = await loop.subprocess_exec(
                lambda: ExitProtocol(_STDOUT_LIMIT, loop),
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )
        except FileNotFoundError as exc:
            raise TransportError(f"agent command not found: {argv[0]!r} ({exc.strerror})") from exc
        except PermissionError as exc:
            raise TransportError(f"agent command not executable: {argv[0]!r}") from exc
        except NotADirectoryError as exc:
            raise TransportError(f"working directory is not usable: {cwd!r}") from exc
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        value = (env or {}).get(tree_marker) if tree_marker else None
        return cls(proc, argv, StderrRing(stderr_bytes), protocol.exited,
                   (tree_marker, value) if tree_marker and value else None)

    @property
    def stdin(self) -> asyncio.StreamWriter:
        assert self.proc.stdin is not None
        return self.proc.stdin

    @property
    def stdout(self) -> asyncio.StreamReader:
        assert self.proc.stdout is not None
        return self.proc.stdout

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def _drain_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        with contextlib.suppress(Exception):
            while True:
                chunk = await stream.read(65536)
                if not chunk:
                    return
                self.stderr.append(chunk)

    async def _end_tree(self) -> None:
        """Once the agent itself exited: its group and every process carrying its marker are killed (children it
        left behind would hold its stdout open and run on unseen)."""
        await asyncio.shield(self._exited)
        self._signal_group(signal.SIGKILL)
        if self.tree is not None:
            self.stragglers = await proctree.kill_carrying(*self.tree)

    async def wait(self) -> int:
        """The agent's exit status, once it exited and nothing of its tree is left."""
        await asyncio.shield(self._tree_gone)
        rc = self.proc.returncode
        assert rc is not None
        return rc

    async def stderr_tail(self, lines: int = 3, drain_wait: float = 1.0) -> str:
        """The last lines of stderr, once the drain has read what an exited process left in the pipe."""
        if self.proc.returncode is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._drain_task), drain_wait)
        return " | ".join(line.strip() for line in self.stderr.tail_lines(lines) if line.strip())

    def _signal_group(self, sig: signal.Signals) -> None:
        # The child leads its own group (start_new_session), so its pid is the group id; the
        # group outlives the leader while grandchildren remain, which is exactly who we want.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def stop(self, grace: float = 2.0) -> int:
        """Close stdin, then SIGTERM the group, then SIGKILL it. Returns the exit status."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
        if self.proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._exited), grace)
        self._signal_group(signal.SIGTERM)
        if self.proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._exited), grace)
        self._signal_group(signal.SIGKILL)
        rc = await self.wait()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self._drain_task, 1.0)
        return rc
