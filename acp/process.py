"""The agent as a child process: its own process group, stderr always drained, a staged stop.

An undrained stderr pipe deadlocks agents, so a reader task copies it into a bounded ring
buffer from the first byte. Stopping closes stdin (the polite ACP shutdown), then SIGTERMs the
whole group, then SIGKILLs it: wrappers like `npx`/`uvx` leave grandchildren otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from collections.abc import Mapping, Sequence

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


class AgentProcess:
    def __init__(self, proc: asyncio.subprocess.Process, argv: Sequence[str], stderr: StderrRing) -> None:
        self.proc = proc
        self.argv = list(argv)
        self.stderr = stderr
        self.pid = proc.pid
        self._drain_task = asyncio.get_running_loop().create_task(self._drain_stderr())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stderr_bytes: int = DEFAULT_STDERR_BYTES,
    ) -> AgentProcess:
        if not argv:
            raise TransportError("empty agent command")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                start_new_session=True,
                limit=_STDOUT_LIMIT,
            )
        except FileNotFoundError as exc:
            raise TransportError(f"agent command not found: {argv[0]!r} ({exc.strerror})") from exc
        except PermissionError as exc:
            raise TransportError(f"agent command not executable: {argv[0]!r}") from exc
        except NotADirectoryError as exc:
            raise TransportError(f"working directory is not usable: {cwd!r}") from exc
        return cls(proc, argv, StderrRing(stderr_bytes))

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

    async def wait(self) -> int:
        return await self.proc.wait()

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
                await asyncio.wait_for(self.proc.wait(), grace)
        self._signal_group(signal.SIGTERM)
        if self.proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), grace)
        self._signal_group(signal.SIGKILL)
        rc = await self.proc.wait()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self._drain_task, 1.0)
        return rc
