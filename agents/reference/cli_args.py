"""The reference agent's command line: its flags, added group by group, and the `Config` they make.

The flags are added in the order `--help` has always listed them; each group is one small function."""

from __future__ import annotations

import argparse
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from .config import FAULTS, QUIRKS, Config
from .options import STYLES

# `--no-X` flag (its argparse name) -> the Config field it turns off.
NEGATED = {"no_load": "advertise_load", "no_resume": "advertise_resume", "no_list": "advertise_list",
           "no_close": "advertise_close", "no_delete": "advertise_delete", "no_fork": "advertise_fork",
           "no_mcp_http": "mcp_http", "no_mcp_sse": "mcp_sse", "no_additional_directories": "additional_directories"}
# Flags named like their Config field whose value still needs converting (they are converted in `_config`).
CONVERTED = {"state_dir", "auth_terminal_env"}


def _default_state_dir() -> str:
    return os.environ.get("ACP_REFERENCE_STATE_DIR") or str(
        Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "acp-reference-agent"
    )


def _offer_flags(p: argparse.ArgumentParser) -> None:
    """Where sessions are kept, and what the agent advertises and serves."""
    p.add_argument("--state-dir", default=_default_state_dir(), help="where sessions are persisted")
    p.add_argument("--no-load", action="store_true", help="do not advertise or serve session/load")
    p.add_argument("--no-resume", action="store_true", help="do not advertise or serve session/resume")
    p.add_argument("--no-list", action="store_true", help="do not advertise or serve session/list")
    p.add_argument("--no-close", action="store_true", help="do not advertise or serve session/close")
    p.add_argument("--no-delete", action="store_true", help="do not advertise or serve session/delete")
    p.add_argument("--no-fork", action="store_true", help="do not advertise or serve session/fork (unstable)")
    p.add_argument("--protocol-version", type=int, default=1, help="the version answered to initialize")


def _method_fault_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fault", action="append", default=[], metavar="METHOD=KIND",
                   help=f"inject a fault on METHOD; KIND is one of {', '.join(FAULTS)}")
    p.add_argument("--fault-once", action="append", default=[], metavar="METHOD=KIND",
                   help="like --fault, but only the first time across restarts (a marker in --state-dir)")
    p.add_argument("--log", metavar="FILE", help="append every message received as a JSON line")


def _output_fault_flags(p: argparse.ArgumentParser) -> None:
    """What the agent writes besides its messages, and how it replays."""
    p.add_argument("--noise", type=int, default=0, help="non-JSON lines on stdout at start and per prompt")
    p.add_argument("--huge-line", type=int, default=0, metavar="BYTES", help="one huge update per prompt")
    p.add_argument("--fault-reason", metavar="TEXT", help="write TEXT to stderr before an error fault's answer")
    p.add_argument("--stderr-flood", type=int, default=0, metavar="BYTES", help="write this much to stderr at start")
    p.add_argument("--replay-delay", type=float, default=0.0, metavar="SECONDS", help="pause between replayed updates")
    p.add_argument("--late-replay", action="store_true", help="answer session/load first, replay after")


def _turn_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--permission", action="store_true", help="ask permission in every prompt turn")
    p.add_argument("--tool-calls", action="store_true", help="report a tool call in every prompt turn")
    p.add_argument("--stream", type=int, default=0, metavar="N", help="stream N chunks per prompt turn")


def _auth_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--require-auth", action="store_true", help="session methods answer -32000 until authenticate")
    p.add_argument("--auth-env", metavar="VAR", help="advertise an env_var auth method needing VAR")
    p.add_argument("--auth-terminal-env", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable more in the terminal auth method's env (an attack on the client's launch path)")
    p.add_argument("--auth-terminal", action="store_true", help="advertise a terminal auth method (to a client that "
                   "runs them): this program with --login")
    p.add_argument("--login", action="store_true", help="the terminal sign-in: print a device code, then sign in")
    p.add_argument("--auth-fails", action="store_true", help="authenticate always fails (-32000)")
    p.add_argument("--prompt-key", metavar="VAR", help="make sessions without a key, but answer every prompt -32000 "
                   "'Authentication required' unless VAR is set (as claude-agent-acp does), offering no method")


def _process_fault_flags(p: argparse.ArgumentParser) -> None:
    """Faults of the agent's turns and of its process."""
    p.add_argument("--replay-on-resume", action="store_true", help="fault: replay history on session/resume")
    p.add_argument("--bad-stop-reason", action="store_true", help="fault: end turns with stopReason 'done'")
    p.add_argument("--bad-update", action="store_true", help="fault: send a malformed session/update per prompt")
    p.add_argument("--linger", action="store_true", help="fault: keep running after stdin closes")
    p.add_argument("--ignore-cancel", action="store_true", help="ignore session/cancel")
    p.add_argument("--slow-init", type=float, default=0.0, metavar="SECONDS", help="answer initialize this late")
    p.add_argument("--brief-turns", action="store_true", help="end every turn after one update, at once")
    p.add_argument("--grandchild-pidfile", metavar="FILE", help="spawn a long-lived grandchild, write its pid")


def _config_flags(p: argparse.ArgumentParser) -> None:
    """The session configuration offered, and the faults of restoring it."""
    p.add_argument("--config-style", choices=STYLES, default="both",
                   help="what sessions offer: config options and modes (both, the default), config options only, "
                        "modes and the legacy models (legacy), or nothing")
    p.add_argument("--forget-config", action="store_true",
                   help="fault: session/load and session/resume bring back the default configuration")
    p.add_argument("--refuse-value", action="append", default=[], metavar="ID=VALUE",
                   help="fault: refuse to set option ID to VALUE although it is offered (repeatable)")
    p.add_argument("--drop-option-after-restart", action="append", default=[], metavar="ID",
                   help="fault: a session this process did not create (loaded or resumed) is not offered option ID")


def _capability_flags(p: argparse.ArgumentParser) -> None:
    """What the agent takes from the client (MCP servers, directories, media) and how it treats the client's offer."""
    p.add_argument("--no-mcp-http", action="store_true", help="do not advertise or take MCP servers over http")
    p.add_argument("--no-mcp-sse", action="store_true", help="do not advertise or take MCP servers over sse")
    p.add_argument("--no-additional-directories", action="store_true",
                   help="do not advertise or take additionalDirectories")
    p.add_argument("--ignore-client-capabilities", action="store_true",
                   help="fault: call fs, terminal and elicitation methods the client did not offer")
    p.add_argument("--keep-terminals", action="store_true", help="fault: never release a terminal it created")
    p.add_argument("--auth-terminal-always", action="store_true",
                   help="fault: with --auth-terminal, advertise the terminal sign-in to clients that did not offer "
                        "auth.terminal")
    p.add_argument("--media", action="store_true", help="advertise (and take) image and audio prompts")
    p.add_argument("--quirk", action="append", default=[], choices=sorted(QUIRKS), metavar="KIND",
                   help="a protocol quirk (repeatable): " + "; ".join(f"{k}: {v}" for k, v in QUIRKS.items()))
    p.add_argument("--leaky-mcp", action="store_true",
                   help="fault: /mcp also says the env and header values it was given (an agent repeating a secret)")


# In this order `--help` lists them.
GROUPS = (_offer_flags, _method_fault_flags, _output_fault_flags, _turn_flags, _auth_flags, _process_fault_flags,
          _config_flags, _capability_flags)


def parser(description: str | None) -> argparse.ArgumentParser:
    """The agent's argument parser, every group of flags added."""
    p = argparse.ArgumentParser(prog="python -m agents.reference", description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for group in GROUPS:
        group(p)
    return p


def _faults(p: argparse.ArgumentParser, items: list[str], flag: str) -> dict[str, str]:
    faults: dict[str, str] = {}
    for item in items:
        method, sep, kind = item.partition("=")
        if not sep or kind not in FAULTS:
            p.error(f"{flag} {item!r}: expected METHOD=KIND with KIND one of {', '.join(FAULTS)}")
        faults[method] = kind
    return faults


def _refused(p: argparse.ArgumentParser, items: list[str]) -> frozenset[tuple[str, str]]:
    refused = set()
    for item in items:
        option, sep, value = item.partition("=")
        if not sep:
            p.error(f"--refuse-value {item!r}: expected ID=VALUE")
        refused.add((option, value.lower()))
    return frozenset(refused)


def _config(p: argparse.ArgumentParser, ns: argparse.Namespace) -> Config:
    """The Config of parsed flags. A flag named like its field is taken as it is; the others are converted here,
    in the order their mistakes have always been reported."""
    given = vars(ns)
    field_names = {f.name for f in fields(Config)}
    kept: dict[str, Any] = {name: given[name] for name in field_names & given.keys() - CONVERTED}
    kept.update({field_name: not given[flag] for flag, field_name in NEGATED.items()})
    faults = _faults(p, ns.fault, "--fault")
    refused = _refused(p, ns.refuse_value)
    terminal_env = {"REF_LOGIN": "1", **dict(v.split("=", 1) for v in ns.auth_terminal_env)}
    return Config(state_dir=Path(ns.state_dir), faults=faults, refuse_values=refused, auth_terminal_env=terminal_env,
                  faults_once=_faults(p, ns.fault_once, "--fault-once"),
                  drop_after_restart=frozenset(ns.drop_option_after_restart), quirks=frozenset(ns.quirk), **kept)


def parse_args(argv: list[str] | None, description: str | None = None) -> Config:
    """The Config of the command line `argv` (None: the process's); `description` heads `--help`."""
    p = parser(description)
    return _config(p, p.parse_args(argv))
