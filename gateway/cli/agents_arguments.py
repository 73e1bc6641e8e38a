"""`acp-gateway agents`' flags and verbs alone (its row, with its help, is in main.py's table): the command line
lists them without loading the registry's installer for every other verb; `agents.py` runs them."""

from __future__ import annotations

import argparse
from pathlib import Path

REGISTRY_URL = "https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json"


def add_arguments(agents: argparse.ArgumentParser) -> None:
    """`acp-gateway agents`' flags and verbs (its row, with its help, is in main.py's table)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS,
                        help="where installs live (default: the per-user state directory, as serve's)")
    common.add_argument("--agents-dir", action="append", type=Path, default=argparse.SUPPRESS,
                        help="extra profile directory (repeatable)")
    agents.add_argument("--state-dir", type=Path, default=None, help=argparse.SUPPRESS)
    agents.add_argument("--agents-dir", action="append", default=[], type=Path, help="extra profile directory")
    agents.add_argument("--json", action="store_true", default=False, help=argparse.SUPPRESS)
    verbs = agents.add_subparsers(dest="agents_command")
    listing = verbs.add_parser("list", parents=[common], help="the agents there are: profiles and installs "
                               "(version, sign-in, last check)")
    listing.add_argument("--available", action="store_true", help="the registry's agents instead")
    listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    search = verbs.add_parser("search", parents=[common], help="the registry's agents whose id, name or description "
                              "hold every word")
    search.add_argument("words", nargs="*")
    search.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    add = verbs.add_parser("add", parents=[common], help="install an agent from the registry, pinned, and probe it")
    add.add_argument("agent", metavar="ID[@VERSION]")
    add.add_argument("--kind", choices=["npx", "uvx", "binary"], help="which distribution (default: the first of "
                     "npx, uvx, binary the entry has)")
    add.add_argument("--force", action="store_true", help="install again, from the recorded lockfile or hashes")
    add.add_argument("--sha256", metavar="HEX", help="a binary archive's SHA-256, from its publisher")
    add.add_argument("--trust-on-first-use", action="store_true", help="a binary archive with no known SHA-256: "
                     "record the one of what is downloaded now")
    add.add_argument("--archive", type=Path, help="a binary distribution's archive, downloaded already")
    add.add_argument("--no-probe", action="store_true", help="do not start the agent after installing it")
    add.add_argument("--check", action="store_true", help="also run the quick conformance checks")
    update = verbs.add_parser("update", parents=[common], help="install the registry's version of installed agents "
                              "beside the old one (sessions keep theirs until restarted fresh)")
    for verb in (add, update):
        verb.add_argument("--install-network", choices=["outbound", "host"], default=None,
                          help="the confined install's network (default: outbound where slirp4netns is installed: "
                               "the registries, not this machine's loopback services; host for a registry there)")
    update.add_argument("agents", nargs="*", metavar="ID", help="default: every installed agent")
    remove = verbs.add_parser("remove", parents=[common], help="remove an installed agent (one version, or all)")
    remove.add_argument("agent", metavar="ID[@VERSION]")
    doctor = verbs.add_parser("doctor", parents=[common], help="verify an install file by file, start it, show its "
                              "sign-in, run the quick checks")
    doctor.add_argument("agent", metavar="ID")
    doctor.add_argument("--no-check", action="store_true", help="skip the conformance checks")
    matrix = verbs.add_parser("matrix", parents=[common], help="the conformance checks over every installed agent: "
                              "one table, as text, JSON and JUnit")
    matrix.add_argument("--json", dest="json_out", type=Path, metavar="FILE", help="also write it as JSON")
    matrix.add_argument("--junit", type=Path, metavar="FILE", help="also write it as JUnit XML")
    matrix.add_argument("--only", nargs="+", default=[], metavar="CHECK", help="run only these checks")
    matrix.add_argument("--turn-timeout", type=float, default=60.0, metavar="S", help="per turn (default 60)")
    refresh = verbs.add_parser("refresh", parents=[common], help="replace the registry index with a newer one, "
                               "validated first")
    refresh.add_argument("--from", dest="source", default=REGISTRY_URL, metavar="FILE|URL",
                         help=f"a registry.json file or an https URL (default {REGISTRY_URL})")
