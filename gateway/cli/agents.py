"""`acp-gateway agents`: the agent profiles, and agents from the ACP registry — search, add (pinned and verified),
update, remove, doctor, the protocol matrix, and refreshing the registry index. Its flags are
`agents_arguments.py`'s (the command line lists them without this module)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from agents.catalog import load_profiles
from agents.paths import default_state_dir
from agents.profiles import AgentProfile
from agents.registry import credentials, installer, installs
from agents.registry.index import MAX_INDEX_BYTES, SNAPSHOT, RegistryError, RegistryIndex, parse_index

QUICK_CHECKS = ("ACP-INIT-001", "ACP-SESSION-001")


def state_dir_of(args: argparse.Namespace) -> Path:
    """The state directory the verbs work in, absolute: the install sandbox binds its paths, and bubblewrap resolves a
    relative one against its own root, not the caller's directory (`--state-dir ../state` failed `add`)."""
    given = getattr(args, "state_dir", None)
    return (Path(given).expanduser() if given else default_state_dir()).absolute()


def run(args: argparse.Namespace) -> int:
    state_dir = state_dir_of(args)
    command = args.agents_command or "list"
    verbs: dict[str, Callable[[argparse.Namespace, Path], int]] = {
        "list": _list, "search": _search, "add": _add, "update": _update, "remove": _remove, "doctor": _doctor,
        "matrix": _matrix, "refresh": _refresh}
    try:
        return verbs[command](args, state_dir)
    except (RegistryError, installer.InstallError) as exc:
        print(f"acp-gateway agents {command}: {exc}", file=sys.stderr)
        return 2


def load_index(state_dir: Path) -> tuple[RegistryIndex, str]:
    """The refreshed index in the state directory, else the snapshot shipped with the gateway; and which."""
    refreshed = installs.agents_root(state_dir) / "registry.json"
    source = refreshed if refreshed.is_file() else SNAPSHOT
    return parse_index(source.read_bytes(), str(source)), str(source)


def _split(spec: str) -> tuple[str, str | None]:
    agent_id, _, version = spec.partition("@")
    return agent_id, version or None


def _list(args: argparse.Namespace, state_dir: Path) -> int:
    as_json = bool(getattr(args, "json", False))
    if getattr(args, "available", False):
        index, _ = load_index(state_dir)
        return _show_entries(index.agents, state_dir, as_json)
    profiles = load_profiles(args.agents_dir, state_dir)
    rows = [_row(p, state_dir) for p in profiles.values()]
    if as_json:
        print(orjson.dumps(rows).decode())
        return 0
    for row in rows:
        if row["version"]:
            print(f"{row['id']:14} {row['version']:10} {auth_words(row):40} {check_words(row['last_check']):28} "
                  f"{row['command']}")
        else:
            print(f"{row['id']:14} {row['availability']:30} {row['command']}")
    if any(row["version"] for row in rows):
        print("(sign-in: what `agents add`'s probe found, with this environment; a running gateway keeps each "
              "owner's own: gateway.info's auth_state)")
    return 0


def _row(profile: AgentProfile, state_dir: Path) -> dict[str, Any]:
    """An agent as `agents list` shows it."""
    row: dict[str, Any] = {"id": profile.id, "name": profile.name, "version": profile.version,
                           "availability": profile.availability_words(), "command": " ".join(profile.command)}
    row.update(install_facts(profile))
    return row


def install_facts(profile: AgentProfile) -> dict[str, Any]:
    """An installed agent's sign-in as its probe found it (`auth_state`), the variables that sign it in
    (`sign_in_vars`: its profile's, its upstream's, the ones it offered) and its last check (null: never checked);
    nulls for a profile of no install."""
    found = installs.facts(profile)
    if not found:
        return {"auth_state": None, "sign_in_vars": [], "last_check": None}
    names = list(dict.fromkeys([*credentials.required_vars(profile),
                                *credentials.offered_vars(found.get("auth_methods") or [])]))
    return {**found, "sign_in_vars": names}


def auth_words(row: dict[str, Any]) -> str:
    """The probe's sign-in state in words, naming the variables that sign the agent in when it needs one."""
    state = row.get("auth_state")
    if not state:
        return ""
    if state == "not_probed":
        return f"not probed (acp-gateway agents doctor {row['id']})"
    words = "probe: " + str(state).replace("_", " ").replace("sign in", "sign-in")
    if state == "needs_sign_in" and row.get("sign_in_vars"):
        words += f": set {' or '.join(row['sign_in_vars'])}"
    return words


def check_words(check: dict[str, Any] | None) -> str:
    """The last conformance check in words: its verdict, its counts, its day."""
    if not check:
        return "never checked"
    counts = check.get("counts", {})
    return (f"{str(check.get('verdict', '?')).replace('_', ' ')} ({counts.get('pass', 0)} pass, "
            f"{counts.get('fail', 0)} fail) {time.strftime('%Y-%m-%d', time.localtime(check.get('at', 0)))}")


def _show_entries(entries: Sequence[Any], state_dir: Path, as_json: bool) -> int:
    rows = [{"id": e.id, "name": e.name, "version": e.version, "kinds": e.kinds(), "license": e.license,
             "description": e.description, "installed": installs.versions(state_dir, e.id)} for e in entries]
    if as_json:
        print(orjson.dumps(rows).decode())
        return 0
    for r in rows:
        installed = f"  [installed: {', '.join(r['installed'])}]" if r["installed"] else ""
        print(f"{r['id']:16} {r['version']:10} {','.join(r['kinds']) or '-':8} {r['description'][:70]}{installed}")
    return 0


def _search(args: argparse.Namespace, state_dir: Path) -> int:
    index, _ = load_index(state_dir)
    found = index.search(" ".join(args.words))
    if not found:
        print(f"no registry agent matches {' '.join(args.words)!r}", file=sys.stderr)
        return 1
    return _show_entries(found, state_dir, bool(getattr(args, "json", False)))


def _add(args: argparse.Namespace, state_dir: Path) -> int:
    agent_id, version = _split(args.agent)
    index, source = load_index(state_dir)
    entry = index.get(agent_id)
    if entry is None:
        near = [e.id for e in index.search(agent_id.replace("-", " "))][:5]
        print(f"acp-gateway agents add: no agent {agent_id!r} in the registry index ({source})"
              + (f"; did you mean {', '.join(near)}?" if near else "; `acp-gateway agents search WORDS` finds one"),
              file=sys.stderr)
        return 2
    plan = installer.plan(entry, version, args.kind)
    record = installer.install(state_dir, plan, force=args.force, archive=args.archive, sha256=args.sha256,
                               trust_first_use=args.trust_on_first_use, say=print, runner=_runner(args, state_dir))
    print(f"installed {record.id} {record.version} ({record.kind} {record.package}"
          + (f", archive sha256 {record.archive_sha256} ({record.archive_trust})" if record.archive_sha256 else "")
          + f"); new sessions of {record.id} start with it")
    if args.no_probe:
        return 0
    return _probe_and_check(state_dir, record.id, record.version, run_checks=args.check)


def _runner(args: argparse.Namespace, state_dir: Path) -> installer.Runner:
    """The package managers run in a sandbox (their packages' install scripts are their authors' code); where none
    can start here, as this user, said once."""
    from gateway.runtime.confinement import bwrap_trial
    from gateway.runtime.install_sandbox import ConfinedRunner

    why = bwrap_trial()
    if why is None:
        return ConfinedRunner(state_dir, getattr(args, "install_network", None))
    print(f"warning: install scripts run unconfined, as {os.environ.get('USER') or 'this user'}: the sandbox cannot "
          f"start here ({why})", file=sys.stderr)
    return installer.run_here


def _profile(state_dir: Path, agent_id: str, version: str | None = None) -> AgentProfile | None:
    version = version or installs.current_version(state_dir, agent_id)
    return installs.profile_at(state_dir, agent_id, version) if version else None


def _probe_saved(profile: AgentProfile) -> dict[str, Any]:
    """What the agent answers when started (agents.registry.probe), kept in its install's probe.json."""
    from agents.registry.probe import probe

    found = asyncio.run(probe(profile, profile.launch_env(os.environ)))
    installs.write_json(Path(profile.install or "") / "probe.json", found)
    return found


def _checks_saved(profile: AgentProfile, only: list[str], turn_timeout: float) -> list[Any]:
    """The conformance checks `only` (all when empty) run on the agent, their summary kept in check.json."""
    results = asyncio.run(_checks(profile, only, turn_timeout))
    if results:
        _record_check(profile, results)
    return results


def _probe_and_check(state_dir: Path, agent_id: str, version: str, *, run_checks: bool,
                     say_checks: bool = True) -> int:
    profile = _profile(state_dir, agent_id, version)
    assert profile is not None and profile.install
    found = _probe_saved(profile)
    _say_probe(found)
    if found["initialize"]["status"] != "ok":
        return 1
    if run_checks:
        results = _checks_saved(profile, list(QUICK_CHECKS), 60.0)
        from acp.check.report import render_table

        print(render_table(results))
    elif say_checks:
        print(f"quick checks: acp-gateway agents doctor {agent_id}; all checks: acp-gateway check --agent {agent_id}")
    return 0


def _say_probe(found: dict[str, Any]) -> None:
    init = found["initialize"]
    if init["status"] == "ok":
        info = found.get("agent_info") or {}
        methods = ", ".join(f"{m.get('name') or m.get('id')} ({m.get('kind')})" for m in found.get("auth_methods", []))
        print(f"initialize: ok (ACP {found.get('protocol_version')}"
              + (f", {info.get('name')} {info.get('version')}" if info else "") + ")")
        print(f"sign-in methods: {methods or 'none'}")
        print(f"session/new: {found['session_new']['status'].replace('_', ' ')}")
        if found.get("missing_vars"):
            print(f"sign-in: needs {' or '.join(found['missing_vars'])} (not set for it)")
    else:
        print(f"initialize: FAILED: {init.get('message')}")
    for step in found.get("next", []):
        print(f"next: {step}")


async def _checks(profile: AgentProfile, only: list[str], turn_timeout: float) -> list[Any]:
    from acp.check.options import CheckOptions
    from acp.check.run import run_checks

    options = CheckOptions(prompts=profile.check, turn_timeout=turn_timeout, auth_method=profile.auth_method)
    return await run_checks(profile.argv(), only=only, env=profile.launch_env(os.environ), options=options)


def _record_check(profile: AgentProfile, results: Sequence[Any]) -> None:
    from agents.registry.matrix import summary_of

    if profile.install:
        installs.write_json(Path(profile.install) / "check.json", {"at": time.time(), **summary_of(results)})


def _update(args: argparse.Namespace, state_dir: Path) -> int:
    index, source = load_index(state_dir)
    wanted = args.agents or installs.agent_ids(state_dir)
    status = 0
    for agent_id in wanted:
        entry = index.get(agent_id)
        current = installs.current_version(state_dir, agent_id)
        if current is None:
            print(f"{agent_id}: not installed (acp-gateway agents add {agent_id})", file=sys.stderr)
            status = 2
            continue
        if entry is None:
            print(f"{agent_id}: no longer in the registry index ({source}); kept at {current}")
            continue
        record = installs.read_record(installs.install_dir(state_dir, agent_id, current))
        plan = installer.plan(entry, None, record.kind)
        if plan.version == current:
            print(f"{agent_id}: {current} is the registry's version")
            continue
        installer.install(state_dir, plan, say=print, runner=_runner(args, state_dir))
        print(f"{agent_id}: {current} -> {plan.version} (installed beside it; sessions started with {current} keep "
              f"it until restarted fresh; `acp-gateway agents remove {agent_id}@{current}` when none needs it)")
    return status


def _remove(args: argparse.Namespace, state_dir: Path) -> int:
    agent_id, version = _split(args.agent)
    removed = installer.remove(state_dir, agent_id, version)
    if not removed:
        have = installs.versions(state_dir, agent_id)
        print(f"acp-gateway agents remove: {args.agent} is not installed"
              + (f" (installed: {', '.join(have)})" if have else ""), file=sys.stderr)
        return 2
    print(f"removed {agent_id} {', '.join(removed)}; sessions that ran it can be restarted fresh with another")
    return 0


def _doctor(args: argparse.Namespace, state_dir: Path) -> int:
    agent_id, version = _split(args.agent)
    profile = _profile(state_dir, agent_id, version)
    if profile is None:
        print(f"acp-gateway agents doctor: {args.agent} is not installed from the registry "
              f"(installed: {', '.join(installs.agent_ids(state_dir)) or 'none'})", file=sys.stderr)
        return 2
    record = installs.read_record(Path(profile.install or ""))
    print(f"{profile.id} {profile.version}: {record.kind} {record.package}, installed "
          f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(record.installed_at))} in {profile.install}")
    changes = installs.changes(profile, full=True)
    if changes:
        print(f"install: CHANGED since it was installed: {', '.join(str(c) for c in changes[:10])}"
              + (" …" if len(changes) > 10 else ""))
        print(f"next: acp-gateway agents add {profile.id}@{profile.version} --force installs it again; it is not "
              "started until then")
        return 1
    print("install: every file as installed (SHA-256 of each checked)")
    return _probe_and_check(state_dir, profile.id, profile.version or "", run_checks=not args.no_check,
                            say_checks=False)


def _matrix(args: argparse.Namespace, state_dir: Path) -> int:
    from agents.registry.matrix import AgentRow, render_json, render_junit, render_text

    rows = []
    for agent_id in installs.agent_ids(state_dir):
        profile = _profile(state_dir, agent_id)
        if profile is None:
            continue
        record = installs.read_record(Path(profile.install or ""))
        print(f"checking {agent_id} {profile.version}…", file=sys.stderr)
        refusal = installs.launch_refusal(profile)
        started = time.monotonic()
        if refusal is not None:
            found: dict[str, Any] = {"initialize": {"status": "error", "message": refusal}, "auth_state": "unknown"}
            results: list[Any] = []
        else:
            found = _probe_saved(profile)
            results = _checks_saved(profile, args.only, args.turn_timeout) \
                if found["initialize"]["status"] == "ok" else []
        rows.append(AgentRow(agent_id, profile.version or "", record.kind, profile.argv(), found, results,
                             time.monotonic() - started))
    print(render_text(rows), end="")
    if args.json_out is not None:
        args.json_out.write_bytes(orjson.dumps(render_json(rows), option=orjson.OPT_INDENT_2))
    if args.junit is not None:
        args.junit.write_bytes(render_junit(rows))
    return 0


def _refresh(args: argparse.Namespace, state_dir: Path) -> int:
    source: str = args.source
    if source.startswith("https://"):
        with urllib.request.urlopen(source, timeout=60) as answer:  # https only (checked above)
            raw = answer.read(MAX_INDEX_BYTES + 1)
    elif "://" in source:
        print(f"acp-gateway agents refresh: {source}: only a file or an https URL", file=sys.stderr)
        return 2
    else:
        path = Path(source)
        if not path.is_file():
            print(f"acp-gateway agents refresh: {source}: no such file", file=sys.stderr)
            return 2
        with path.open("rb") as f:
            raw = f.read(MAX_INDEX_BYTES + 1)
    index = parse_index(raw, source)  # refused whole, before anything is written
    root = installs.agents_root(state_dir)
    root.mkdir(parents=True, exist_ok=True)
    installs.write_atomic(root / "registry.json", raw)
    print(f"registry index: {len(index.agents)} agents from {source}")
    return 0
