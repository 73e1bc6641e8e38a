"""What an agent host is started with: the spec the gateway writes to a 0600 file and the host reads once and deletes
(never argv or the environment: the secret's hash is in it, and nothing of it reaches the agent). Also how a unix
socket with a long path is reached (a socket address holds 107 bytes; a state directory may be longer)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes with its NUL; longer paths go through /proc/self/fd


@dataclass(frozen=True)
class HostSpec:
    argv: list[str]  # the agent's command, as the gateway built it (bwrap, prlimit, nice, setpriv...)
    cwd: str  # where the agent's process starts
    env: dict[str, str]  # the agent's whole environment (the host's own is not passed on)
    spool_dir: str  # 0700, the spool's segments (0600)
    socket_path: str  # the host's socket (0600) in a 0700 directory
    secret_hash: str  # protocol.secret_hash of the per-execution secret; the secret itself never leaves the gateway
    spool_max_bytes: int = 64 * 1024 * 1024  # the agent's unacknowledged bytes past which the host stops reading it
    linger: float = 900.0  # seconds with no gateway attached before the host stops its agent and exits (LG-1)
    stop_grace: float = 2.0  # each stage of stopping the agent: stdin closed, SIGTERM, SIGKILL
    stderr_bytes: int = 256 * 1024  # the agent's stderr kept (a ring)
    tree_marker: str | None = None  # the entry of `env` every process of the agent carries (acp.proctree)
    log_path: str | None = None  # the host's own stderr; None: /dev/null
    pass_fds: list[int] = field(default_factory=list)  # descriptors the agent inherits (a sandbox's arguments)
    # The agent's file reads and writes served here (FS-1: a host on another machine, where its files are): the
    # directory they are confined to, and what under it is never served. None: the gateway serves them.
    files_root: str | None = None
    files_never: list[str] = field(default_factory=list)

    def check(self) -> None:
        if not self.argv:
            raise ValueError("the agent's command is empty")
        if self.spool_max_bytes <= 0:
            raise ValueError("spool_max_bytes must be positive")
        if self.linger <= 0:
            raise ValueError("linger must be positive (a host that may not linger is no host: run the agent directly)")
        if self.tree_marker is not None and self.tree_marker not in self.env:
            raise ValueError(f"the tree marker {self.tree_marker} is not in the agent's environment")


def write_spec(spec: HostSpec, path: Path) -> None:
    """A new 0600 file holding `spec` (refuses to overwrite one)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(orjson.dumps(asdict(spec)))


def take_spec(path: Path) -> HostSpec:
    """Reads the spec and deletes its file, whatever it held."""
    try:
        raw: Any = orjson.loads(path.read_bytes())
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    if not isinstance(raw, dict):
        raise ValueError("the spec is not a JSON object")
    spec = HostSpec(**raw)
    spec.check()
    return spec


def private_directory(path: Path) -> None:
    """`path` exists, is a directory and is 0700 (the host's socket and spool sit in such)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


@contextlib.contextmanager
def socket_address(path: str) -> Iterator[str]:
    """An address that reaches `path`: itself when short enough, else through an open descriptor of its directory."""
    if len(path.encode()) <= SOCKET_PATH_MAX:
        yield path
        return
    directory, name = os.path.split(path)
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)
