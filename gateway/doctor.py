"""`acp-gateway doctor`: what `serve` would make of this configuration and this machine, before serving — the
store, the owners, how agents would be confined (and whether that can run here), and whether each agent is there.
Exit status 0 when `serve` would start, 1 when it would refuse (the line saying why is marked)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from agents.profiles import default_state_dir, load_profiles

from . import __version__, confinement
from .config import ServeConfig


def report(config: ServeConfig, say: Callable[[str], None] = print) -> int:
    state_dir = Path(config.state_dir).expanduser() if config.state_dir else default_state_dir()
    profiles = load_profiles([Path(d) for d in config.agents_dir], state_dir)
    owners = confinement.owners_of(config)
    store = config.store or str(state_dir / "gateway.db")
    say(f"acp-gateway {__version__}")
    say(f"state directory: {state_dir}")
    postgres = "://" in store
    say(f"store: {'postgresql' if postgres else 'sqlite'}" + (" (cluster_secret set)" if config.cluster_secret else "")
        + ("" if not postgres else "; journal commits wait for the WAL flush" if config.journal_synchronous_commit
           else "; journal commits do not wait for the WAL flush (journal_synchronous_commit = false: a crash of "
                "the PostgreSQL server may lose the last ~0.6 s of events)"))
    say(f"owners: {len(owners) or 1} ({', '.join(sorted(owners)) or 'default, with a token generated at start'})")
    say(f"sandbox: {config.sandbox}; tools: " + ", ".join(
        f"{tool} {'found' if shutil.which(tool) else 'missing'}" for tool in ("bwrap", "slirp4netns", "prlimit")))
    loose = confinement.unconfined(config, profiles)
    if len(owners) > 1 and loose:
        say("agents unconfined for several owners: " + ("accepted (allow_unconfined_agents): each owner's agent can "
            "read the others' work" if config.allow_unconfined_agents else "REFUSED at serve"))
    problems = [p for p in (confinement.refusal(config, profiles),
                            confinement.sandbox_unavailable(config, profiles.values()),
                            confinement.cluster_secret_missing(config)) if p is not None]
    if not problems and (config.sandbox == "bwrap" or any(p.sandbox == "bwrap" for p in profiles.values())):
        say("sandbox bwrap: works here (a trial sandbox started)")
    for profile in profiles.values():
        said = profile.availability_words()
        confined = profile.sandbox or config.sandbox
        say(f"agent {profile.id}: {said}; sandbox {confined}"
            + (f", network {profile.network or ('outbound' if len(owners) > 1 else 'host')}"
               if confined == "bwrap" else ""))
    for problem in problems:
        say(f"PROBLEM: {problem}")
    say("serve would start" if not problems else "serve would refuse to start")
    return 1 if problems else 0
