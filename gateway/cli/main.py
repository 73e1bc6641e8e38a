"""The `acp-gateway` command line: one subcommand per job (docs/architecture.md: Profiles).

Each subcommand is a row of `SUBCOMMANDS` (at the end): its name, help, arguments and handler. `_parser` builds
argparse's parsers from the rows, `_main` runs the row the command line names: a new subcommand is a new row.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp.replay.arguments import add_arguments as replay_arguments
from agents.errors import ProfileError
from agents.paths import default_state_dir

from .. import __version__
from .agents_arguments import add_arguments as agents_arguments
from .argspec import AddedBy, Argument, add_arguments, arg
from .connect import CONNECT_ARGUMENTS
from .frontend import CONNECTION, INTERRUPTED, VERBS, run_frontend
from .hosts import ARGUMENTS as HOSTS_ARGUMENTS

# What a verb needs is imported when it runs, not here: every verb parses its command line with this module, and
# `serve` must not wait for `check`'s checker, nor `--help` for the gateway (tests/test_import_cost.py).
if TYPE_CHECKING:
    from agents.profiles import AgentProfile


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


# Flags every frontend command takes (frontend.CONNECTION), also accepted before the command's name
# (`acp-gateway --json sessions`): the flag and how many values it takes.
GLOBAL_FLAGS = {flag.names[0]: 0 if flag.options.get("action") == "store_true" else 1 for flag in CONNECTION}


def hoist_global_flags(argv: list[str]) -> list[str]:
    """`acp-gateway --json --url U sessions` as `acp-gateway sessions --json --url U`: argparse takes a
    subcommand's flags only after its name, and people put them on either side."""
    before: list[str] = []
    moved: list[str] = []
    i = 0
    while i < len(argv):
        item = argv[i]
        flag = item.split("=", 1)[0]
        if flag in GLOBAL_FLAGS:
            width = 1 + (GLOBAL_FLAGS[flag] if "=" not in item else 0)
            moved += argv[i:i + width]
            i += width
        elif item.startswith("-"):
            before.append(item)
            i += 1
        else:  # the subcommand
            return [*before, item, *moved, *argv[i + 1:]]
    return argv


@dataclass(frozen=True)
class Subcommand:
    """A row of `SUBCOMMANDS`: `acp-gateway NAME`, its line in the listing (`help`), its own --help's usage and
    description where argparse's would not do, its arguments, and what runs it (given the command after `--`)."""

    name: str
    help: str
    arguments: tuple[Argument, ...]
    run: Callable[[argparse.Namespace, list[str]], int]
    usage: str | None = None
    description: str | None = None


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; of `command`'s alone when the command line begins with its name (nothing
    before it is the top-level parser's to list or refuse, and building them all cost ~7 ms of each start)."""
    parser = argparse.ArgumentParser(prog="acp-gateway", description="ACP session gateway")
    parser.add_argument("--version", action="version", version=f"acp-gateway {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for row in [row for row in SUBCOMMANDS if row.name == command] or SUBCOMMANDS:
        add_arguments(sub.add_parser(row.name, help=row.help, usage=row.usage, description=row.description),
                      row.arguments)
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `acp-gateway agents | head`: the reader left; no traceback for that
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    args_in, command = _split_command(list(sys.argv[1:] if argv is None else argv))
    args_in = hoist_global_flags(args_in)
    parser = _parser(args_in[0] if args_in else None)
    args, unknown = parser.parse_known_args(args_in)
    if unknown:  # argparse would print the top-level usage; the subcommand's own says what it takes
        _subparsers(parser)[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return {row.name: row for row in SUBCOMMANDS}[args.command].run(args, command)
    except ProfileError as exc:
        print(f"acp-gateway: {exc}", file=sys.stderr)
        return 2


def _check(args: argparse.Namespace, command: list[str]) -> int:
    import time

    import orjson

    from acp.check import all_checks
    from acp.check.options import CheckOptions, ClientOffer
    from acp.check.report import Progress, render_table, report_json, report_junit
    from acp.check.run import run_checks

    if args.list:
        for c in all_checks():
            print(f"{c.id:16} {c.tier.value:13} {c.title}")
        return 0
    profile = _chosen_agent("check", args, command)
    if profile is None:
        return 2
    env = local_agent_env(profile, bool(args.agent))
    command, auth_method = command or profile.argv(), args.auth_method or profile.auth_method
    if profile.availability() == "not_found":
        print(f"acp-gateway check: agent command not found: {command[0]!r}", file=sys.stderr)
        return 2
    try:
        prompts = profile.check.with_overrides(args.prompt)
    except ValueError as exc:
        print(f"acp-gateway check: {exc}", file=sys.stderr)
        return 2
    known = {c.id for c in all_checks()}
    unknown = [i for i in args.only if i not in known]
    if unknown:
        print(f"acp-gateway check: unknown check id(s) {', '.join(unknown)}; see --list", file=sys.stderr)
        return 2
    if args.setup_timeout <= 0 or args.turn_timeout <= 0 or args.quiet_timeout <= 0:
        print("acp-gateway check: --setup-timeout, --turn-timeout and --quiet-timeout must be positive",
              file=sys.stderr)
        return 2
    try:
        offer = ClientOffer().with_switches(args.offer)
    except ValueError as exc:
        print(f"acp-gateway check: {exc}", file=sys.stderr)
        return 2
    options = CheckOptions(prompts=prompts, setup_timeout=args.setup_timeout, turn_timeout=args.turn_timeout,
                           quiet_timeout=args.quiet_timeout, offer=offer,
                           auth_method=auth_method, agent_cwd=str(args.agent_cwd) if args.agent_cwd else None,
                           seed=args.seed)
    progress = Progress(len(args.only) if args.only else len(all_checks()), sys.stderr, live=sys.stderr.isatty())

    async def run() -> list[Any]:
        ticker = asyncio.ensure_future(_tick(progress))
        try:
            return await run_checks(command, only=args.only, env=env, options=options, on_start=progress.started,
                                    on_result=progress.ended)
        finally:
            ticker.cancel()
            progress.close()

    started = time.monotonic()
    results = asyncio.run(run())
    seconds = time.monotonic() - started
    if args.junit is not None:
        args.junit.write_bytes(report_junit(command, results, seconds))
    if args.json:
        print(orjson.dumps(report_json(command, results, seconds)).decode())
    else:
        print(render_table(results, seconds))
    return 1 if any(r.fatal for r in results) else 0


async def _tick(progress: Any) -> None:
    """Redraw the live progress line twice a second (it only draws on a terminal)."""
    while True:
        await asyncio.sleep(0.5)
        progress.tick()


def _serve(args: argparse.Namespace, command: list[str]) -> int:
    # The cyclic collector is off until the gateway listens (app.tune_gc_for_serving turns it on): what start-up
    # loads lives as long as the process, and collecting while it loads cost ~25 ms of each start (2-core machine).
    gc.disable()
    try:
        return _serve_config(args)
    finally:
        gc.enable()


def _serve_config(args: argparse.Namespace) -> int:
    from ..app import serve_command
    from ..config import ConfigError, load_config

    overrides = {
        "host": args.host, "port": args.port, "state_dir": args.state_dir, "agents_dir": args.agents_dir,
        "token": args.token or os.environ.get("ACP_GATEWAY_TOKEN") or None, "default_agent": args.default_agent,
        "workspace_roots": args.workspace_roots, "log_format": args.log_format, "store": args.store,
        "node_id": args.node_id, "sandbox": args.sandbox, "allow_unconfined_agents": args.allow_unconfined_agents,
        "record_dir": args.record_dir,
    }
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"acp-gateway serve: {exc}", file=sys.stderr)
        return 2
    return serve_command(config, args.config)


def local_agent_env(profile: AgentProfile, from_profile: bool) -> dict[str, str]:
    """The environment `check` and `run` start their agent in. They run on the caller's own behalf: a command line
    (`-- CMD`) gets the caller's whole environment (an agent author's API key included), as their shell would give
    it; a profile (`--agent ID`) is launched as the gateway would launch it (its allowlist and the profile's own
    variables), so that what works here works under `serve`. Only the server allowlists a caller's environment."""
    return profile.launch_env(os.environ) if from_profile else dict(os.environ)


def _chosen_agent(subcommand: str, args: argparse.Namespace, command: list[str]) -> AgentProfile | None:
    """The agent of `check` and `run`: the profile `--agent ID` names, or the command after `--` as an ad hoc
    profile. None when it is neither or both, or no such profile exists (said on stderr)."""
    if bool(args.agent) == bool(command):
        print(f"acp-gateway {subcommand}: give exactly one of --agent ID or -- CMD ARGS...", file=sys.stderr)
        return None
    from agents.catalog import load_profiles
    from agents.profiles import adhoc_profile

    if command:
        return adhoc_profile(command)
    profiles = load_profiles(args.agents_dir, args.state_dir or default_state_dir())
    if args.agent not in profiles:
        print(f"acp-gateway {subcommand}: no agent profile {args.agent!r}; known: {', '.join(sorted(profiles))}",
              file=sys.stderr)
        return None
    from agents.registry.installs import launch_refusal

    refused = launch_refusal(profiles[args.agent])  # an install changed since it was made is never run
    if refused is not None:
        print(f"acp-gateway {subcommand}: {refused}", file=sys.stderr)
        return None
    return profiles[args.agent]


def _run(args: argparse.Namespace, command: list[str]) -> int:
    from .run import RunOptions, run_command

    profile = _chosen_agent("run", args, command)
    if profile is None:
        return 2
    cwd = os.getcwd() if args.cwd is None else args.cwd  # here: where the command runs
    opts = RunOptions(profile=profile, cwd=cwd, env=local_agent_env(profile, bool(args.agent)),
                      resume_token=args.resume_token, prompt=args.prompt, json=args.json, from_profile=bool(args.agent))
    return run_command(opts)


def _record(args: argparse.Namespace, command: list[str]) -> int:
    from acp.replay.record import record_command

    if not command:
        print("acp-gateway record: give the agent's command after --", file=sys.stderr)
        return 2
    return record_command(command, args.out, args.redact_env, args.portable, args.alias)


def _replay(args: argparse.Namespace, command: list[str]) -> int:
    from acp.replay.agent import run_replay

    return run_replay(args.fixture, args.realtime, args.strict, args.forget_sessions, args.pace)


def _fixtures(args: argparse.Namespace, command: list[str]) -> int:
    from acp.replay.fixtures import diff_command

    return diff_command(args.old, args.new, args.json)


def _fixtures_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="fixtures_command", required=True)
    add_arguments(verbs.add_parser("diff", help="what changed between two recordings of an agent (a corpus directory "
                                   "or one recording each): capabilities, answers, error codes, update kinds, "
                                   "timing classes"), (
        arg("old", type=Path),
        arg("new", type=Path),
        arg("--json", action="store_true", help="the changes as JSON"),
    ))


def _frontend(args: argparse.Namespace, command: list[str]) -> int:
    """A wire-only verb (frontend.py): a client of a running gateway."""
    try:
        return asyncio.run(run_frontend(args))
    except KeyboardInterrupt:
        return INTERRUPTED


def _doctor(args: argparse.Namespace, command: list[str]) -> int:
    from ..config import ConfigError, load_config
    from .doctor import report

    try:
        config = load_config(args.config, {
            "state_dir": args.state_dir, "agents_dir": args.agents_dir, "sandbox": args.sandbox,
            "allow_unconfined_agents": args.allow_unconfined_agents})
    except ConfigError as exc:
        print(f"acp-gateway doctor: {exc}", file=sys.stderr)
        return 2
    return report(config)


def _hosts(args: argparse.Namespace, command: list[str]) -> int:
    from .hosts import run as run_hosts

    return run_hosts(args)


def _connect(args: argparse.Namespace, command: list[str]) -> int:
    from .connect import run as run_connect

    return run_connect(args)


def _agents(args: argparse.Namespace, command: list[str]) -> int:
    from .agents import run as run_agents

    return run_agents(args)


RUN_ARGUMENTS: tuple[Argument, ...] = (
    arg("--agent", help="agent profile id (see `acp-gateway agents`)"),
    arg("--agents-dir", action="append", default=[], type=Path, help="extra profile directory"),
    arg("--state-dir", type=Path, help="where agents added from the registry are (default: serve's)"),
    arg("--cwd", default=None, help="the session's working directory (default: here)"),
    arg("--resume-token", help="ACP session id saved from an earlier run"),
    arg("--prompt", help="send this prompt once the session is ready"),
    arg("--json", action="store_true", help="updates as JSON lines; the last line is a summary"),
)
SERVE_ARGUMENTS: tuple[Argument, ...] = (
    arg("--host", help="bind address (default 127.0.0.1, loopback only)"),
    arg("--port", type=int, help="port (default 8765; 0 picks a free one)"),
    arg("--state-dir", help="where the database and token live (default: per-user state dir)"),
    arg("--agents-dir", action="append", default=[], help="extra profile directory (repeatable)"),
    arg("--token", help="the single owner's token (or ACP_GATEWAY_TOKEN)"),
    arg("--store", metavar="URL", help="a SQLite path (default: STATE_DIR/gateway.db) or a postgresql://user@host/db "
        "URL"),
    arg("--node-id", help="this node's name in a cluster (PostgreSQL store; default: the host name)"),
    arg("--config", type=Path, help="TOML configuration file (every flag has a key)"),
    arg("--default-agent", help="agent used when task.session.start names none"),
    arg("--record-dir", help="record each agent process's ACP traffic under DIR/<session id>/ (secrets redacted): "
        "replayable with `acp-gateway replay`"),
    arg("--log-format", choices=["text", "json"], help="json: one object a line, with session_id, agent and each "
        "restore's plan, attempts and outcome as fields (default text)"),
    arg("--sandbox", choices=["none", "bwrap"], help="confine agents' own processes: bwrap runs each under bubblewrap "
        "(default none; docs/security.md)"),
    arg("--allow-unconfined-agents", action="store_true", default=None,
        help="serve several owners with agents unconfined (each could read the others' work)"),
    arg("--workspace-root", dest="workspace_roots", action="append", default=[],
        help="a directory sessions may run in (repeatable; default: your home directory)"),
)
CHECK_ARGUMENTS: tuple[Argument, ...] = (
    arg("--json", action="store_true", help="print the JSON report (with failing transcripts)"),
    arg("--only", nargs="+", default=[], metavar="ID", help="run only these checks"),
    arg("--list", action="store_true", help="list the checks and exit"),
    arg("--junit", type=Path, metavar="FILE", help="also write the report as JUnit XML (for CI)"),
    arg("--agent", help="check this agent profile (its command and env) instead of -- CMD"),
    arg("--agents-dir", action="append", default=[], type=Path, help="extra profile directory"),
    arg("--state-dir", type=Path, help="where agents added from the registry are (default: serve's)"),
    arg("--prompt", action="append", default=[], metavar="KEY=TEXT",
        help="what a check says to the agent: short, long, longer, permission, tools, mode_change or client_method "
             "(repeatable; over the profile's [check] table; default: plain requests)"),
    arg("--offer", action="append", default=[], metavar="NAME=on|off",
        help="what the checker offers the agent in initialize, for every check that does not judge that very "
             "capability: fs-read, fs-write (on by default), terminal, terminal-auth, elicitation-form, "
             "elicitation-url, boolean-config (off by default); repeatable"),
    arg("--setup-timeout", type=float, default=60.0, metavar="S",
        help="wait this long for initialize, authenticate and session set-up (default 60, as the gateway)"),
    arg("--turn-timeout", type=float, default=120.0, metavar="S", help="wait this long for one prompt turn (default "
        "120)"),
    arg("--quiet-timeout", type=float, default=25.0, metavar="S",
        help="a turn with no update and no answer this long is taken as not running (its model unreachable): the "
             "checks needing a turn are blocked (default 25)"),
    arg("--agent-cwd", type=Path, metavar="DIR", help="run the agent in DIR (default: here)"),
    arg("--seed", help="draw the made-up values the checks send (unknown session ids, words to remember, values not "
        "offered) from this seed: the same every run, so a recorded run replays"),
    arg("--auth-method", metavar="ID", help="authenticate with this advertised method when asked (default: the "
        "profile's auth_method, else one whose env vars are set, else an agent-run one)"),
)
RECORD_ARGUMENTS: tuple[Argument, ...] = (
    arg("--out", required=True, help="the fixture to write (appended to); a directory (or a path ending in /): a new "
        "NNN.jsonl in it for each process"),
    arg("--redact-env", action="append", default=[], metavar="NAME",
        help="write the value of this environment variable (an API key) as [secret]; repeatable"),
    arg("--portable", action="store_true",
        help="write the working directory as <cwd> and $HOME as <home> (a fixture to share)"),
    arg("--alias", action="append", default=[], metavar="NAME=PATH",
        help="write the host path PATH (where the agent is installed, say) as <NAME>; repeatable"),
)
DOCTOR_ARGUMENTS: tuple[Argument, ...] = (
    arg("--config", type=Path, help="the TOML configuration file serve would read"),
    arg("--state-dir", help="as serve's"),
    arg("--agents-dir", action="append", default=[], help="as serve's (repeatable)"),
    arg("--sandbox", choices=["none", "bwrap"], help="as serve's"),
    arg("--allow-unconfined-agents", action="store_true", default=None, help="as serve's"),
)

# The subcommands, in the order `acp-gateway --help` lists them. Each one's help is its line in that listing.
SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand("run", "one-shot headless ACP client: launch, restore or start, prompt, report", RUN_ARGUMENTS, _run,
               usage="acp-gateway run (--agent ID | -- CMD ARGS...) [--agents-dir DIR] [--state-dir DIR] [--cwd DIR] "
                     "[--resume-token TOKEN] [--prompt TEXT] [--json]"),
    Subcommand("serve", "run the gateway: JSON-RPC over WebSocket, web UI, lazy resume", SERVE_ARGUMENTS, _serve),
    Subcommand("check", "run the ACP conformance checks against an agent", CHECK_ARGUMENTS, _check,
               usage="acp-gateway check [--json] [--junit FILE] [--only ID ...] [--prompt KEY=TEXT] "
                     "[--offer NAME=on|off] [--setup-timeout S] [--turn-timeout S] [--quiet-timeout S] "
                     "[--seed S] [--auth-method ID] (--agent ID | -- CMD ARGS...)"),
    Subcommand("record", "a transparent stdio proxy that records ACP traffic to JSONL", RECORD_ARGUMENTS, _record,
               usage="acp-gateway record --out FILE.jsonl -- CMD ARGS..."),
    Subcommand("replay", "an ACP agent that plays recordings back", (AddedBy(replay_arguments),), _replay),
    Subcommand("fixtures", "compare recordings of an agent", (AddedBy(_fixtures_arguments),), _fixtures),
    *(Subcommand(name, verb.help, verb.parser_arguments, _frontend, description=verb.help)
      for name, verb in VERBS.items()),
    Subcommand("doctor", "what serve would make of this configuration and machine: the store, owners, agents' "
               "confinement and whether it can run here, each agent", DOCTOR_ARGUMENTS, _doctor),
    Subcommand("hosts", "the agent hosts of a state directory: each one's session, agent, pids, whether it runs, its "
               "spool, and whether a gateway is attached or they linger", HOSTS_ARGUMENTS, _hosts,
               usage="acp-gateway hosts [--state-dir DIR] [--config FILE] [--json]"),
    Subcommand("connect", "an ACP agent on stdio that is a gateway session: what an editor (Zed, JetBrains, acpx) "
               "runs as its agent; reconnects and resumes across gateway restarts", CONNECT_ARGUMENTS, _connect,
               usage="acp-gateway connect [--url URL] [--token TOKEN] [--state-dir DIR] [--agent ID] "
                     "[--session ID|NAME] [--wait SECONDS]",
               description="An ACP agent on stdio that is a gateway session: give it to an editor as a custom "
               "agent's command (Zed's agent_servers, JetBrains' acp.json, acpx --agent). It speaks to the "
               "gateway's /acp, rides out a restart of the gateway (reconnects, resumes its sessions without "
               "losing an update; a prompt under way gets its answer), and says what it does on stderr. Prefer "
               "ACP_GATEWAY_TOKEN or the state directory's token file to --token: a command line is visible to "
               "every user of the machine. Set-up per editor: docs/acp.md."),
    Subcommand("agents", "agent profiles, and agents from the ACP registry: search, add (pinned), update, remove, "
               "doctor, matrix", (AddedBy(agents_arguments),), _agents,
               description="Without a subcommand: list the agents."),
)


if __name__ == "__main__":
    sys.exit(main())
