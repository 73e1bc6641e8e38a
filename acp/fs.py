"""The client's file methods (`fs/read_text_file`, `fs/write_text_file`), confined to one directory.

Confinement is decided on the fully resolved path (symlinks followed), so `..`, absolute paths
elsewhere and symlinks pointing out of the session's cwd are all refused the same way. The final
open refuses to follow a symlink, narrowing the window for a rename race after the check.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError

MAX_READ_BYTES = 64 * 1024 * 1024


def confine(root: str | os.PathLike[str], path: str) -> Path:
    """Resolve `path` (absolute, or relative to `root`) and refuse it unless it lies inside `root`."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise RpcError(INVALID_PARAMS, "path must be a non-empty string", {"path": path})
    real_root = Path(os.path.realpath(root))
    candidate = Path(path) if os.path.isabs(path) else real_root / path
    resolved = Path(os.path.realpath(candidate))
    if resolved != real_root and real_root not in resolved.parents:
        raise RpcError(
            INVALID_PARAMS,
            f"access outside the session directory is refused: {path}",
            {"path": path, "root": str(real_root)},
        )
    return resolved


def select_lines(text: str, line: int | None, limit: int | None) -> str:
    """Apply ACP's 1-based `line` and `limit` to a file's text, keeping line endings."""
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = len(lines) if limit is None else start + limit
    return "".join(lines[start:end])


def read_text_file(root: str, path: str, line: int | None = None, limit: int | None = None) -> str:
    target = confine(root, path)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError as exc:
        raise RpcError(RESOURCE_NOT_FOUND, f"file not found: {path}", {"path": path}) from exc
    except OSError as exc:
        raise RpcError(INVALID_PARAMS, f"cannot read {path}: {exc.strerror}", {"path": path}) from exc
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise RpcError(INVALID_PARAMS, f"file too large to read as text: {path}", {"path": path})
    return select_lines(data.decode("utf-8", "replace"), line, limit)


def write_text_file(root: str, path: str, content: str) -> None:
    target = confine(root, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Re-check after creating parents: a directory could have been swapped for a symlink.
    target = confine(root, str(target))
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    try:
        fd = os.open(target, flags, 0o644)
    except OSError as exc:
        raise RpcError(INVALID_PARAMS, f"cannot write {path}: {exc.strerror}", {"path": path}) from exc
    with os.fdopen(fd, "wb") as fh:
        fh.write(content.encode("utf-8"))
