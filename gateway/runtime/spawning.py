"""How an agent, and each terminal it opens, is started: its command line under the parent-death signal, nice and
prlimit, or under bubblewrap with its workspace, home and the key relay (docs/security.md: the spawn sites); and how
many of its requests may wait at once. The launcher decides when; this decides how."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import agents as agents_package
from acp.budget import RequestBudget
from agents.profiles import AgentProfile

from ..store import SessionRow
from . import reaper, sandbox, workspace
from .config import SessionConfig
from .key_proxy import SANDBOX_DIRECTORY, SANDBOX_SOCKET, KeyProxy
from .settings import Settings
from .spawn_env import Spawn, args_fd, bwrap_env_args, wrapper_env
from .terminals import TERMINAL_MARKER

SETPRIV = shutil.which("setpriv")
# The tools the gateway runs around an agent, found once, on the gateway's own PATH (ENV-1: never on one an agent set).
BWRAP, PRLIMIT = shutil.which("bwrap"), shutil.which("prlimit")
UNSHARE, SLIRP4NETNS = shutil.which("unshare"), shutil.which("slirp4netns")
NICE = shutil.which("nice")


def sandbox_reads(profile: AgentProfile, program: str, relayed: bool = False) -> list[str]:
    """What an agent's sandbox shows it read-only besides the system: its command's prefix (a private Node, a
    venv), the gateway's own Python and code (the shipped Python agents run on them, and the key relay: `relayed`),
    and its profile's list."""
    real = Path(os.path.realpath(program))
    reads = [str(real.parent.parent)]
    if relayed or real == Path(os.path.realpath(sys.executable)) or program == sys.executable:
        reads += [sys.prefix, sys.base_prefix, str(Path(agents_package.__file__).resolve().parent.parent)]
    return [*dict.fromkeys([*reads, *profile.sandbox_read])]


def key_relayed(command: list[str], socket_path: str, urls: tuple[str, ...]) -> list[str]:
    """`command` behind the key relay (`gateway.sandboxed.key_relay`): a loopback port to the key proxy's
    `socket_path`, the base-URL variables `urls` (`VAR=PATH`) set to it."""
    return [sys.executable, "-I", "-m", "gateway.sandboxed.key_relay", "--socket", socket_path,
            *(arg for url in urls for arg in ("--url", url)), "--", *command]


def agent_argv(argv: list[str], env: Mapping[str, str], die_with_gateway: bool) -> list[str]:
    """The agent's command, under `setpriv --pdeathsig KILL` where wanted and installed: the kernel then kills
    the agent when the gateway's process dies, however it dies (measured: ~1 ms per spawn). A command that
    cannot be found is left bare, so spawning it fails as itself rather than as setpriv's exit."""
    if not (die_with_gateway and SETPRIV and argv):
        return argv
    command = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    return [SETPRIV, "--pdeathsig", "KILL", "--", command, *argv[1:]] if command else argv


@dataclass(frozen=True)
class SpawnSite:
    """Where and as whom a session's agent runs, the same for the agent and each of its terminals: its profile, its
    session, its configuration (the additional directories), its launch environment (the operator's: its PATH finds
    the program) and its owner's home."""

    profile: AgentProfile
    row: SessionRow
    config: SessionConfig
    env: Mapping[str, str]
    home: Path


class AgentSpawner:
    """The spawn site of a session's agent and its terminals (ENV-1…5, `spawn_env.py`)."""

    def __init__(self, settings: Settings, keys: KeyProxy,
                 git_binds: Callable[[str], tuple[list[str], list[str], list[str]]] | None = None) -> None:
        self.settings = settings
        self.keys = keys
        # A worktree session's: what its sandbox shows of its repository (`session_git.SessionGit.binds`)
        self.git_binds = git_binds or (lambda session_id: ([], [], []))
        self.request_budgets: dict[str, RequestBudget] = {}  # each owner's, shared by its sessions' agents

    def confined(self, profile: AgentProfile) -> bool:
        return (profile.sandbox or self.settings.sandbox) == "bwrap"

    def request_budget(self, row: SessionRow) -> RequestBudget:
        """How many of this session's agent's requests may wait for answers at once, within its owner's."""
        settings = self.settings
        owner = self.request_budgets.get(row.owner)
        if owner is None:
            owner = self.request_budgets[row.owner] = RequestBudget(
                settings.max_agent_requests_per_owner, settings.max_agent_requests_per_owner_bytes,
                f"owner {row.owner}'s agents", "max_agent_requests_per_owner",
                refusal_rate=4 * settings.agent_refusal_rate)
        return RequestBudget(settings.max_agent_requests_per_session, settings.max_agent_requests_per_session_bytes,
                             f"the agent of session {row.id}", "max_agent_requests_per_session", owner,
                             refusal_rate=settings.agent_refusal_rate)

    def spawn(self, site: SpawnSite, argv: list[str], cwd: str, program_env: Mapping[str, str]) -> Spawn:
        """How to start `argv` in `cwd` with `program_env` as the session's agent runs (`site`): the agent itself,
        and each of its terminals. Confined, the gateway starts only wrappers, with a fixed environment, in /
        (ENV-1); the program gets `program_env` and `cwd` inside the sandbox (ENV-2)."""
        profile, row, env = site.profile, site.row, site.env
        limits = sandbox.Limits(**profile.limits.model_dump())
        niceness = self.settings.agent_niceness
        lowered = [NICE, "-n", str(niceness)] if niceness and NICE else []  # nice execs: the same process
        found = shutil.which(argv[0], path=env.get("PATH", os.defpath)) if argv else None
        urls = self.keys.urls(row.id)
        if not self.confined(profile):
            if found is None:
                # Not there: started bare, it fails as itself ("agent command not found"), not as a wrapper's exit.
                return Spawn(list(argv), dict(program_env), cwd)
            bare = agent_argv(key_relayed([found, *argv[1:]], str(self.keys.socket_path), urls) if urls else argv,
                              env, self.settings.agents_die_with_gateway)
            wrapped = [PRLIMIT, *limits.prlimit_args(), "--", *bare] if limits.prlimit_args() and PRLIMIT else bare
            return Spawn([*lowered, *wrapped], dict(program_env), cwd)
        program = found or argv[0]
        directories = [d for d in site.config.additional_directories
                       if workspace.unfit(self.settings, row.owner, d) is None]
        protected = [str(p) for p in self.settings.protected_paths]
        hosts = str(self.settings.state_dir / "hosts")
        network = profile.network or self.settings.network
        git_read, git_write, git_masked = self.git_binds(row.id)
        # A terminal may run in another allowed directory
        writable = [*dict.fromkeys([row.cwd, *directories, cwd, *git_write])]
        command = [program, *argv[1:]]
        plan = sandbox.SandboxPlan(
            command=key_relayed(command, SANDBOX_SOCKET, urls) if urls else command, cwd=cwd, writable=writable,
            home=str(site.home),
            # Never anything of the agent hosts' directory (their sockets, the spools holding every agent's words):
            # a profile's `sandbox_read` inside it is dropped, one that holds it finds it masked.
            readable=[r for r in [*sandbox_reads(profile, program, relayed=bool(urls)), *git_read]
                      if not sandbox.within(r, hosts)],
            system=sandbox.system_directories(),
            masked_dirs=[*(p for p in protected if os.path.isdir(p)), hosts, *git_masked],
            # The stand-ins' secret too, wherever a workspace lets the state directory show: with it, and an
            # execution's id, another agent's stand-in could be made.
            masked_files=[*(p for p in protected if not os.path.isdir(p)), self.keys.secret_file()],
            network=network, uid=sandbox.owner_uid(row.owner),
            sockets=[(str(self.keys.socket_path.parent), SANDBOX_DIRECTORY)] if urls else [])
        fd = args_fd(bwrap_env_args(program_env))
        wrapped = sandbox.bwrap_argv(plan, BWRAP or "bwrap", fd)
        if network == "outbound":  # in a network namespace of its own, out through slirp4netns only
            # -I: the gateway's Python isolated (no working directory or PYTHON* variable on its import path).
            wrapped = [sys.executable, "-I", "-m", "gateway.runtime.outbound", "--unshare", UNSHARE or "unshare",
                       "--slirp4netns", SLIRP4NETNS or "slirp4netns", "--pass-fd", str(fd), "--", *wrapped]
        if limits.prlimit_args() and PRLIMIT:
            wrapped = [PRLIMIT, *limits.prlimit_args(), "--", *wrapped]
        markers = {name: program_env[name] for name in (reaper.MARKER, TERMINAL_MARKER) if name in program_env}
        return Spawn([*lowered, *wrapped], wrapper_env(markers), "/", (fd,))
