"""Which directories a session may run in: a pure rule over resolved paths, with one reason per refusal, and the
one check (`unfit`) that applies it to a directory on disk, for every directory an agent is given.

The agent's file reads and writes are served by the gateway process, so a session's `cwd` decides what an
owner can read through it. A `cwd` must lie inside one of the owner's workspace roots; it must not be a
system pseudo-filesystem; it must neither contain nor lie inside the gateway's own files (the state
directory with every owner's history and tokens, the configuration file).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from .homes import owner_dir_name
from .settings import Settings

SYSTEM_DIRECTORIES = (Path("/proc"), Path("/sys"), Path("/dev"))


class WorkspaceRefusal(StrEnum):
    SYSTEM_DIRECTORY = "system_directory"
    CONTAINS_GATEWAY_FILES = "contains_gateway_files"
    INSIDE_GATEWAY_FILES = "inside_gateway_files"
    OUTSIDE_WORKSPACE_ROOTS = "outside_workspace_roots"


def within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def refusal(cwd: Path, roots: Sequence[Path], protected: Sequence[Path]) -> WorkspaceRefusal | None:
    """Why `cwd` may not be a session's workspace, or None. Every path is already resolved (`resolved`)."""
    if any(within(cwd, system) for system in SYSTEM_DIRECTORIES):
        return WorkspaceRefusal.SYSTEM_DIRECTORY
    for own in protected:
        if within(cwd, own):
            return WorkspaceRefusal.INSIDE_GATEWAY_FILES
        if within(own, cwd):
            return WorkspaceRefusal.CONTAINS_GATEWAY_FILES
    if not any(within(cwd, root) for root in roots):
        return WorkspaceRefusal.OUTSIDE_WORKSPACE_ROOTS
    return None


def resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(path))


def explain(refused: WorkspaceRefusal, cwd: str, roots: Sequence[Path]) -> str:
    """The message a user acts on."""
    if refused is WorkspaceRefusal.SYSTEM_DIRECTORY:
        return f"workspace {cwd} is a system directory (/proc, /sys, /dev): choose a project directory"
    if refused is WorkspaceRefusal.CONTAINS_GATEWAY_FILES:
        shown = ", ".join(str(r) for r in roots) or "(none)"
        # Say what works: a directory inside it only if it lies in a root (/tmp, say, holding a state directory
        # under it but in no root, has no directory inside it that passes).
        where = ("a project directory inside it that does not hold them" if any(within(resolved(cwd), r) for r in roots)
                 else f"a project directory inside your workspace roots ({shown}) that does not hold them")
        return (f"workspace {cwd} contains the gateway's own files (its state directory or configuration): "
                f"an agent there could read every owner's data; choose {where}")
    if refused is WorkspaceRefusal.INSIDE_GATEWAY_FILES:
        return f"workspace {cwd} lies inside the gateway's own files: choose a project directory elsewhere"
    shown = ", ".join(str(r) for r in roots) or "(none)"
    return (f"workspace {cwd} is outside this owner's workspace roots ({shown}): choose a directory inside one, "
            "or add a root with the `workspace_roots` configuration key")


@dataclass(frozen=True)
class Unfit:
    """Why a directory may not be given to an agent: `rule` is None when there is no such directory (any more), else
    the rule it breaks; `message` is what the person reads (for a missing one, after the directory's name)."""

    rule: WorkspaceRefusal | None
    message: str


def unfit(settings: Settings, owner: str, directory: str) -> Unfit | None:
    """The one check of a directory an owner's agent is given — its session's `cwd`, an additional directory, a
    terminal's `cwd`: it exists now, and `refusal` lets it be, by the owner's roots; None when it may be used."""
    if not os.path.isdir(directory):
        return Unfit(None, "it no longer exists")
    roots = settings.roots_of(owner)
    # The owner's own worktrees (docs/worktrees.md) are its workspace too; no other owner's are.
    worktrees = settings.worktrees / owner_dir_name(owner)
    refused = refusal(resolved(directory), (*roots, worktrees), settings.protected_paths)
    return None if refused is None else Unfit(refused, explain(refused, directory, roots))
