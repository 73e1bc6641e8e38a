"""`acp-gateway doctor`: what `serve` would make of this configuration and this machine, before serving — the
store, the owners, how agents would be confined (and whether that can run here), and whether each agent is there.
Exit status 0 when `serve` would start, 1 when it would refuse (the line saying why is marked)."""

from __future__ import annotations

import asyncio
import hmac
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from agents.catalog import load_profiles
from agents.paths import default_state_dir

from .. import __version__
from ..config import ServeConfig
from ..runtime import confinement
from ..store.command_seal import CLOCK_SLACK, key_check
from . import hosts


def database_facts(url: str, secret: str | None) -> tuple[list[str], list[str]]:
    """What the cluster's database says of this node's configuration: (facts, problems). PUBLIC's CONNECT is a
    warning (any role of the server may then LISTEN; notices are sealed, but a role per node is the least to grant);
    a clock off by more than `CLOCK_SLACK`, and a key check that is not this secret's, are what `serve` refuses."""
    import asyncpg

    async def ask() -> tuple[list[str], list[str]]:
        facts: list[str] = []
        problems: list[str] = []
        try:
            conn = await asyncpg.connect(url, timeout=10)
        except (OSError, asyncpg.PostgresError) as exc:
            return [], [f"cannot connect to the store's database: {exc}"]
        try:
            if await conn.fetchval("SELECT has_database_privilege('public', current_database(), 'CONNECT')"):
                facts.append("WARNING: every role of the server may connect to this database (PUBLIC has CONNECT): "
                             "REVOKE CONNECT ON DATABASE … FROM PUBLIC, and give each node a role of its own "
                             "(docs/deployment.md)")
            off = time.time() - float(await conn.fetchval("SELECT extract(epoch from clock_timestamp())"))
            facts.append(f"clock: {abs(off):.2f} s {'ahead of' if off > 0 else 'behind'} the database's")
            if abs(off) > CLOCK_SLACK:
                problems.append(f"this machine's clock is {abs(off):.1f} s off the database's (at most {CLOCK_SLACK:g} "
                                "s): set it right (NTP)")
            table = await conn.fetchval("SELECT to_regclass('cluster_key') IS NOT NULL")
            kept = await conn.fetchval("SELECT check_value FROM cluster_key WHERE id = 1") if table else None
            if kept is not None and secret is not None and not hmac.compare_digest(kept, key_check(secret.encode())):
                facts.append("cluster_secret: not the one the cluster's nodes last used (serve refuses while any of "
                             "them runs)")
            elif kept is not None:
                facts.append("cluster_secret: the cluster's")
        finally:
            await conn.close()
        return facts, problems

    return asyncio.run(ask())


def remote_host_facts(config: ServeConfig) -> list[str]:
    """A line per remote host (docs/remote-hosts.md): reached over ssh now with the operator's credentials, its
    Python, and bubblewrap where its sessions are sandboxed. Never a problem for `serve` (a host may be down today)."""
    from ..agenthost.client import HostError
    from ..agenthost.ssh import run_remote
    from ..runtime.remote_hosts import RemoteHost, configured

    async def ask(host: RemoteHost) -> str:
        probe = (f"{shlex.quote(host.python)} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null "
                 "|| echo none; command -v bwrap >/dev/null && echo bwrap || echo no-bwrap")
        try:
            said = (await run_remote(host.target, host.options, probe, timeout=20)).decode().split()
        except HostError as exc:
            return f"remote host {host.name} ({host.url}): NOT REACHED: {exc} (its sessions cannot start until it is)"
        version = said[0] if said else "none"
        words = [f"remote host {host.name} ({host.url}): reached"]
        major_minor = tuple(int(p) for p in version.split(".")) if version != "none" else (0, 0)
        words.append(f"python {version}" if major_minor >= (3, 11) else
                     f"WARNING: no Python 3.11 or later as {host.python!r} there (the agent host needs it)")
        if host.sandbox == "bwrap":
            words.append("bwrap found" if "bwrap" in said else "WARNING: no bwrap there (sandbox = \"bwrap\")")
        return ", ".join(words)

    async def ask_all() -> list[str]:
        return list(await asyncio.gather(*(ask(host) for host in configured(config).values())))

    return asyncio.run(ask_all()) if config.remote_hosts else []


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
    say(hosts.summary(config))
    kept_token = "default, its token in " + str(state_dir / "token") if (state_dir / "token").exists() \
        else "default, with a token generated at start"
    say(f"owners: {len(owners) or 1} ({', '.join(sorted(owners)) or kept_token})")
    say(f"sandbox: {config.sandbox}; tools: " + ", ".join(
        f"{tool} {'found' if shutil.which(tool) else 'missing'}" for tool in ("bwrap", "slirp4netns", "prlimit")))
    loose = confinement.unconfined(config, profiles)
    if len(owners) > 1 and loose:
        say("agents unconfined for several owners: " + ("accepted (allow_unconfined_agents): each owner's agent can "
            "read the others' work" if config.allow_unconfined_agents else "REFUSED at serve"))
    serving = hosts.gateway_pid(state_dir)
    problems = [p for p in (confinement.refusal(config, profiles),
                            confinement.sandbox_unavailable(config, profiles.values()),
                            confinement.cluster_secret_missing(config),
                            None if serving is None else f"a gateway (pid {serving}) already serves this state "
                            "directory: stop it first (SIGTERM leaves its agents running in their hosts for the next "
                            "one) or give serve another --state-dir") if p is not None]
    if postgres:
        facts, found = database_facts(store, config.cluster_secret)
        for fact in facts:
            say(fact)
        problems += found
    if not problems and (config.sandbox == "bwrap" or any(p.sandbox == "bwrap" for p in profiles.values())):
        say("sandbox bwrap: works here (a trial sandbox started)")
    for fact in remote_host_facts(config):
        say(fact)
    for profile in profiles.values():
        if profile.host is not None:  # its command is looked for on that machine, at each launch
            say(f"agent {profile.id}: runs on remote host {profile.host}"
                + ("" if profile.host in config.remote_hosts else " — NOT a configured remote host: its sessions "
                   "cannot start"))
            continue
        said = profile.availability_words()
        confined = profile.sandbox or config.sandbox
        say(f"agent {profile.id}: {said}; sandbox {confined}"
            + (f", network {profile.network or ('outbound' if len(owners) > 1 else 'host')}"
               if confined == "bwrap" else ""))
    for problem in problems:
        say(f"PROBLEM: {problem}")
    say("serve would start" if not problems else "serve would refuse to start")
    return 1 if problems else 0
