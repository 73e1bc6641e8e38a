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

    def all(self, owner: str) -> dict[str, dict[str, str]]:
        """Every profile's variables `owner` gave, in one read (gateway.info names which are set, never a value)."""
        return self._read(owner)

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


class AuthSeen:
    """What each owner's agents last told of their sign-in (`sign_in_rules.auth_state`, AS-1 and AS-3):
    `needs_sign_in` after an `auth_required` answer, `signed_in` after a sign-in that went through or a turn the
    agent answered. Kept in the state directory (`auth_seen.json`, `0600`; names only, never a value) so a restart
    does not ask a person signed in by the agent's own login to sign in again; forgotten at a sign-out."""

    FILE = "auth_seen.json"

    def __init__(self, state_dir: Path | None = None) -> None:
        self._path = state_dir / self.FILE if state_dir is not None else None
        self._said: dict[str, dict[str, str]] = self._load()  # owner -> profile id -> SIGNED_IN or NEEDS_SIGN_IN
        self._offered: dict[str, list[str]] = {}  # profile id -> its agent's own env_var methods' variables

    def _load(self) -> dict[str, dict[str, str]]:
        if self._path is None:
            return {}
        try:
            data = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(o): {str(p): str(v) for p, v in said.items()} for o, said in data.items()
                if isinstance(said, dict)} if isinstance(data, dict) else {}

    def _save(self) -> None:
        if self._path is None:
            return
        tmp = self._path.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(self._said, fh)
            os.replace(tmp, self._path)
        except OSError:
            pass  # a hint for gateway.info, not a record: a full disk must not fail a launch over it
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def said(self, owner: str, profile: str, state: str) -> None:
        if self._said.get(owner, {}).get(profile) != state:
            self._said.setdefault(owner, {})[profile] = state
            self._save()

    def of(self, owner: str, profile: str) -> str | None:
        return self._said.get(owner, {}).get(profile)

    def forget(self, owner: str, profile: str) -> None:
        if self._said.get(owner, {}).pop(profile, None) is not None:
            self._save()

    def offered(self, profile: str, names: list[str]) -> None:
        """The variables of the env_var methods the agent offered at its last `initialize` here."""
        self._offered[profile] = names

    def offered_by(self, profile: str) -> list[str]:
        return self._offered.get(profile, [])
