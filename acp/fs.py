"""The client's file methods (`fs/read_text_file`, `fs/write_text_file`), confined to the session's directories.

The session's directories are pinned when the session starts (`PinnedRoot`: the resolved path and an open
directory descriptor), never resolved again: a directory swapped for a symlink to another owner's afterwards
moves nothing. Confinement is decided on the fully resolved path (symlinks followed) against the pinned paths, so
`..`, absolute paths elsewhere and symlinks pointing out are all refused the same way; the open then walks from
the pinned descriptor one component at a time, never following a link (a rename race after the check is refused,
not followed). A regular file with more than one hard link is refused: a hard link has no path to resolve, and
one in the workspace can name any file of the gateway's user (its configuration, its database).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError

MAX_READ_BYTES = 64 * 1024 * 1024


# Never served, whatever the root: their "files" are live views of processes and devices.
SYSTEM_DIRECTORIES = ("/proc", "/sys", "/dev")


@dataclass(frozen=True)
class PinnedRoot:
    """A session directory as it was when the session started: its resolved path, and a descriptor of it."""

    path: Path
    fd: int

    @classmethod
    def open_without_links(cls, directory: str) -> PinnedRoot:
        """`directory` (absolute) opened from `/` one component at a time, never through a symbolic link: a link
        anywhere on its way is refused (OSError), not followed — the directory is exactly the one its path names
        now, as a sandbox that binds it by such a walk sees it."""
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in directory.strip("/").split("/"):
                if part in ("", ".", ".."):
                    raise OSError(f"{directory!r} is not a normal absolute path")
                step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = step
        except BaseException:
            os.close(fd)
            raise
        return cls(Path(directory), fd)

    @classmethod
    def open(cls, directory: str | os.PathLike[str]) -> PinnedRoot:
        real = os.path.realpath(directory)
        return cls(Path(real), os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))

    def close(self) -> None:
        os.close(self.fd)


Root = str | os.PathLike[str] | PinnedRoot


def _real(root: Root) -> Path:
    return root.path if isinstance(root, PinnedRoot) else Path(os.path.realpath(root))


def confine(root: Root, path: str, never_serve: Sequence[str] = ()) -> Path:
    """Resolve `path` (absolute, or relative to `root`) and refuse it unless it lies inside `root`, and outside
    the system directories and `never_serve`."""
    return confine_within((root,), path, never_serve)[1]


def shown(path: str, roots: Sequence[Root]) -> str:
    """How an error names `path` to the agent: relative to the session directory it lies in (the host's layout is
    not the agent's business, and a sandboxed agent's paths are not the host's), else exactly as the agent gave
    it. Never a resolved path: where a link leads is not told either."""
    if not os.path.isabs(path):
        return path
    for root in roots:
        real = _real(root)
        candidate = Path(os.path.normpath(path))
        if candidate == real or real in candidate.parents:
            return str(candidate.relative_to(real)) if candidate != real else "."
    return path


def confine_within(roots: Sequence[Root], path: str, never_serve: Sequence[str] = ()) -> tuple[Root, Path]:
    """(the root it lies in, the resolved path) for `path`, absolute or relative to the first root (the session's
    cwd; the others are its additional directories); refused unless it lies inside one of `roots`, and outside the
    system directories and `never_serve`."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise RpcError(INVALID_PARAMS, "path must be a non-empty string", {"path": path})
    real_roots = [_real(r) for r in roots]
    candidate = Path(path) if os.path.isabs(path) else real_roots[0] / path
    resolved = Path(os.path.realpath(candidate))
    inside = next((roots[i] for i, r in enumerate(real_roots) if resolved == r or r in resolved.parents), None)
    if inside is None:
        raise RpcError(INVALID_PARAMS, f"access outside the session directory is refused: {shown(path, roots)}",
                       {"path": shown(path, roots)})
    for denied in (*SYSTEM_DIRECTORIES, *never_serve):
        real = Path(os.path.realpath(denied))
        if resolved == real or real in resolved.parents:
            raise RpcError(INVALID_PARAMS, f"access to {shown(path, roots)} is refused: it is not the session's to "
                           "read or write", {"path": shown(path, roots)})
    return inside, resolved


def select_lines(text: str, line: int | None, limit: int | None) -> str:
    """Apply ACP's 1-based `line` and `limit` to a file's text, keeping line endings."""
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = len(lines) if limit is None else start + limit
    return "".join(lines[start:end])


def open_beneath(root: Root, target: Path, flags: int, *, create_dirs: bool = False) -> int:
    """Open `target` (already confined) walking from `root` (its pinned descriptor) one component at a time, never
    following a symlink: a directory swapped for a link after `confine` checked the path is refused, not followed."""
    parts = target.relative_to(_real(root)).parts
    if not parts:
        raise RpcError(INVALID_PARAMS, "the session directory itself is not a file", {"path": "."})
    fd = (os.dup(root.fd) if isinstance(root, PinnedRoot)
          else os.open(os.path.realpath(root), os.O_RDONLY | os.O_DIRECTORY))
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create_dirs:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return os.open(parts[-1], flags | os.O_NOFOLLOW, 0o644, dir_fd=fd)
    finally:
        os.close(fd)


def open_regular(root: Root, target: Path, flags: int, path: str, *, create_dirs: bool = False) -> int:
    """`open_beneath`, for regular files only. The open never blocks (O_NONBLOCK: a FIFO with no writer would
    hold a worker thread forever) and whatever is not a regular file — FIFO, device, socket — or is a file with
    more than one hard link is refused before a byte is read or written."""
    fd = open_beneath(root, target, flags | os.O_NONBLOCK, create_dirs=create_dirs)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise RpcError(INVALID_PARAMS, f"not a regular file: {path}", {"path": path})
    if info.st_nlink > 1:
        os.close(fd)
        raise RpcError(INVALID_PARAMS, f"refused: {path} has {info.st_nlink} hard links (rule hard_link: a hard "
                       "link may name a file outside the session's directories; copy the file instead)",
                       {"path": path, "rule": "hard_link"})
    os.set_blocking(fd, True)
    return fd


def read_text_file(root: Root, path: str, line: int | None = None, limit: int | None = None,
                   never_serve: Sequence[str] = (), extra_roots: Sequence[Root] = (),
                   max_bytes: int = MAX_READ_BYTES) -> str:
    inside, target = confine_within((root, *extra_roots), path, never_serve)
    path = shown(path, (root, *extra_roots))
    try:
        fd = open_regular(inside, target, os.O_RDONLY, path)
    except FileNotFoundError as exc:
        raise RpcError(RESOURCE_NOT_FOUND, f"file not found: {path}", {"path": path}) from exc
    except OSError as exc:
        raise RpcError(INVALID_PARAMS, f"cannot read {path}: {exc.strerror}", {"path": path}) from exc
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise RpcError(INVALID_PARAMS, f"file too large to read as text: {path}", {"path": path})
    return select_lines(data.decode("utf-8", "replace"), line, limit)


def write_text_file(root: Root, path: str, content: str, never_serve: Sequence[str] = (),
                    extra_roots: Sequence[Root] = ()) -> None:
    inside, target = confine_within((root, *extra_roots), path, never_serve)
    path = shown(path, (root, *extra_roots))
    try:
        # Truncated only once it is known to be a regular file.
        fd = open_regular(inside, target, os.O_WRONLY | os.O_CREAT, path, create_dirs=True)
        with os.fdopen(fd, "wb") as fh:
            fh.truncate(0)
            fh.write(content.encode("utf-8"))
    except OSError as exc:  # also a full disk or a quota while writing
        raise RpcError(INVALID_PARAMS, f"cannot write {path}: {exc.strerror}", {"path": path}) from exc
