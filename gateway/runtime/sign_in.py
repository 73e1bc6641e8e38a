"""What owners gave agents to sign in: the values of `env_var` methods (API keys), write-only.

One file per owner under the state directory (`secrets/<owner>.json`, `0600` in a `0700` directory), values by
agent profile: given to that owner's agents of that profile as environment variables at every launch, never
returned by any method, never in an event, a log line or a metric (the agent's words that repeat one are scrubbed
like an MCP header's). Written whole to a temporary file and renamed, so a crash leaves the old file or the new.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from .homes import owner_dir_name

SECRETS = "secrets"


class SignInSecrets:
    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / SECRETS

    def _path(self, owner: str) -> Path:
        return self.dir / f"{owner_dir_name(owner)}.json"

    def _read(self, owner: str) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self._path(owner).read_text())
        except (OSError, ValueError):
            return {}
        return {str(p): {str(k): str(v) for k, v in vals.items()} for p, vals in data.items()
                if isinstance(vals, dict)} if isinstance(data, dict) else {}

    def get(self, owner: str, profile: str) -> dict[str, str]:
        """The variables `owner` gave agents of `profile` (empty when none)."""
        return self._read(owner).get(profile, {})

    def put(self, owner: str, profile: str, values: dict[str, str]) -> None:
        """Keep `values` for `owner`'s agents of `profile` (replacing the same names)."""
        data = self._read(owner)
        data[profile] = {**data.get(profile, {}), **values}
        self._write(owner, data)

    def forget(self, owner: str, profile: str) -> None:
        data = self._read(owner)
        if data.pop(profile, None) is not None:
            self._write(owner, data)

    def _write(self, owner: str, data: dict[str, dict[str, str]]) -> None:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        path = self._path(owner)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
