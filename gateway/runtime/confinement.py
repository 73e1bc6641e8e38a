"""Whether the gateway may serve with the agents' confinement it is configured for: decided at `serve`, before
anything is opened. Several owners whose agents run unconfined under one OS user can read each other's work, so
that is refused unless accepted; a sandbox that cannot start here is a start-up error, never a silent fallback."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping

from agents.profiles import AgentProfile

from ..config import ServeConfig
from .remote_hosts import configured


def owners_of(config: ServeConfig) -> set[str]:
    """The owners the configuration names (`token` is the owner `default`'s)."""
    return {e.owner for e in config.auth.tokens} | ({"default"} if config.token else set())


def unconfined(config: ServeConfig, profiles: Mapping[str, AgentProfile]) -> list[str]:
    """The profiles whose agents would run with no sandbox."""
    return sorted(p.id for p in profiles.values() if (p.sandbox or config.sandbox) == "none")


def cluster_secret_missing(config: ServeConfig) -> str | None:
    """A PostgreSQL store (a cluster) without the secret that seals the commands its nodes forward."""
    if config.store and "://" in config.store and not config.cluster_secret:
        return ("a PostgreSQL store needs `cluster_secret` in the configuration file (32 characters or more, the "
                "same on every node): it seals the commands nodes forward to each other")
    return None


def refusal(config: ServeConfig, profiles: Mapping[str, AgentProfile]) -> str | None:
    """Why `serve` must not start with this confinement, or None."""
    owners = owners_of(config)
    loose = unconfined(config, profiles)
    if len(owners) > 1 and loose and not config.allow_unconfined_agents:
        return (f"{len(owners)} owners are configured and agents run unconfined (sandbox = \"none\"; profiles "
                f"{', '.join(loose)}): each owner's agent could read the others' sessions and workspaces. Set "
                "sandbox = \"bwrap\" (docs/security.md), or accept the risk with --allow-unconfined-agents "
                "(allow_unconfined_agents = true)")
    # One SSH user runs every owner's agents on its machine, whichever entries name it: the owners of all of them
    # share what an unconfined agent of any of them can reach.
    accounts: dict[str, tuple[set[str], list[str]]] = {}
    for name, host in configured(config).items():
        account = host.url  # ssh://user@host[:port], the port said only when not 22
        users, loose_entries = accounts.setdefault(account, (set(), []))
        users |= owners if host.owners is None else set(host.owners)
        if host.sandbox == "none":
            loose_entries.append(name)
    for account, (users, loose_entries) in accounts.items():
        if len(users) > 1 and loose_entries and not config.allow_unconfined_agents:
            return (f"remote host {loose_entries[0]!r} runs agents unconfined (sandbox = \"none\") as {account}, "
                    f"whose agents serve {len(users)} owners: each owner's agent could read the others' work and the "
                    f"hosts' spools there. Set sandbox = \"bwrap\" in [remote_hosts.{loose_entries[0]}], let one "
                    "owner use that SSH user (owners = [...]), or accept the risk with allow_unconfined_agents = "
                    "true (docs/remote-hosts.md)")
    return None


_TRIAL: dict[str, tuple[float, str | None]] = {}  # what the last trial said, and when (monotonic)
TRIAL_FRESH = 60.0


def bwrap_trial() -> str | None:
    """Why a bubblewrap sandbox cannot start on this machine now, or None; asked at most once a minute (a start of a
    sandboxed agent asks before its session exists: a machine that lost user namespaces is a typed error then, not
    a session that fails later)."""
    now = time.monotonic()
    last = _TRIAL.get("bwrap")
    if last is not None and now - last[0] < TRIAL_FRESH:
        return last[1]
    said = run_bwrap_trial()
    _TRIAL["bwrap"] = (now, said)
    return said


def run_bwrap_trial() -> str | None:
    """A sandbox started here now, with the namespaces an agent's gets: why it failed, or None."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    trial = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--unshare-user", "--uid", "10000",
                            "--gid", "10000", "--proc", "/proc", "--dev", "/dev", "--", "true"],
                           capture_output=True, text=True, timeout=30)
    if trial.returncode == 0:
        return None
    return (f"{trial.stderr.strip() or f'status {trial.returncode}'} (bubblewrap needs unprivileged user namespaces: "
            "sysctl kernel.unprivileged_userns_clone=1)")


def sandbox_unavailable(config: ServeConfig, profiles: Iterable[AgentProfile]) -> str | None:
    """Why bubblewrap cannot run here when some agent is to run under it (missing, no user namespaces, no
    slirp4netns for an `outbound` network)."""
    chosen = list(profiles)
    if config.sandbox != "bwrap" and not any(p.sandbox == "bwrap" for p in chosen):
        return None
    said = run_bwrap_trial()
    if said is not None:
        return f"sandbox \"bwrap\" cannot start here: {said}"
    outbound = any(p.network == "outbound" for p in chosen) or (
        len(owners_of(config)) > 1 and any(p.network is None for p in chosen))
    if outbound and (shutil.which("slirp4netns") is None or shutil.which("unshare") is None):
        return ("agents with network \"outbound\" (the default for several owners) need slirp4netns: install it "
                "(Debian: apt-get install slirp4netns), or give their profiles network = \"host\" or \"none\"")
    return None
