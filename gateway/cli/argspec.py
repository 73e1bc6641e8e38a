"""The command line's arguments as data: a subcommand's table row lists them, `add_arguments` puts them on its parser.

Adding a flag is adding an `arg(...)` to a row, not an `add_argument` call somewhere in a builder. This module
imports nothing of the gateway, so the wire-only verbs (frontend.py) build their parsers with it too.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class Argument(Protocol):
    """Something a row lists among its arguments: it adds itself to the parser."""

    def add_to(self, parser: argparse._ActionsContainer) -> None: ...


@dataclass(frozen=True)
class Arg:
    """One `add_argument` call: its names (or a positional's) and its keywords, as argparse takes them."""

    names: tuple[str, ...]
    options: dict[str, Any]

    def add_to(self, parser: argparse._ActionsContainer) -> None:
        parser.add_argument(*self.names, **self.options)


@dataclass(frozen=True)
class OneOf:
    """Arguments of which at most one may be given (argparse's mutually exclusive group)."""

    args: tuple[Arg, ...]

    def add_to(self, parser: argparse._ActionsContainer) -> None:
        group = parser.add_mutually_exclusive_group()
        for one in self.args:
            one.add_to(group)


@dataclass(frozen=True)
class AddedBy:
    """Arguments another function adds: another module's flags, or a parser's own subcommands."""

    add: Callable[[argparse.ArgumentParser], None]

    def add_to(self, parser: argparse._ActionsContainer) -> None:
        assert isinstance(parser, argparse.ArgumentParser), "AddedBy needs the parser itself, not a group"
        self.add(parser)


def arg(*names: str, **options: Any) -> Arg:
    """`arg("--cwd", default=".", help=…)`: the arguments of `parser.add_argument`, kept for later."""
    return Arg(names, options)


def add_arguments(parser: argparse.ArgumentParser, arguments: Sequence[Argument]) -> None:
    """Every argument of a row, in its order (the order --help lists them in)."""
    for argument in arguments:
        argument.add_to(parser)
