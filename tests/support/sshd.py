"""A real OpenSSH server on loopback for the remote-host tests (Debian's openssh-server, installed by `make test`),
logging in a Unix user of its own that is not the tests' (`acp-remote`, made if missing: the tests run as root on
CI machines), with a host key and a client key made for the test: nothing of the machine's own SSH set-up is used
or changed but that user."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from gateway.agenthost.ssh import SshOptions, SshTarget

SSHD = "/usr/sbin/sshd"
REMOTE_USER = "acp-remote"


@dataclass(frozen=True)
class Sshd:
    target: SshTarget
    options: SshOptions
    home: str  # the remote user's


def remote_user() -> pwd.struct_passwd:
    """The other Unix user the server logs in: made (with a home) if the machine does not have it yet."""
    try:
        found = pwd.getpwnam(REMOTE_USER)
        if os.geteuid() == 0:  # not locked (a user made elsewhere with useradd's '!'): sshd would refuse its keys
            subprocess.run(["usermod", "--password", "*", REMOTE_USER], check=True)
        return found
    except KeyError:
        assert os.geteuid() == 0, f"the remote-host tests need the Unix user {REMOTE_USER}: run them as root once"
        # No password, and not locked ('*', not useradd's '!'): sshd without PAM refuses a locked account's keys.
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", "--password", "*", REMOTE_USER], check=True)
        return pwd.getpwnam(REMOTE_USER)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare(directory: Path) -> tuple[pwd.struct_passwd, int]:
    """Keys, the remote user's authorized key and the server's configuration in `directory`: (the user, the port)."""
    assert Path(SSHD).exists() and shutil.which("ssh"), \
        "make test installs openssh-server (apt-get install openssh-server)"
    user = remote_user()
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / name)], check=True)
    dot_ssh = Path(user.pw_dir) / ".ssh"
    dot_ssh.mkdir(mode=0o700, exist_ok=True)
    keys = dot_ssh / "authorized_keys"
    with keys.open("a") as fh:  # appended: two tests' servers may run at once, each with a key of its own
        fh.write((directory / "client_key.pub").read_text())
    for path in (dot_ssh, keys):
        os.chown(path, user.pw_uid, user.pw_gid)
    keys.chmod(0o600)
    port = free_port()
    (directory / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host_key'}\nPidFile {directory / 'sshd.pid'}\n"
        "UsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"AllowUsers {REMOTE_USER}\nPermitRootLogin no\nAllowStreamLocalForwarding yes\nStreamLocalBindUnlink yes\n"
        "X11Forwarding no\nLogLevel INFO\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege-separation directory
    (directory / "known_hosts").write_text(f"[127.0.0.1]:{port} {(directory / 'host_key.pub').read_text()}")
    return user, port


@contextlib.asynccontextmanager
async def sshd(directory: Path) -> AsyncIterator[Sshd]:
    user, port = await asyncio.to_thread(prepare, directory)
    proc = await asyncio.create_subprocess_exec(SSHD, "-D", "-e", "-f", str(directory / "sshd_config"),
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    try:
        async def listening() -> None:  # it says so on stderr (-e, LogLevel INFO)
            while b"Server listening" not in (line := await proc.stderr.readline()):  # type: ignore[union-attr]
                assert line, "sshd ended before it listened"
        await asyncio.wait_for(listening(), 20)
        drain = asyncio.ensure_future(proc.stderr.read())  # what it logs of each login: never a full pipe
        yield Sshd(SshTarget(REMOTE_USER, "127.0.0.1", port),
                   SshOptions(str(directory / "client_key"), str(directory / "known_hosts")), user.pw_dir)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        await proc.wait()
        if "drain" in locals():
            drain.cancel()
