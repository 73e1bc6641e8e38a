"""The ACP registry's index as data: parsed, bounded and validated before anything reads it, never run.

The index is `{"version", "agents": [entry...], "extensions": [...]}` (agentclientprotocol/registry FORMAT.md); an
entry names an agent and how it is distributed: an npm package (`npx`), a PyPI package (`uvx`) or an archive per
platform (`binary`). Whoever serves the index may be hostile, so everything the gateway would later put on a
command line, in an environment or in a path is checked here, against the shapes a real entry has:

- ids are the registry's own form (lowercase, digits, hyphens), so one never names a path outside its directory;
- package specs are an npm or PyPI name with at most an exact version — no URL, no path, no option;
- arguments carry no shell syntax and no control characters (they are passed as argv, never to a shell, but an
  entry that needs `;` or `$(` is not one a person should run on trust);
- environment names are not the loader's or interpreter's (`LD_PRELOAD`, `NODE_OPTIONS`, `PYTHONPATH`…), which
  would run code of the index's choosing before the agent's own;
- a binary's `cmd` is a relative path inside its archive, its archive an https URL;
- sizes are bounded in bytes and counts, so a huge index is refused before it is held.

Unknown keys of an entry (`website`, `preview`, `icon`…: the format grows) are kept out of the model, not refused;
an unknown distribution kind makes an entry listed but not installable.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SNAPSHOT = Path(__file__).parent / "snapshot.json"  # the index shipped with the gateway (PROVENANCE.md here)
MAX_INDEX_BYTES = 8 * 1024 * 1024
MAX_AGENTS = 2000
MAX_ARGS = 64
MAX_ENV = 64
MAX_TEXT = 4096
MAX_WORD = 256

ID_FORM = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
# npm: an optionally scoped name (npm's own rules: lowercase, URL-safe, at most 214 characters)
NPM_NAME = re.compile(r"^(?:@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$")
# PyPI: a PEP 508 name with optional extras
PYPI_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*\])?$")
VERSION_FORM = re.compile(r"^[0-9][0-9A-Za-z.+!_-]{0,63}$")
SHELL_SYNTAX = set(";&|$`<>(){}[]*?!~\\'\"#\n\r\t\x00")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# What would run code before the agent's own, or move where it looks for its code, or reach the gateway's secrets
ENV_REFUSED = frozenset({"PATH", "HOME", "SHELL", "ENV", "BASH_ENV", "NODE_OPTIONS", "NODE_PATH", "PYTHONPATH",
                         "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PERL5LIB", "PERL5OPT", "RUBYOPT",
                         "RUBYLIB", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "TMPDIR", "USER", "LOGNAME"})
ENV_REFUSED_PREFIXES = ("LD_", "DYLD_", "ACP_GATEWAY_", "XDG_", "NPM_CONFIG_", "PIP_", "UV_", "LC_")
PLATFORMS = ("darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64", "windows-x86_64")
CMD_FORM = re.compile(r"^(?:\./)?[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$")


class RegistryError(ValueError):
    """One line: which entry, which field, what is wrong; nothing was changed."""


def _word(value: str, what: str) -> str:
    if len(value) > MAX_WORD:
        raise ValueError(f"{what} longer than {MAX_WORD} characters")
    if any(ch in SHELL_SYNTAX or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ValueError(f"{what} {value[:60]!r} holds shell syntax or a control character")
    return value


def _env(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_ENV:
        raise ValueError(f"more than {MAX_ENV} variables")
    for name, text in value.items():
        if not ENV_NAME.match(name):
            raise ValueError(f"variable name {name[:60]!r} is not a plain name")
        if name.upper() in ENV_REFUSED or name.upper().startswith(ENV_REFUSED_PREFIXES):
            raise ValueError(f"variable {name} would change how the agent's code is found or run: refused")
        if len(text) > MAX_WORD or any(ord(ch) < 0x20 for ch in text):
            raise ValueError(f"variable {name}: value too long or holds a control character")
    return value


def npm_spec(package: str) -> tuple[str, str | None]:
    """`@scope/name@1.2.3` -> (`@scope/name`, `1.2.3`); the version may be absent. ValueError for anything else (a
    URL, a path, a git spec, a range, an option)."""
    at = package.rfind("@")
    name, version = (package[:at], package[at + 1:]) if at > 0 else (package, None)
    if len(name) > 214 or not NPM_NAME.match(name):
        raise ValueError(f"package {package[:80]!r} is not an npm package name with an exact version")
    if version is not None and not VERSION_FORM.match(version):
        raise ValueError(f"package {package[:80]!r}: {version[:40]!r} is not an exact version")
    return name, version


def pypi_spec(package: str) -> tuple[str, str | None]:
    """`name[extra]==1.2.3` or `name@1.2.3` (both seen in the registry) -> (`name[extra]`, `1.2.3`); the version may
    be absent. ValueError for anything else (a URL, a path, a range, an option, an environment marker)."""
    for separator in ("==", "@"):
        if separator in package:
            name, version = package.split(separator, 1)
            break
    else:
        name, version = package, None
    if not PYPI_NAME.match(name) or len(name) > 200:
        raise ValueError(f"package {package[:80]!r} is not a PyPI package name with an exact version")
    if version is not None and not VERSION_FORM.match(version):
        raise ValueError(f"package {package[:80]!r}: {version[:40]!r} is not an exact version")
    return name, version


class _Launched(BaseModel):
    """What every distribution gives the agent's command: its arguments and environment, both checked."""

    # The index's models are built when an index is first read (`acp-gateway agents`), not when `serve`, which
    # reads none, imports this module for its forms (ID_FORM, VERSION_FORM).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)

    args: list[str] = Field(default_factory=list, max_length=MAX_ARGS)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("args")
    @classmethod
    def _args(cls, value: list[str]) -> list[str]:
        return [_word(a, "argument") for a in value]

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return _env(value)


class PackageDistribution(_Launched):
    """`npx` or `uvx`: a package, the arguments the agent takes, the environment it wants."""

    package: str = Field(min_length=1, max_length=MAX_WORD)


class BinaryTarget(_Launched):
    """One platform's archive and the command in it."""

    archive: str = Field(max_length=2048)
    cmd: str = Field(max_length=MAX_WORD)
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # not in the format yet; used when given

    @field_validator("archive")
    @classmethod
    def _https(cls, value: str) -> str:
        if not re.match(r"^https://[A-Za-z0-9.-]+(?::[0-9]+)?/[^\s\x00-\x1f]*$", value):
            raise ValueError("archive must be an https URL")
        return value

    @field_validator("cmd")
    @classmethod
    def _cmd(cls, value: str) -> str:
        if not CMD_FORM.match(value) or ".." in value.split("/"):
            raise ValueError(f"cmd {value[:60]!r} must be a relative path inside the archive (no '..', no '/'-start)")
        return value


class Distribution(BaseModel):
    # a newer kind (bunx…): listed, not installed; built at first use, as _Launched
    model_config = ConfigDict(extra="allow", frozen=True, strict=True, defer_build=True)

    npx: PackageDistribution | None = None
    uvx: PackageDistribution | None = None
    binary: dict[Literal["darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64",
                         "windows-x86_64"], BinaryTarget] | None = None

    @model_validator(mode="after")
    def _packages(self) -> Distribution:
        if self.npx is not None:
            npm_spec(self.npx.package)
        if self.uvx is not None:
            pypi_spec(self.uvx.package)
        return self


class RegistryEntry(BaseModel):
    """One agent of the index: what `search` shows and `add` installs."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, defer_build=True)  # built at first use

    id: str = Field(max_length=64)
    name: str = Field(min_length=1, max_length=200)
    version: str = Field(max_length=64)
    description: str = Field(default="", max_length=MAX_TEXT)
    repository: str | None = Field(default=None, max_length=2048)
    website: str | None = Field(default=None, max_length=2048)
    authors: list[str] = Field(default_factory=list, max_length=64)
    license: str | None = Field(default=None, max_length=200)
    distribution: Distribution

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not ID_FORM.match(value):
            raise ValueError(f"id {value[:60]!r} is not of the registry's form (lowercase letters, digits, '-')")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not VERSION_FORM.match(value):
            raise ValueError(f"version {value[:60]!r} is not a version")
        return value

    def kinds(self) -> list[str]:
        """The distribution kinds this gateway installs that the entry offers, in the order it prefers them."""
        d = self.distribution
        return [k for k, v in (("npx", d.npx), ("uvx", d.uvx), ("binary", d.binary)) if v is not None]


class RegistryIndex(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, defer_build=True)  # built at first use

    version: str = Field(default="1.0.0", max_length=64)
    agents: list[RegistryEntry] = Field(max_length=MAX_AGENTS)

    def get(self, agent_id: str) -> RegistryEntry | None:
        return next((a for a in self.agents if a.id == agent_id), None)

    def search(self, words: str) -> list[RegistryEntry]:
        """Entries whose id, name or description hold every word (case-insensitive); all for no words."""
        wanted = words.lower().split()
        return [a for a in self.agents
                if all(w in f"{a.id} {a.name} {a.description}".lower() for w in wanted)]


def parse_index(raw: bytes, source: str) -> RegistryIndex:
    """The index in `raw`, or RegistryError naming `source`, the entry and the field at fault."""
    if len(raw) > MAX_INDEX_BYTES:
        raise RegistryError(f"{source}: {len(raw)} bytes; a registry index is at most {MAX_INDEX_BYTES} bytes")
    try:
        data: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RegistryError(f"{source}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list):
        raise RegistryError(f"{source}: not a registry index (an object with an 'agents' list)")
    seen: set[str] = set()
    for i, entry in enumerate(data["agents"][:MAX_AGENTS + 1]):
        label = entry.get("id") if isinstance(entry, dict) and isinstance(entry.get("id"), str) else f"#{i}"
        try:
            RegistryEntry.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(entry)"
            said = str(first["msg"]).removeprefix("Value error, ")
            raise RegistryError(f"{source}: agent {str(label)[:64]!r}: {where}: {said}") from None
        if label in seen:
            raise RegistryError(f"{source}: agent {label!r} is listed twice")
        seen.add(str(label))
    try:
        return RegistryIndex.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RegistryError(f"{source}: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
