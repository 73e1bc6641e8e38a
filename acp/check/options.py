"""What `acp-gateway check` says to an agent and how long it waits: prompts, timeouts and the auth method.

Pure data, shared by the checker, the CLI and agent profiles (a profile's `[check]` table is `CheckPrompts`).
The default prompts are plain requests any agent understands; nothing here knows one agent's commands
(the reference agent's profile carries its own in `agents/profiles/reference.toml`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from pydantic import BaseModel, ConfigDict, Field


class CheckPrompts(BaseModel):
    """The stimuli: one prompt per kind of turn a check needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    short: str = Field(default="Say hello in one word.", min_length=1)
    # A turn that runs long enough for session/cancel to reach it while updates are still arriving.
    long: str = Field(default="Count from one to three hundred in words, one number per line, with nothing else. "
                              "Do not use any tools.", min_length=1)
    # The retry when the long turn ended as the cancel went out.
    longer: str = Field(default="Write every number from one to two thousand in words, one per line, with nothing "
                                "else. Do not use any tools.", min_length=1)
    # A turn in which the agent asks the client's permission (a file edit, in most agents).
    permission: str = Field(default="Create a file named notes.txt in the current directory containing the word hi. "
                                    "Ask me for permission before you write it.", min_length=1)
    # A turn in which a coding agent would use the client's files and terminals, where offered: what the checks of
    # client capabilities watch (ACP-CLIENTCAP-001, ACP-TERMINAL-001).
    tools: str = Field(default="Create a file named acp-check.txt containing the word hi, read it back, then run "
                               "the command `ls` and tell me what it printed.", min_length=1)
    # A turn in which the agent changes its own mode (ACP-MODES-003): agents do it on their own terms (leaving plan
    # mode), so no plain request is sure to; none by default, and the check is skipped until one is given.
    mode_change: str | None = None
    # A turn in which the agent calls a client method the checker does not offer. No agent-neutral request makes
    # an agent do that, so by default ACP-CLIENT-001 is skipped and says how to set one.
    client_method: str | None = None

    def with_overrides(self, pairs: list[str]) -> CheckPrompts:
        """`KEY=TEXT` pairs (the CLI's `--prompt`) over these prompts; ValueError names a bad key."""
        changes: dict[str, str] = {}
        for pair in pairs:
            key, sep, text = pair.partition("=")
            if not sep or key not in type(self).model_fields:
                raise ValueError(f"--prompt {pair!r}: give KEY=TEXT with KEY one of "
                                 f"{', '.join(type(self).model_fields)}")
            changes[key] = text
        return type(self).model_validate({**self.model_dump(), **changes})


@dataclass(frozen=True)
class ClientOffer:
    """What the checker, as a client, offers an agent in `initialize`: each client capability on or off. The
    default is what most checks need (files, nothing else); a check that judges how an agent treats a capability
    offers its own."""

    fs_read: bool = True
    fs_write: bool = True
    terminal: bool = False
    terminal_auth: bool = False
    elicitation_form: bool = False
    elicitation_url: bool = False
    boolean_config: bool = False

    @classmethod
    def nothing(cls) -> ClientOffer:
        return cls(fs_read=False, fs_write=False)

    def with_switches(self, pairs: list[str]) -> ClientOffer:
        """`NAME=on|off` pairs (the CLI's `--offer`, names as the fields with `-` or `_`) over this offer; ValueError
        names a bad one."""
        names = [f.name for f in fields(self)]
        changes: dict[str, bool] = {}
        for pair in pairs:
            name, sep, value = pair.partition("=")
            name = name.replace("-", "_")
            if not sep or name not in names or value not in ("on", "off"):
                raise ValueError(f"--offer {pair!r}: give NAME=on or NAME=off with NAME one of "
                                 f"{', '.join(n.replace('_', '-') for n in names)}")
            changes[name] = value == "on"
        return replace(self, **changes)

    def capabilities(self) -> dict[str, object]:
        """The `clientCapabilities` of initialize."""
        caps: dict[str, object] = {"fs": {"readTextFile": self.fs_read, "writeTextFile": self.fs_write},
                                   "terminal": self.terminal}
        if self.terminal_auth:
            caps["auth"] = {"terminal": True}
        modes: dict[str, object] = {**({"form": {}} if self.elicitation_form else {}),
                                    **({"url": {}} if self.elicitation_url else {})}
        if modes:
            caps["elicitation"] = modes
        if self.boolean_config:
            caps["session"] = {"configOptions": {"boolean": {}}}
        return caps


@dataclass(frozen=True)
class CheckOptions:
    prompts: CheckPrompts = field(default_factory=CheckPrompts)
    # initialize, authenticate, session/new|load|resume and every other non-turn call. As patient as the gateway
    # (its `initialize_timeout`): adapters that probe for their CLI take 20 s and more to answer initialize.
    setup_timeout: float = 60.0
    turn_timeout: float = 120.0  # one prompt turn (a real model)
    # A turn that says nothing at all (no update, no answer) this long is taken as not running: its model unreachable
    # (an adapter retrying an unreachable API says nothing for minutes). Real models stream within seconds.
    quiet_timeout: float = 25.0
    auth_method: str | None = None  # the profile's `auth_method`: authenticate with it when asked
    concurrency: int = 3  # checks that need their own agent process, run beside the shared process's sequence
    agent_cwd: str | None = None  # where the agent process runs (default: where the checker was started)
    # The checks' scratch directory, an empty one of the caller's (kept); default: a new temporary one, removed after.
    scratch_dir: str | None = None
    # The made-up values the checks send (an unknown session's id, a word to remember, a value not offered) are drawn
    # from this seed when given: the same in every run, so a recorded check run replays. Default: random.
    seed: str | None = None
    slow_initialize: float = 5.0  # ACP-STARTUP-001: an initialize slower than this is an advisory finding
    # What the checks' shared process (and every check without an offer of its own) offers the agent (`--offer`).
    offer: ClientOffer = field(default_factory=ClientOffer)

    @property
    def check_timeout(self) -> float:
        """The deadline of one check: the restore checks set up two processes and run two turns."""
        return 2 * self.setup_timeout + 2 * self.turn_timeout + 10.0
