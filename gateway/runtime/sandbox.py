"""Running an agent confined: the bubblewrap command line that shows it only its owner's world, built by a pure
function of a plan (`bwrap_argv`), and how to tell which resource limit an agent that died had hit (`limit_hit`).

Under `bwrap` an agent sees: the system directories read-only; the programs it needs read-only (the gateway's own
Python and code for Python agents, its command's prefix, a profile's `sandbox_read`); its session's workspace and
additional directories, and its owner's agent home, read-write; a private /tmp; its own /proc (a PID namespace: no
other process, no /proc/<gateway>/environ). The gateway's state directory, its configuration and its store are
masked wherever a bound directory holds them; other owners' workspaces and homes are simply not there. Its uid
inside is its owner's (a user namespace), and it dies with the gateway.
"""

from __future__ import annotations

import hashlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Network = Literal["host", "none", "outbound"]
SYSTEM_DIRECTORIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
FIRST_OWNER_UID = 10_000  # owners' uids inside the sandbox: 10000 + a hash of the owner, never 0


def system_directories() -> tuple[tuple[str, str | None], ...]:
    """The system directories this machine has: (path, None) for a directory, (path, target) for a symlink (a
    merged /usr's /bin -> usr/bin), made the same inside."""
    return tuple((d, os.readlink(d) if os.path.islink(d) else None) for d in SYSTEM_DIRECTORIES if os.path.exists(d))


def owner_uid(owner: str) -> int:
    return FIRST_OWNER_UID + int(hashlib.sha256(owner.encode()).hexdigest()[:8], 16) % 50_000


@dataclass(frozen=True)
class Limits:
    """Resource limits (rlimits) an agent runs under; None: the gateway's own."""

    address_space: int | None = None  # bytes
    processes: int | None = None
    file_size: int | None = None  # bytes
    open_files: int | None = None

    def prlimit_args(self) -> list[str]:
        pairs = (("--as", self.address_space), ("--nproc", self.processes), ("--fsize", self.file_size),
                 ("--nofile", self.open_files))
        return [f"{flag}={value}" for flag, value in pairs if value is not None]


@dataclass(frozen=True)
class SandboxPlan:
    command: Sequence[str]  # the agent's argv, its program an absolute path
    cwd: str
    writable: Sequence[str]  # the workspace and the additional directories
    home: str
    readable: Sequence[str] = ()  # programs' directories besides the system's
    masked_dirs: Sequence[str] = ()  # the gateway's own (its state directory): hidden wherever a bound one holds them
    masked_files: Sequence[str] = ()  # the gateway's own files (configuration, a store kept elsewhere): likewise
    system: Sequence[tuple[str, str | None]] = ()  # `system_directories()`
    network: Network = "host"
    uid: int = FIRST_OWNER_UID
    sockets: Sequence[tuple[str, str]] = ()  # (the gateway's socket, where the sandbox sees it): the key proxy's


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def bwrap_argv(plan: SandboxPlan, bwrap: str = "bwrap", args_fd: int | None = None) -> list[str]:
    """The bubblewrap command line for `plan` (without the rlimit wrapper: see `Limits.prlimit_args`). `args_fd`:
    a descriptor bwrap reads more arguments from first (the program's environment: `spawn_env.bwrap_env_args`)."""
    argv = [bwrap] + (["--args", str(args_fd)] if args_fd is not None else [])
    argv += ["--unshare-all", "--die-with-parent", "--new-session"]
    if plan.network != "none":  # host: the host's; outbound: the one `outbound` made for it (slirp4netns)
        argv.append("--share-net")
    argv += ["--unshare-user", "--uid", str(plan.uid), "--gid", str(plan.uid)]
    bound: list[str] = []
    for directory, target in plan.system:
        if target is not None:
            argv += ["--symlink", target, directory]
        else:
            argv += ["--ro-bind", directory, directory]
            bound.append(directory)
    # Its own /dev, /proc and /tmp before the programs' and the session's directories, which may lie in /tmp
    # (a checkout there, a workspace there): a tmpfs mounted after them would hide them.
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for directory in plan.readable:
        if not any(within(directory, b) for b in bound):
            argv += ["--ro-bind", directory, directory]
            bound.append(directory)
    # After the read-only binds they may lie in, before the writable ones (the owner's home is in the state dir).
    for own in plan.masked_dirs:
        if any(within(own, b) for b in bound):
            argv += ["--tmpfs", own]
    for own in plan.masked_files:
        if any(within(own, b) for b in bound):
            argv += ["--ro-bind", "/dev/null", own]
    for directory in (*plan.writable, plan.home):
        argv += ["--bind", directory, directory]
    for source, target in plan.sockets:  # read-only: connecting needs no write, and nothing inside may chmod it
        argv += ["--ro-bind", source, target]
    argv += ["--setenv", "HOME", plan.home, "--chdir", plan.cwd, "--", *plan.command]
    return argv


# A signal that names its limit; else the words an agent's runtime prints when an rlimit refuses it.
LIMIT_SIGNALS = {signal.SIGXFSZ: "file_size", signal.SIGXCPU: "cpu_time"}
LIMIT_WORDS = (("open_files", ("Too many open files", "EMFILE")),
               ("processes", ("Resource temporarily unavailable", "EAGAIN", "can't fork", "fork failed")),
               ("address_space", ("Cannot allocate memory", "MemoryError", "out of memory", "ENOMEM",
                                  "heap out of memory", "std::bad_alloc")),
               ("file_size", ("File too large", "EFBIG")))


def limit_hit(returncode: int | None, stderr_lines: Sequence[str], limits: Limits) -> str | None:
    """Which of `limits` an agent that ended with `returncode` and said `stderr_lines` ran into, if any."""
    # killed by a signal: -N from the process itself, 128+N from a wrapper (bwrap, a shell) that reports it
    number = -returncode if returncode is not None and returncode < 0 else (
        returncode - 128 if returncode is not None and 128 < returncode < 160 else None)
    if number is not None:
        try:
            name = LIMIT_SIGNALS.get(signal.Signals(number))
        except ValueError:
            name = None
        if name is not None:
            return name
    configured = {"address_space": limits.address_space, "processes": limits.processes,
                  "file_size": limits.file_size, "open_files": limits.open_files}
    text = "\n".join(stderr_lines)
    for name, words in LIMIT_WORDS:
        if configured.get(name) is not None and any(word in text for word in words):
            return name
    return None
