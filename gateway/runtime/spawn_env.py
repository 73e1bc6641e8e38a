"""What every process the gateway spawns for an agent starts with: a pure decision by table (rule ids ENV-n, shared by
`launcher.py`, docs/security.md and tests/gateway/runtime/test_spawn_env.py).

An agent may be hostile to the gateway and to every other owner. Between the gateway and an agent's program stand
wrappers the gateway runs as itself — `setpriv`, `prlimit`, `python -I -m gateway.runtime.outbound` (its network),
`bwrap` — and none of them may take anything from the agent: not its variables (`LD_PRELOAD` in a
`terminal/create` runs a library in every one of them), not its directory (`python -m` puts the working directory
first on the import path), not a program found on a `PATH` it chose. So:

- ENV-1 a wrapper starts with `WRAPPER_ENV` only (and the launch's marker, by which the reaper finds it), in `/`;
  the tools are absolute paths resolved once when the gateway starts.
- ENV-2 under bubblewrap the program's own environment — the operator's allowlist and profile values, a sign-in's
  values, what the agent asks for a terminal — is set inside the sandbox only (`--clearenv`, then each variable,
  read by bwrap from a file descriptor so that no value is on a command line), and its directory is set there
  (`--chdir`).
- ENV-3 unconfined (`sandbox = "none"`) there is no inside: a variable an agent or a sign-in names that changes how
  programs load or start (`loading_name`) would reach the wrappers and whatever the gateway runs, and is refused
  with an error that says so; the operator's own (profile `env`) are the operator's choice and pass.
- ENV-4 any other variable passes (into the sandbox, or to the unconfined program).
- ENV-5 a name that is no variable name (empty, with `=` or NUL) or a value with NUL is refused, from anyone.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

WRAPPER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
WRAPPER_ENV: Mapping[str, str] = {"PATH": WRAPPER_PATH, "LANG": "C.UTF-8"}

# Names that make a program load or run code it was not asked to: the dynamic loader's and libc's, and the start-up
# hooks of shells and interpreters. Unconfined, set by an agent, they would run its code in the wrappers the gateway
# runs (`setpriv`, `prlimit`). Names that only steer the agent's own program (PATH, HOME, GIT_*, …) are the agent's.
LOADING_NAMES = (
    "LD_*", "GCONV_PATH", "GLIBC_TUNABLES", "MALLOC_*", "LOCPATH", "NLSPATH", "HOSTALIASES",
    "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "BASH_FUNC_*",
    "PYTHON*", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYOPT", "NODE_OPTIONS", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
)


class Source(StrEnum):
    OPERATOR = "operator"  # the gateway's allowlist of its own environment, a profile's `env`: trusted
    SIGN_IN = "sign_in"  # an `env_var` sign-in method's variables (named by the agent), a terminal sign-in's env
    AGENT = "agent"  # what an agent asks for a command of its (`terminal/create` env)


class Verdict(StrEnum):
    PASS = "pass"
    REFUSED = "refused"


def loading_name(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in LOADING_NAMES)


def valid_name(name: str) -> bool:
    return bool(name) and "=" not in name and "\0" not in name


def decide(name: str, value: str, source: Source, confined: bool) -> tuple[str, Verdict]:
    """Whether a variable from `source` may be in the environment of a program the gateway runs for an agent."""
    if not valid_name(name) or "\0" in value:
        return "ENV-5", Verdict.REFUSED
    if confined:
        return "ENV-2", Verdict.PASS
    if source is not Source.OPERATOR and loading_name(name):
        return "ENV-3", Verdict.REFUSED
    return "ENV-4", Verdict.PASS


def refusal(variables: Iterable[tuple[str, str]], source: Source, confined: bool) -> str | None:
    """The first variable of `variables` that may not be set, said for the one who set it; None when all may."""
    for name, value in variables:
        rule, verdict = decide(name, value, source, confined)
        if verdict is Verdict.REFUSED:
            if rule == "ENV-5":
                return f"{name!r} is not a variable name, or its value holds a NUL byte ({rule})"
            return (f"{name} changes how programs load or start, and this agent runs without a sandbox, where it "
                    f"would reach the gateway's own processes: it is refused ({rule}); run the agent under "
                    'sandbox = "bwrap" to let it set that inside its sandbox')
    return None


def wrapper_env(markers: Mapping[str, str]) -> dict[str, str]:
    """ENV-1: the whole environment of a wrapper (bwrap, prlimit, setpriv, the outbound network's Python): fixed,
    with the launch's markers (not secrets: the reaper and a terminal's stop find the whole process tree by them)."""
    return {**WRAPPER_ENV, **markers}


@dataclass(frozen=True)
class Spawn:
    """How to start a program for an agent: the process the gateway starts (a wrapper when confined), with this
    environment, in this directory, handed these file descriptors (closed by `close` once it started)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: tuple[int, ...] = field(default=())

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def bwrap_env_args(env: Mapping[str, str]) -> bytes:
    """ENV-2: bubblewrap's arguments that give the program exactly `env` (NUL-separated, as `bwrap --args FD` reads
    them): no variable of bwrap's own reaches it, and no value is on a command line (`ps` shows command lines to
    every user of the machine)."""
    parts = ["--clearenv"]
    for name, value in env.items():
        parts += ["--setenv", name, value]
    return b"".join(part.encode() + b"\0" for part in parts)


def args_fd(data: bytes) -> int:
    """A file descriptor holding `data` from its start (an anonymous memory file): for `bwrap --args FD`. The
    caller hands it to the spawned process (`pass_fds`) and closes its own copy once the process started."""
    fd = os.memfd_create("acp-gateway-bwrap-args")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
