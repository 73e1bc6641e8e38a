"""An agent host on another machine, reached through OpenSSH (issue 47's remote hosts; docs/agent-hosts.md): where
it is (`ssh://user@host[:port]`), the operator's credentials (a key file and a known-hosts file from the
configuration, or the operator's SSH agent: never anything of an owner's), the host application sent over the link
once per version (`shipping.py`), the host started there as that user, and its socket forwarded to a local one — a
forward that dies (the link dropped, `kill -9`) is started again and the gateway attaches as after a restart."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from .client import HostError, HostHandle
from .shipping import application_hash, host_application
from .spec import HostSpec

TARGET = re.compile(r"^ssh://(?P<user>[a-z_][a-z0-9_.-]{0,31})@(?P<host>[A-Za-z0-9.-]{1,253}|\[[0-9a-fA-F:]+\])"
                    r"(?::(?P<port>[0-9]{1,5}))?$")
SSH = shutil.which("ssh", path="/usr/bin:/bin") or "/usr/bin/ssh"  # found once, never on a PATH anyone chose
# A forward dies with the gateway that started it (kill -9 included): the next gateway starts its own
SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")
TIMEOUT = 30.0
OUTPUT_BYTES = 64 * 1024  # what one remote command may say (each says a line or two)
# Under the remote user's home: the host application, the hosts' directories, the agent homes. Short: a host's
# socket there is reached by path (sshd's connect), at most 107 bytes.
REMOTE_STATE = ".acp-gateway"


@dataclass(frozen=True)
class SshOptions:
    """The operator's: which key and which known hosts (None: ssh's own defaults and the operator's SSH agent)."""

    identity_file: str | None = None
    known_hosts: str | None = None


@dataclass(frozen=True)
class SshTarget:
    user: str
    host: str
    port: int = 22

    @staticmethod
    def parse(url: str) -> SshTarget:
        """`ssh://user@host[:port]`; ValueError naming what is wrong."""
        match = TARGET.match(url)
        if match is None:
            raise ValueError(f"{url!r} is not ssh://user@host[:port] (a user name, a host name or [IPv6], a port)")
        port = int(match["port"] or 22)
        if not 0 < port < 65536:
            raise ValueError(f"{url!r}: the port is 1 to 65535")
        return SshTarget(match["user"], match["host"], port)

    def argv(self, options: SshOptions, *more: str) -> list[str]:
        """ssh's command line: no password prompt, no pseudo-terminal, the host key checked, then `more`."""
        argv = [SSH, "-p", str(self.port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-T",
                "-o", "ConnectTimeout=15",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-o", "ExitOnForwardFailure=yes"]
        if options.identity_file:
            argv += ["-i", options.identity_file, "-o", "IdentitiesOnly=yes"]
        if options.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={options.known_hosts}"]
        return [*argv, f"{self.user}@{self.host}", *more]


def ssh_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """What ssh starts with: a fixed PATH, the operator's HOME (its ~/.ssh) and SSH agent, nothing else of the
    gateway's environment (no variable that changes how a program loads reaches it)."""
    return {"PATH": "/usr/bin:/bin", "HOME": environ.get("HOME", "/"),
            **({"SSH_AUTH_SOCK": environ["SSH_AUTH_SOCK"]} if "SSH_AUTH_SOCK" in environ else {})}


async def run_remote(target: SshTarget, options: SshOptions, command: str, stdin: bytes | None = None,
                     timeout: float = TIMEOUT) -> bytes:
    """`command` run by the remote user's shell; its output (at most OUTPUT_BYTES: the remote side is not trusted
    to be brief — a login script may print without end). HostError with ssh's words when it fails."""
    given = asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(*target.argv(options, command), stdin=given,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                start_new_session=True, env=ssh_env(), cwd="/")
    assert proc.stdout is not None and proc.stderr is not None

    async def bounded(stream: asyncio.StreamReader) -> bytes:
        data = await stream.read(OUTPUT_BYTES + 1)
        while len(data) <= OUTPUT_BYTES and (more := await stream.read(OUTPUT_BYTES + 1 - len(data))):
            data += more
        if len(data) > OUTPUT_BYTES:
            proc.kill()
            raise HostError(f"ssh to {target.host}: the remote side said more than {OUTPUT_BYTES} bytes (a login "
                            "script that prints?); nothing of it was taken")
        return data

    async def give() -> bytes:
        if stdin is not None and proc.stdin is not None:
            proc.stdin.write(stdin)
            with contextlib.suppress(ConnectionError):
                await proc.stdin.drain()
            proc.stdin.close()
        return b""

    async def talk() -> tuple[bytes, bytes]:
        _, out, err = await asyncio.gather(give(), bounded(proc.stdout), bounded(proc.stderr))  # type: ignore[arg-type]
        await proc.wait()
        return out, err

    try:
        out, err = await asyncio.wait_for(talk(), timeout)
    except (TimeoutError, HostError) as exc:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        if isinstance(exc, HostError):
            raise
        raise HostError(f"ssh to {target.host} did not answer within {timeout:g} s") from None
    if proc.returncode != 0:
        said = " ".join(err.decode(errors="replace").strip().splitlines()[-2:]) or f"exit status {proc.returncode}"
        raise HostError(f"ssh {target.user}@{target.host}:{target.port}: {said}")
    return out


async def remote_home(target: SshTarget, options: SshOptions) -> str:
    return (await run_remote(target, options, 'printf %s "$HOME"')).decode()


async def kill_remote_host(target: SshTarget, options: SshOptions, host_pid: int, directory: str) -> None:
    """The remote host killed (its agent dies with it) if that pid is still a shipped host, and its directory (its
    socket and spool: the agent's conversation) removed."""
    await run_remote(target, options, f"grep -qs acp-gateway/host- /proc/{int(host_pid)}/cmdline && "
                     f"kill -KILL {int(host_pid)}; rm -rf -- {shlex.quote(directory)}; "
                     f"rmdir -- {shlex.quote(str(Path(directory).parent))} 2>/dev/null; true")


async def ship_host(target: SshTarget, options: SshOptions, home: str) -> str:
    """The host application on the remote machine (sent only when that version is not there yet): its path."""
    application = host_application()
    directory = f"{home}/{REMOTE_STATE}"
    path = f"{directory}/host-{application_hash(application)}.pyz"
    quoted, partial = shlex.quote(path), shlex.quote(f"{path}.part")
    whole = hashlib.sha256(application).hexdigest()  # one there that is not these bytes (changed) is replaced
    await run_remote(target, options, f"umask 077; mkdir -p {shlex.quote(directory)} && "
                     f"{{ {{ test -f {quoted} && [ \"$(sha256sum < {quoted} | cut -c1-64)\" = {whole} ]; }} || "
                     f"{{ cat > {partial} && mv -f {partial} {quoted}; }}; }}", application)
    return path


async def start_remote_host(target: SshTarget, options: SshOptions, application: str, spec: HostSpec,
                            python: str = "python3") -> HostHandle:
    """The host started on the remote machine as its user, detached there (it outlives the link); its handle once
    its socket listens (`ready`), as `client.start_host` does locally."""
    spec.check()
    directory = str(Path(spec.socket_path).parent)
    spec_path = f"{directory}/.{Path(spec.socket_path).name}.spec"
    command = (f"umask 077; mkdir -p {shlex.quote(directory)} && cat > {shlex.quote(spec_path)} && "
               f"exec setsid {shlex.quote(python)} -I {shlex.quote(application)} {shlex.quote(spec_path)}")
    said = (await run_remote(target, options, command, orjson.dumps(asdict(spec)))).decode(errors="replace")
    words = said.strip().split(" ", 2)
    if len(words) == 3 and words[0] == "ready":
        return HostHandle(spec.socket_path, spec.spool_dir, int(words[1]), int(words[2]))
    if words[0] == "error":  # the host's own words: `error <why>`
        raise HostError(f"the agent host on {target.host} could not start the agent: {' '.join(words[1:])} "
                        f"({spec.argv[0]!r} with PATH {spec.env.get('PATH', '')!r} there)")
    raise HostError(f"the agent host on {target.host} did not start: {said.strip()[:300] or 'no output'}")


class Forward:
    """The remote host's socket forwarded to a local one (`ssh -N -L`); started again after a dropped link."""

    def __init__(self, target: SshTarget, options: SshOptions, local: Path, remote: str) -> None:
        self.target, self.options, self.local, self.remote = target, options, local, remote
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, timeout: float = TIMEOUT) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.local.unlink()  # a dead forward's socket
        self.proc = await asyncio.create_subprocess_exec(
            *([SETPRIV, "--pdeathsig", "KILL", "--"] if SETPRIV else []),
            *self.target.argv(self.options, "-N", "-o", "StreamLocalBindUnlink=yes",
                              "-L", f"{self.local}:{self.remote}"),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, env=ssh_env(), cwd="/")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.local.exists():  # ssh makes the socket once the link is up: no other sign of it
            if self.proc.returncode is not None or loop.time() > deadline:
                err = b""
                if self.proc.stderr is not None:
                    with contextlib.suppress(Exception):
                        err = await asyncio.wait_for(self.proc.stderr.read(4096), 1)
                await self.stop()
                raise HostError(f"ssh could not forward the host's socket from {self.target.host}: "
                                f"{err.decode(errors='replace').strip() or 'timed out'}")
            await asyncio.sleep(0.02)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
