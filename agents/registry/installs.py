"""Where registry agents are installed, and what a launch of one needs from it: the layout of the state directory's
`agents/`, the profile each install is launched by, and whether an install is still as it was made.

    STATE/agents/registry.json                   the index, once refreshed (else the shipped snapshot)
    STATE/agents/installs/ID/current             the version new sessions start with
    STATE/agents/installs/ID/VERSION/install.json what was installed, from what, how it is launched
    STATE/agents/installs/ID/VERSION/manifest.json every file of tree/ with its size and SHA-256
    STATE/agents/installs/ID/VERSION/profile.toml  the profile that launches exactly this install
    STATE/agents/installs/ID/VERSION/tree/         the npm prefix, the venv, or the unpacked archive
    STATE/agents/installs/ID/VERSION/probe.json    what its `initialize` said after the install (agents doctor)
    STATE/agents/installs/ID/VERSION/check.json    its last conformance checks (agents doctor, agents matrix)

Nothing here runs a package manager (that is `installer`); everything here is what the gateway reads at launch.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from agents.profiles import AgentProfile, ProfileError, load_profile, profile_from

from . import manifest
from .index import ID_FORM, VERSION_FORM


class InstallRecord(BaseModel):
    """install.json: what was installed and how it is launched."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    name: str = ""
    version: str
    kind: Literal["npx", "uvx", "binary"]
    package: str  # the npm or PyPI name (with extras), or the archive's URL
    registry_version: str = ""  # the version the registry entry named (an `add ID@VERSION` may differ)
    command: list[str]  # relative to tree/ for its first item
    env: dict[str, str] = Field(default_factory=dict)
    lock: str | None = None  # package-lock.json or requirements.txt (with hashes), beside install.json
    lock_sha256: str | None = None
    archive_sha256: str | None = None
    archive_trust: Literal["supplied", "registry", "first-use"] | None = None
    installed_at: float = 0.0


def agents_root(state_dir: Path) -> Path:
    return Path(state_dir) / "agents"


def installs_root(state_dir: Path) -> Path:
    return agents_root(state_dir) / "installs"


def install_dir(state_dir: Path, agent_id: str, version: str) -> Path:
    """The directory of one install; ValueError for an id or version that could name a path elsewhere."""
    if not ID_FORM.match(agent_id) or not VERSION_FORM.match(version):
        raise ValueError(f"{agent_id!r}@{version!r} is not a registry id and version")
    return installs_root(state_dir) / agent_id / version


def read_record(directory: Path) -> InstallRecord:
    return InstallRecord.model_validate(orjson.loads((directory / "install.json").read_bytes()))


def current_version(state_dir: Path, agent_id: str) -> str | None:
    if not ID_FORM.match(agent_id):
        return None
    try:
        version = (installs_root(state_dir) / agent_id / "current").read_text().strip()
    except OSError:
        return None
    return version if VERSION_FORM.match(version) else None


def set_current(state_dir: Path, agent_id: str, version: str | None) -> None:
    """Point new sessions of the agent at `version` (None: at nothing), atomically."""
    pointer = installs_root(state_dir) / agent_id / "current"
    if version is None:
        pointer.unlink(missing_ok=True)
        return
    write_atomic(pointer, f"{version}\n".encode())


def versions(state_dir: Path, agent_id: str) -> list[str]:
    """The installed versions of an agent (complete installs only), oldest install first."""
    if not ID_FORM.match(agent_id):
        return []
    return _versions_in(installs_root(state_dir) / agent_id)


def _versions_in(root: Path) -> list[str]:
    """The complete installs in one agent's directory (a profile.toml is written last), oldest first."""
    if not root.is_dir():
        return []
    found = [d for d in root.iterdir() if d.is_dir() and VERSION_FORM.match(d.name) and (d / "profile.toml").is_file()]
    return [d.name for d in sorted(found, key=lambda d: (d / "install.json").stat().st_mtime)]


def agent_ids(state_dir: Path) -> list[str]:
    root = installs_root(state_dir)
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.is_dir() and ID_FORM.match(d.name))


CHECK_KEYS = frozenset({"at", "verdict", "counts"})  # what check.json holds (agents.registry.matrix.summary_of)
SETTINGS_FILE = "settings.toml"  # installs/ID/settings.toml: the person's own keys, kept across versions
SETTINGS_REFUSED = frozenset({"id", "version", "install", "command"})


def currents_signature(state_dir: Path) -> tuple[tuple[str, int], ...]:
    """Each installed agent with its `current` file's modification time: changes when an agent is added, updated
    or removed."""
    found = []
    for agent_id in agent_ids(state_dir):
        try:
            found.append((agent_id, (installs_root(state_dir) / agent_id / "current").stat().st_mtime_ns))
        except OSError:
            found.append((agent_id, 0))
    return tuple(found)


def profile_at(state_dir: Path, agent_id: str, version: str) -> AgentProfile | None:
    """The profile that launches `agent_id` at `version`, with the agent's settings.toml over it (an API key by
    reference, a permission policy…: what survives an update), or None when that version is not installed."""
    try:
        path = install_dir(state_dir, agent_id, version) / "profile.toml"
    except ValueError:
        return None
    if not path.is_file():
        return None
    settings = path.parent.parent / SETTINGS_FILE
    if not settings.is_file():
        return load_profile(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        extra = tomllib.loads(settings.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"{settings}: cannot be read as TOML: {exc}") from None
    refused = sorted(SETTINGS_REFUSED & extra.keys())
    if refused:
        raise ProfileError(f"{settings}: key '{refused[0]}' is the install's own (reinstall to change it)")
    env = {**data.get("env", {}), **extra.pop("env", {})}
    data.update(extra)
    if env:
        data["env"] = env
    return profile_from(data, f"{path} with {settings}")


def installed_profiles(state_dir: Path) -> dict[str, AgentProfile]:
    """The current version's profile of every installed agent (an agent with no current version is left out)."""
    found: dict[str, AgentProfile] = {}
    for agent_id in agent_ids(state_dir):
        version = current_version(state_dir, agent_id)
        if version is None:
            continue
        try:
            profile = profile_at(state_dir, agent_id, version)
        except ProfileError:
            continue  # a broken install is reported by `agents doctor`, not by every command that loads profiles
        if profile is not None:
            found[agent_id] = profile
    return found


def iter_installs(state_dir: Path) -> Iterator[tuple[str, str, Path]]:
    for agent_id in agent_ids(state_dir):
        for version in versions(state_dir, agent_id):
            yield agent_id, version, install_dir(state_dir, agent_id, version)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_atomic(path, orjson.dumps(data, option=orjson.OPT_INDENT_2))


def write_atomic(path: Path, data: bytes) -> None:
    """`path` holds `data` whole, or what it held before: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(data)
    temporary.replace(path)


def changes(profile: AgentProfile, *, full: bool = False) -> list[manifest.Change]:
    """How the install a profile launches differs from what was installed (none for a profile of no install)."""
    if not profile.install:
        return []
    directory = Path(profile.install)
    recorded = read_json(directory / "manifest.json")
    if recorded is None:
        return [manifest.Change("manifest.json", "removed")]
    return manifest.verify(directory / "tree", recorded, full=full)


def launch_refusal(profile: AgentProfile) -> str | None:
    """Why this profile's install must not be launched (it was changed after it was installed), or None."""
    found = changes(profile)
    if not found:
        return None
    shown = ", ".join(str(c) for c in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return (f"agent {profile.id} {profile.version}: its install was changed after it was installed ({shown}), so "
            f"it is not started. `acp-gateway agents doctor {profile.id}` says more; `acp-gateway agents add "
            f"{profile.id}@{profile.version} --force` installs it again")


def facts(profile: AgentProfile) -> dict[str, Any]:
    """What `agents list` and the web UI's agents page show of an installed agent: its sign-in state and last check
    (as its probe.json and check.json say; a check.json of another shape counts as none) and the versions
    installed; {} for a profile of no install."""
    if not profile.install:
        return {}
    directory = Path(profile.install)
    probe = read_json(directory / "probe.json") or {}
    check = read_json(directory / "check.json")
    return {"auth_state": str(probe.get("auth_state") or "not_probed"),
            "auth_methods": probe.get("auth_methods") or [],
            "last_check": {k: check[k] for k in CHECK_KEYS} if check and CHECK_KEYS <= check.keys() else None,
            "installed_versions": _versions_in(directory.parent)}


def remove_tree(directory: Path) -> None:
    manifest.make_writable(directory)
    shutil.rmtree(directory)
