"""Agent profiles: one TOML file per agent (docs/architecture.md: Profiles), shipped ones plus `--agents-dir` overrides.

A bad profile is reported in one line naming the file and the key, never as a traceback.
`{python}` in a command stands for the running interpreter: the shipped Python agents are
started with `sys.executable`, not a `python3` found on PATH (a slow shim on some machines).
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from acp import mcp
from acp.check.options import CheckPrompts
from acp.models import field_path
from agents.brokered import BrokeredKey
from agents.errors import ProfileError as ProfileError  # its home is light: the CLI catches it
from agents.paths import default_state_dir
from agents.secret_ref import SecretRef

SHIPPED_DIR = Path(__file__).parent / "profiles"
# Commands that fetch the agent they run: the runner being on PATH says nothing of the agent being there.
PACKAGE_RUNNERS = {"npx": "npm", "bunx": "bun", "pnpx": "pnpm", "uvx": "uv", "pipx": "pipx"}
Availability = Literal["installed", "downloads_on_first_start", "not_found"]
SECRET_ENV_PREFIX = "ACP_GATEWAY_"  # the gateway's token and config never reach an agent

# What of the gateway's own environment an agent gets: the one list (docs/security.md repeats it). Everything else
# — the database password, cloud credentials, the gateway's token — stays with the gateway; what an agent needs
# besides (its API key) comes from its profile's `env`.
AGENT_ENV_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "NO_COLOR", "TMPDIR", "SHELL",
                             "USER", "LOGNAME"})
AGENT_ENV_PREFIXES = ("LC_",)  # locale categories


def agent_environment(base: Mapping[str, str], home: Path | None = None) -> dict[str, str]:
    """The allowlisted part of `base`; HOME is the agent home when given (the XDG directories beneath it), else the
    caller's (a local `run` or `check`, on the user's own behalf)."""
    env = {k: v for k, v in base.items()
           if (k in AGENT_ENV_NAMES or k.startswith(AGENT_ENV_PREFIXES)) and not k.startswith(SECRET_ENV_PREFIX)}
    if home is None:
        if "HOME" in base:
            env["HOME"] = base["HOME"]
        return env
    env["HOME"] = str(home)
    for name, below in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                        ("XDG_STATE_HOME", ".local/state"), ("XDG_CACHE_HOME", ".cache")):
        env[name] = str(home / below)
    return env


PermissionPolicy = Literal["ask", "allow_reads", "allow_all", "deny_all"]


class PromptCapabilities(BaseModel):
    """Which content blocks the agent takes in a prompt beyond text and resource links (ACP's promptCapabilities):
    what the gateway's `/acp` endpoint advertises for its default agent, before any agent has started."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    image: bool = False
    audio: bool = False
    embedded_context: bool = False

    def wire(self) -> dict[str, bool]:
        return {"image": self.image, "audio": self.audio, "embeddedContext": self.embedded_context}


class ResourceLimits(BaseModel):
    """rlimits an agent runs under (bytes, counts); unset: the gateway's own."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    address_space: int | None = Field(default=None, gt=0)
    processes: int | None = Field(default=None, gt=0)
    file_size: int | None = Field(default=None, gt=0)
    open_files: int | None = Field(default=None, gt=0)


class AgentProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    name: str = ""
    command: list[str]
    env: dict[str, str | SecretRef] = Field(default_factory=dict)  # a value, or where to read it (SecretRef)
    # Model-API keys the agent never holds: it gets a base URL of the gateway's proxy and a stand-in (brokered.py)
    brokered: list[BrokeredKey] = Field(default_factory=list)
    native_session_resume: bool = False
    history_context_injection: bool = False
    auth_method: str | None = None
    # Variables a person may set to sign this agent in (its API key or token's name), offered as an env_var sign-in
    # method when the agent asks to be signed in and offers none of its own (the copilot CLI reads a token so, but
    # advertises only its login)
    sign_in_vars: list[str] = Field(default_factory=list)
    resume_args: list[str] = Field(default_factory=list)
    permission_policy: PermissionPolicy = "ask"
    permission_timeout: float | None = Field(default=None, gt=0)
    auto_resume: bool = True  # frontends may relaunch it on their own when a viewed session needs it (paid agents: off)
    description: str = ""
    prompt_capabilities: PromptCapabilities = Field(default_factory=PromptCapabilities)
    check: CheckPrompts = Field(default_factory=CheckPrompts)  # what `acp-gateway check --agent ID` says to it
    # What every session of this agent starts with (a start's own choices win): config choices by option id (`mode`
    # and `model` name those categories), MCP servers (ACP's McpServer shapes; a profile may give stdio ones), and
    # additional directories (checked by the workspace rules at each launch).
    config: dict[str, str | bool] = Field(default_factory=dict)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    additional_directories: list[str] = Field(default_factory=list)
    # Its sessions started in a repository's top directory get a git worktree of their own (docs/worktrees.md), as
    # if the start had said `worktree: {repo: cwd}`; a start that names a `worktree` chooses for itself
    worktree: bool = False
    # The remote host its sessions run on, by the name of a `[remote_hosts.NAME]` (docs/remote-hosts.md); a start
    # that names a `host` chooses for itself. None: the gateway's machine.
    host: str | None = None
    # Where its HOME is: the owner's agent home, shared by the owner's agents ("owner"), or one of its own in it
    # ("profile"); and files copied into a new home (relative path in the home -> an absolute source file).
    home: Literal["owner", "profile"] = "owner"
    home_seed: dict[str, str] = Field(default_factory=dict)
    # Its sandbox (none: the gateway's setting), its network inside one, what it may read besides the system's
    # directories and its command's prefix (a private Node prefix, say), and its resource limits.
    sandbox: Literal["none", "bwrap"] | None = None
    network: Literal["host", "none", "outbound"] | None = None  # None: the gateway's (outbound for several owners)
    sandbox_read: list[str] = Field(default_factory=list)
    # Whether the agent is offered terminals (`terminal/*`: commands the gateway runs for it, under the same sandbox,
    # home and environment as the agent, their output shown to the session's frontends)
    terminals: bool = True
    limits: ResourceLimits = Field(default_factory=lambda: ResourceLimits())
    # An agent added from the ACP registry (`acp-gateway agents add`): the version installed, and the install's
    # directory, whose files are checked against what was installed before each launch (agents.registry.installs).
    version: str | None = None
    install: str | None = None
    source: str = Field(default="", exclude=True)

    @field_validator("command")
    @classmethod
    def _command_not_empty(cls, value: list[str]) -> list[str]:
        if not value or not value[0]:
            raise ValueError("must be a non-empty list of strings")
        return value

    @field_validator("mcp_servers")
    @classmethod
    def _servers_valid(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        try:
            mcp.parse(value, "mcp_servers")
        except mcp.McpRefusal as refused:
            raise ValueError(refused.message) from None
        return value

    @field_validator("home_seed")
    @classmethod
    def _seed_paths(cls, value: dict[str, str]) -> dict[str, str]:
        for relative, source in value.items():
            if os.path.isabs(relative) or ".." in Path(relative).parts or not relative:
                raise ValueError(f"{relative!r}: a path relative to the home, without '..'")
            if not os.path.isabs(source):
                raise ValueError(f"{relative!r}: the source must be an absolute path")
        return value

    @field_validator("sandbox_read")
    @classmethod
    def _reads_absolute(cls, value: list[str]) -> list[str]:
        if not all(os.path.isabs(d) for d in value):
            raise ValueError("each must be an absolute path")
        return value

    @field_validator("additional_directories")
    @classmethod
    def _directories_absolute(cls, value: list[str]) -> list[str]:
        if not all(os.path.isabs(d) for d in value):
            raise ValueError("each must be an absolute path")
        return value

    def servers(self) -> list[mcp.StdioServer | mcp.WebServer]:
        return mcp.parse(self.mcp_servers)

    def argv(self, resume_token: str | None = None, state_dir: str | None = None) -> list[str]:
        """The command to launch; `resume_args` are appended (with `{token}`) only when a token exists.

        `{python}` is the running interpreter; `{state_dir}` is the gateway's state directory.
        """
        argv = [sys.executable if part == "{python}" else part for part in self.command]
        if resume_token and self.resume_args:
            argv += [part.replace("{token}", resume_token) for part in self.resume_args]
        state = state_dir or str(default_state_dir())
        return [part.replace("{state_dir}", state) for part in argv]

    def launch_env(self, base: Mapping[str, str], home: Path | None = None) -> dict[str, str]:
        """The agent's environment: of the gateway's, only what `agent_environment` allows; then the profile's.
        With `home` (the gateway's launches: the owner's agent home), HOME and the XDG directories are there."""
        env = agent_environment(base, home)
        env.update(self.resolved_env(base))
        return env

    def resolved_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The profile's own variables, references read (`base`: the gateway's environment)."""
        resolved: dict[str, str] = {}
        for name, value in self.env.items():
            got = value.resolve(base) if isinstance(value, SecretRef) else value
            if got is not None:
                resolved[name] = got
        return resolved

    def command_found(self) -> bool:
        """The agent itself is there (not merely a runner that would download it)."""
        return self.availability() == "installed"

    def availability(self) -> Availability:
        """`installed`: the command is on this machine; `downloads_on_first_start`: a package runner (npx, uvx…)
        is, and fetches the agent at its first start (which needs the network); `not_found`: neither."""
        exe = self.argv()[0]
        present = Path(exe).is_file() if "/" in exe else shutil.which(exe) is not None
        if not present:
            return "not_found"
        return "downloads_on_first_start" if Path(exe).name in PACKAGE_RUNNERS else "installed"

    def availability_words(self) -> str:
        runner = Path(self.argv()[0]).name
        return {"installed": "found", "not_found": "not found",
                "downloads_on_first_start": f"downloads on first start ({runner})"}[self.availability()]


# What a package runner says on stderr when it could not fetch the package: the network or the registry.
DOWNLOAD_FAILURES = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH", "network request to",
                     "npm error network", "npm ERR! network", "Failed to fetch", "failed to download",
                     "Could not find a version", "404 Not Found", "E404", "ECONNRESET")


def download_failed(argv: list[str], stderr_lines: Iterable[str]) -> str | None:
    """Why an agent started by a package runner never ran, when its stderr says the download failed (else None)."""
    runner = Path(argv[0]).name if argv else ""
    if runner not in PACKAGE_RUNNERS:
        return None
    if any(marker in line for line in stderr_lines for marker in DOWNLOAD_FAILURES):
        package = next((a for a in argv[1:] if not a.startswith("-")), "the agent")
        return (f"{runner} could not download {package}: the first start needs the network (or the package in "
                f"{PACKAGE_RUNNERS[runner]}'s cache); install it, or start once with the network")
    return None


def adhoc_profile(command: Iterable[str], **overrides: Any) -> AgentProfile:
    """The profile of `acp-gateway run -- CMD ...`: restores natively unless told otherwise."""
    fields: dict[str, Any] = {"id": "command", "name": "command line agent", "command": list(command),
                              "native_session_resume": True}
    fields.update(overrides)
    return AgentProfile(**fields)


def load_profile(path: Path) -> AgentProfile:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from exc
    return profile_from(data, str(path))


def profile_from(data: dict[str, Any], path: str) -> AgentProfile:
    """A profile of parsed TOML, or ProfileError naming `path` and the key at fault."""
    try:
        return AgentProfile(**data, source=path)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = field_path(first["loc"]) or "(file)"
        if first["type"] == "missing":
            raise ProfileError(f"{path}: key '{key}' is required") from None
        if first["type"] == "extra_forbidden":
            raise ProfileError(f"{path}: key '{key}' is not a profile key") from None
        raise ProfileError(f"{path}: key '{key}': {first['msg']}") from None


def load_dir(directory: Path, profiles: dict[str, AgentProfile]) -> None:
    if not directory.is_dir():
        raise ProfileError(f"{directory}: agents directory does not exist")
    for path in sorted(directory.glob("*.toml")):
        profile = load_profile(path)
        profiles[profile.id] = profile
