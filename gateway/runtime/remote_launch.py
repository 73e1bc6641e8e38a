"""A launch on a remote host (docs/remote-hosts.md): the directory there checked as the remote machine resolves it
(RH-2), and the agent's command, environment and terminals made for that side (RH-4). The rules are
`remote_hosts.py`'s; this runs the one ssh call they need."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..agenthost.client import HostError
from ..agenthost.ssh import run_remote
from . import remote_hosts
from .homes import owner_dir_name
from .remote_hosts import RemoteHost, RemotePlaces
from .spawn_env import Spawn


class RemoteRefused(Exception):
    """The session cannot run on its remote host now: the message says which session, which host, and why."""


@dataclass(frozen=True)
class RemoteSite:
    """Where a session's agent runs on its remote host."""

    host: RemoteHost
    home: str  # the remote user's
    cwd: str  # resolved there
    agent_home: str  # the owner's agent home there

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, local_home: str, local_state: str) -> Spawn:
        """A program of the agent's (the agent, a terminal) as the remote side runs it (RH-4): the running Python
        and the gateway's state directory named as the remote machine has them."""
        there = [self.host.python if part == sys.executable else part.replace(local_state, RemotePlaces(
            self.home).state()) for part in argv]
        command = remote_hosts.agent_command(self.host, there, cwd, self.agent_home, self.home)
        return Spawn(command, remote_hosts.agent_env(self.host, self.agent_home, env, local_home), cwd)


async def prepare(hosts: Mapping[str, RemoteHost], session_id: str, owner: str, host_name: str, cwd: str,
                  profile: str) -> RemoteSite:
    """The session's remote host, its directory there resolved and checked, its agent home there made."""
    host = remote_hosts.admitted(hosts, owner, host_name, cwd)
    if isinstance(host, remote_hosts.Refusal):
        raise RemoteRefused(f"session {session_id}: {host.message}")
    try:
        said = await run_remote(host.target, host.options,
                                remote_hosts.prepare_command(session_id, cwd, owner_dir_name(owner), profile))
    except HostError as exc:
        if "no such directory" in str(exc):
            raise RemoteRefused(f"session {session_id}: its workspace {cwd} does not exist on remote host "
                                f"{host.name}: make it there, or start a new session") from None
        raise RemoteRefused(f"session {session_id}: remote host {host.name} cannot be reached: {exc}") from None
    lines = said.decode(errors="replace").splitlines()
    if len(lines) != 2:
        raise RemoteRefused(f"session {session_id}: remote host {host.name} answered what the gateway did not ask: "
                            f"{said[:200]!r}")
    home, real = lines
    refused = remote_hosts.cwd_refusal(host, real)  # a link there that leads out of the roots
    if refused is not None:
        raise RemoteRefused(f"session {session_id}: {cwd} resolves to {real} there: {refused.message}")
    refused = remote_hosts.holds_remote_state(home, real)
    if refused is not None:
        raise RemoteRefused(f"session {session_id}: on remote host {host.name}, {refused.message}")
    if host.sandbox == "bwrap" and real != cwd.rstrip("/"):  # bound as opened, never through a link (`PIN`)
        raise RemoteRefused(f"session {session_id}: {cwd} on remote host {host.name} goes through a symbolic link "
                            f"(it is {real}): a sandboxed session's directory is named without links; start it "
                            f"with cwd {real}")
    return RemoteSite(host, home, real, RemotePlaces(home).agent_home(owner_dir_name(owner), profile))


def site_again(hosts: Mapping[str, RemoteHost], owner: str, host_name: str, cwd: str, profile: str,
               home: str | None) -> RemoteSite | None:
    """The site of a session whose remote host kept its agent running while the gateway restarted (its remote home
    as its host record keeps it): no ssh call. None when that host is no longer configured."""
    host = remote_hosts.choose(hosts, owner, host_name)
    if isinstance(host, remote_hosts.Refusal) or home is None:
        return None
    return RemoteSite(host, home, cwd, RemotePlaces(home).agent_home(owner_dir_name(owner), profile))
