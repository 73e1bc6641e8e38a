"""Sessions whose agent runs on another machine (docs/remote-hosts.md): which configured remote host a session may
use (RH-1), which directories there it may work in (RH-2), what a remote session cannot have (RH-3), and the
agent's command and environment on that side (RH-4). Pure: the ssh runs that check a directory and start a host
are `agenthost/ssh.py`'s, called from `hosting.py`."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from ..agenthost.ssh import REMOTE_STATE, SshOptions, SshTarget

if TYPE_CHECKING:
    from ..config import ServeConfig

SYSTEM_DIRECTORIES = ("/proc", "/sys", "/dev")
STATE = REMOTE_STATE
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
SESSION_ID = re.compile(r"^s-[0-9a-f]{32}$")


class RemoteRule(StrEnum):
    """Why a remote host or a directory on it is refused (the `rule` of the -32602/-32011 error's data)."""

    NOT_CONFIGURED = "RH-1"  # only hosts the operator configured: their credentials are the operator's
    NOT_THE_OWNERS = "RH-1b"  # a host listing its owners serves no one else
    OUTSIDE_ROOTS = "RH-2"  # a cwd there lies inside one of the host's workspace roots, resolved there
    NOT_REMOTE = "RH-3"  # a worktree, additional directories, a brokered key: the gateway's machine's alone


@dataclass(frozen=True)
class RemoteHost:
    """One `[remote_hosts.NAME]` of the configuration."""

    name: str
    target: SshTarget
    options: SshOptions = field(default_factory=SshOptions)
    python: str = "python3"  # the remote machine's Python 3, which runs the host application
    path: str = DEFAULT_PATH  # the agent's PATH there
    workspace_roots: tuple[str, ...] = ()
    owners: tuple[str, ...] | None = None  # None: every owner
    sandbox: str = "none"  # "bwrap": the agent under bubblewrap there (RH-4)

    @property
    def url(self) -> str:
        port = f":{self.target.port}" if self.target.port != 22 else ""
        return f"ssh://{self.target.user}@{self.target.host}{port}"


@dataclass(frozen=True)
class Refusal:
    rule: RemoteRule
    message: str


def configured(config: ServeConfig) -> dict[str, RemoteHost]:
    """The configuration's `[remote_hosts.NAME]`, their URLs already checked by `load_config`."""
    return {name: RemoteHost(name, SshTarget.parse(h.url), SshOptions(
        str(Path(h.identity_file).expanduser()) if h.identity_file else None,
        str(Path(h.known_hosts).expanduser()) if h.known_hosts else None), h.python, h.path,
        tuple(r.rstrip("/") or "/" for r in h.workspace_roots), tuple(h.owners) if h.owners is not None else None,
        h.sandbox) for name, h in config.remote_hosts.items()}


def choose(hosts: Mapping[str, RemoteHost], owner: str, asked: str) -> RemoteHost | Refusal:
    """The configured host `asked` names (its name, or its exact `ssh://` URL), if this owner may use it (RH-1)."""
    found = hosts.get(asked) or next((h for h in hosts.values() if h.url == asked or h.url + ":22" == asked), None)
    if found is None:
        known = ", ".join(sorted(hosts)) or "none are configured"
        return Refusal(RemoteRule.NOT_CONFIGURED, f"host {asked!r} is not one of this gateway's remote hosts "
                       f"({known}): the operator configures them (`[remote_hosts.NAME]`), with their SSH credentials")
    if found.owners is not None and owner not in found.owners:
        return Refusal(RemoteRule.NOT_THE_OWNERS, f"remote host {found.name!r} is not open to owner {owner!r}: its "
                       "`owners` list does not name it")
    return found


def admitted(hosts: Mapping[str, RemoteHost], owner: str, asked: str, cwd: str) -> RemoteHost | Refusal:
    """The host `asked` names, when this owner may use it (RH-1) and `cwd`, as given, may be a directory there (RH-2):
    what a resume checks, and a launch before it asks the remote machine."""
    host = choose(hosts, owner, asked)
    if isinstance(host, Refusal):
        return host
    return cwd_refusal(host, cwd) or host


def cwd_refusal(host: RemoteHost, cwd: str) -> Refusal | None:
    """Whether `cwd` (as given, or as the remote machine resolved it) may be a session's directory on `host` (RH-2)."""
    if not cwd.startswith("/") or posixpath.normpath(cwd) != cwd.rstrip("/") or "\x00" in cwd or "\n" in cwd:
        return Refusal(RemoteRule.OUTSIDE_ROOTS, f"{cwd!r} is not an absolute, normal path on {host.name} (no '..', "
                       "no '//')")
    if any(_within(cwd, system) for system in SYSTEM_DIRECTORIES):
        return Refusal(RemoteRule.OUTSIDE_ROOTS, f"workspace {cwd} on {host.name} is a system directory")
    if not any(_within(cwd, root) for root in host.workspace_roots):
        shown = ", ".join(host.workspace_roots) or "(none)"
        return Refusal(RemoteRule.OUTSIDE_ROOTS, f"workspace {cwd} is outside remote host {host.name}'s workspace "
                       f"roots ({shown}): choose a directory inside one")
    return None


def holds_remote_state(home: str, cwd: str) -> Refusal | None:
    """A cwd (resolved there) that is, holds or lies in what the gateway keeps in the remote user's home — its hosts'
    spools, the agent homes, the host application — or the user's `.ssh`: an agent there could read other sessions'
    conversations or log in as the user outside any sandbox."""
    for kept in (f"{home}/{STATE}", f"{home}/.ssh"):
        if _within(kept, cwd) or _within(cwd, kept):
            return Refusal(RemoteRule.OUTSIDE_ROOTS, f"workspace {cwd} holds or lies in {kept}, which no session may "
                           "use: choose a project directory that does not hold them")
    return None


def unsupported(worktree: bool, additional_directories: Sequence[str], brokered: bool, host: RemoteHost) \
        -> Refusal | None:
    """What a session on a remote host cannot have (RH-3): each is made or served on the gateway's own machine."""
    if worktree:
        why = "a git worktree is made on the gateway's machine"
    elif additional_directories:
        why = "additional directories are checked and bound on the gateway's machine"
    elif brokered:
        why = "its profile's API keys go through the gateway's key proxy, which the remote machine cannot reach"
    else:
        return None
    return Refusal(RemoteRule.NOT_REMOTE, f"a session on remote host {host.name!r} cannot have this: {why}")


@dataclass(frozen=True)
class RemotePlaces:
    """Where a session's things are on the remote machine, under its user's home."""

    home: str  # the remote user's

    def state(self) -> str:
        return f"{self.home}/{STATE}"

    def host_dir(self, session_id: str, execution_id: str) -> str:
        """An execution's host directory (its socket, spool and log), under its session's: a launch first ends
        whatever an earlier execution of the session left running there (`clear_command`)."""
        return f"{self.state()}/hosts/{session_id}/{execution_id[:14]}"  # x- and 12 hex digits: short

    def agent_home(self, owner_dir: str, profile: str) -> str:
        """The owner's agent home for this profile there: never another owner's (as on the gateway's machine)."""
        return f"{self.state()}/homes/{owner_dir}/{profile}"


def agent_env(host: RemoteHost, agent_home: str, env: Mapping[str, str], local_home: str) -> dict[str, str]:
    """The agent's environment there (RH-4): the launch's, its HOME and XDG directories moved to its agent home on the
    remote machine, PATH the host's; nothing that names a path of the gateway's machine."""
    moved = {name: value.replace(local_home, agent_home, 1) if value.startswith(local_home) else value
             for name, value in env.items()}
    return {**moved, "HOME": agent_home, "PATH": host.path}


# Run there by the host's Python before bubblewrap: each directory to bind opened from `/` one component at a time,
# never through a symbolic link, and handed to bubblewrap as that open directory (`--bind-fd`). A directory swapped
# for a link between the gateway's check and the bind (by an agent of the same remote user) is refused, not followed.
PIN = """import os, sys
i = sys.argv.index("--")
paths, command = sys.argv[1:i], sys.argv[i + 1:]
binds = []
for path in paths:
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
    for part in path.strip("/").split("/"):
        try:
            if part in ("", ".", ".."):
                raise OSError("not a normal path")
            step = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            sys.exit(f"acp-gateway: {path} is not a directory reached without symbolic links ({exc}): not bound")
        os.close(fd)
        fd = step
    os.set_inheritable(fd, True)
    binds += ["--bind-fd", str(fd), path]
at = command.index("--chdir")
os.execvp(command[0], command[:at] + binds + command[at:])
"""


def agent_command(host: RemoteHost, argv: Sequence[str], cwd: str, agent_home: str, home: str) -> list[str]:
    """The agent's command there (RH-4): as it is, or under bubblewrap showing it the system read-only, its cwd and
    its agent home writable (bound as opened without following a link: `PIN`), and nothing else of the remote
    user's home (other sessions' spools and homes, its .ssh)."""
    if host.sandbox != "bwrap":
        return list(argv)
    return [host.python, "-I", "-c", PIN, agent_home, cwd, "--",
            "bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--ro-bind", "/", "/",
            "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", home, "--chdir", cwd, "--", *argv]


def clear_command(session_id: str) -> str:
    """A shell command that ends every host a session's earlier executions left running there (a link that did not
    come back leaves its host waiting for a gateway; its agent dies with it) and removes their directories. The
    pattern's bracket keeps it from matching the command line of the shell that runs it."""
    if not SESSION_ID.match(session_id):
        raise ValueError(f"not a session id: {session_id!r}")
    return (f"pkill -KILL -f '[.]acp-gateway/hosts/[{session_id[0]}]{session_id[1:]}/' ; "
            f"rm -rf -- \"$HOME/{STATE}/hosts/{session_id}\"; true")


def prepare_command(session_id: str, cwd: str, owner_dir: str, profile: str) -> str:
    """One shell command for the remote side: what the session's earlier executions left there ended
    (`clear_command`), the owner's agent home made (0700), then the remote user's home and `cwd` resolved (`cd -P`),
    one a line; exit status 3 when `cwd` is not a directory there."""
    relative = f"{STATE}/homes/{owner_dir}/{profile}"
    return (f"{clear_command(session_id)}; umask 077; cd -P \"$HOME\" && mkdir -p {shlex.quote(relative)} && "
            f"pwd -P && "
            f"{{ cd -P -- {shlex.quote(cwd)} 2>/dev/null || {{ echo 'no such directory' >&2; exit 3; }}; }} && pwd -P")


def _within(path: str, parent: str) -> bool:
    parent = parent.rstrip("/") or "/"
    return path == parent or path.startswith(parent if parent == "/" else parent + "/")
