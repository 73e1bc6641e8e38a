"""What an install held when it was made, and whether it still does: every file's size and SHA-256, every symlink's
target, taken once after the install and compared before each launch.

Two depths, because an install may hold 700 MB (a Python agent's venv) and a launch should not read it all:
- `quick` (each launch): the same set of paths, and each regular file's size and modification time as recorded;
  a file whose stat differs is hashed, and only a changed hash is a change (a `touch` is not). Walking 10 000
  files costs tens of milliseconds.
- `full` (`agents doctor`): every file hashed again.
The install tree is made read-only after the manifest is taken, so an agent cannot rewrite its own code by
accident (Python writes no `.pyc` into it: they were compiled at install and are in the manifest).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    return _sha256(path)


def _walk(root: Path) -> dict[str, os.stat_result]:
    """Every path under `root` (relative, '/'-joined), symlinks not followed."""
    found: dict[str, os.stat_result] = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            found[path.relative_to(root).as_posix()] = path.lstat()
    return found


def take(root: Path) -> dict[str, Any]:
    """The manifest of the tree at `root`: {"files": {path: [size, mtime_ns, sha256]}, "links": {path: target},
    "dirs": [path...]}."""
    files: dict[str, list[Any]] = {}
    links: dict[str, str] = {}
    dirs: list[str] = []
    for relative, st in sorted(_walk(root).items()):
        if stat.S_ISLNK(st.st_mode):
            links[relative] = os.readlink(root / relative)
        elif stat.S_ISDIR(st.st_mode):
            dirs.append(relative)
        elif stat.S_ISREG(st.st_mode):
            files[relative] = [st.st_size, st.st_mtime_ns, _sha256(root / relative)]
        # sockets, fifos, devices: none in a package; not recorded, and found as "added" by verify
    return {"files": files, "links": links, "dirs": dirs}


@dataclass(frozen=True)
class Change:
    path: str
    what: str  # changed | added | removed | retargeted

    def __str__(self) -> str:
        return f"{self.path} ({self.what})"


def verify(root: Path, manifest: dict[str, Any], *, full: bool = False, limit: int = 20) -> list[Change]:
    """How the tree at `root` differs from `manifest` (at most `limit` changes; none: it is as installed)."""
    files: dict[str, list[Any]] = manifest.get("files", {})
    links: dict[str, str] = manifest.get("links", {})
    dirs = set(manifest.get("dirs", []))
    changes: list[Change] = []
    if not root.is_dir():
        return [Change(str(root), "removed")]
    now = _walk(root)
    for relative, st in sorted(now.items()):
        if len(changes) >= limit:
            return changes
        if stat.S_ISLNK(st.st_mode):
            if relative not in links:
                changes.append(Change(relative, "added"))
            elif os.readlink(root / relative) != links[relative]:
                changes.append(Change(relative, "retargeted"))
        elif stat.S_ISDIR(st.st_mode):
            if relative not in dirs:
                changes.append(Change(relative, "added"))
        elif stat.S_ISREG(st.st_mode) and relative in files:
            size, mtime_ns, digest = files[relative]
            if st.st_size != size:
                changes.append(Change(relative, "changed"))
            elif (full or st.st_mtime_ns != mtime_ns) and _sha256(root / relative) != digest:
                changes.append(Change(relative, "changed"))
        else:
            changes.append(Change(relative, "added"))
    for relative in sorted({*files, *links, *dirs} - now.keys()):
        if len(changes) >= limit:
            break
        changes.append(Change(relative, "removed"))
    return changes


def make_read_only(root: Path) -> None:
    """Take write permission off every file and directory of the tree (symlinks have none of their own)."""
    for directory, dirs, files in os.walk(root, topdown=False, followlinks=False):
        for name in files:
            path = Path(directory) / name
            if not path.is_symlink():
                path.chmod(path.lstat().st_mode & ~0o222)
        for name in dirs:
            path = Path(directory) / name
            if not path.is_symlink():
                path.chmod(path.lstat().st_mode & ~0o222)
    root.chmod(root.lstat().st_mode & ~0o222)


def make_writable(root: Path) -> None:
    """Give the owner write permission back (before the tree is removed)."""
    if not root.exists():
        return
    root.chmod(root.lstat().st_mode | 0o200)
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            if not path.is_symlink():
                path.chmod(path.lstat().st_mode | 0o200)
