"""What the reference agent can be told to be: its `Config` (one field per flag) and the names of the method faults
and protocol quirks its flags take. `cli_args.py` fills a Config from the command line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from acp.errors import (
    AUTH_REQUIRED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
)

# KIND -> (code, message template). `{id}` is the sessionId of the request.
ERROR_FAULTS: dict[str, tuple[int, str]] = {
    "unsupported": (METHOD_NOT_FOUND, "Method not found"),
    "unknown_session": (RESOURCE_NOT_FOUND, "Resource not found: session {id}"),
    "named_not_found": (INTERNAL_ERROR, "no rollout found for session {id}"),
    "invalid_params_not_found": (INVALID_PARAMS, "Invalid params: session {id} not found"),
    "other_not_found": (INTERNAL_ERROR, "session other-session-0000 not found"),
    "config_not_found": (RESOURCE_NOT_FOUND, "config file /etc/reference-agent/config.toml not found"),
    "auth": (AUTH_REQUIRED, "Authentication required"),
    "internal": (INTERNAL_ERROR, "Internal error"),
    "cancelled": (REQUEST_CANCELLED, "Request cancelled"),
}
BEHAVIOUR_FAULTS = {"crash", "hang", "exit_mid_replay", "ignore"}
FAULTS = sorted([*ERROR_FAULTS, *BEHAVIOUR_FAULTS])
# Protocol quirks seen in real agents (or plausible ones), one per check of `acp-gateway check` that should catch it.
QUIRKS = {
    "string-id-null": "answer a request whose id is a string with id null",
    "answer-notifications": "answer an unknown notification with an error (id null)",
    "silent-unknown": "never answer an unknown method whose name starts with '_'",
    "result-and-error": "error responses carry a result too",
    "multiline-errors": "error messages run over several lines",
    "bad-utf8": "every turn writes a line that is not UTF-8",
    "bad-current-value": "a config option's currentValue is not among its options",
    "booleans-always": "offer a boolean config option to clients that did not opt in",
    "partial-config-answer": "session/set_config_option answers only the option that changed",
    "accept-any-value": "session/set_config_option takes any value, offered or not",
    "close-keeps-turn": "session/close leaves a running turn running",
    "authenticate-no-effect": "authenticate says yes and signs nothing in",
    "silent-mode-change": "/mode changes the mode without telling the client",
    "refuse-meta": "a prompt carrying _meta is refused",
    "refuse-resource-link": "a prompt with a resource_link block is refused",
    "refuse-embedded": "advertise embeddedContext, then refuse resource blocks",
    "refuse-media": "with --media, advertise image and audio, then refuse them",
    "list-ignores-cwd": "session/list ignores its cwd filter",
    "null-load-result": "session/load answers null instead of {}",
    "refuse-additional-directories": "advertise additionalDirectories, then refuse them",
    "delete-unknown-errors": "session/delete of an unknown session answers -32002 (instead of succeeding)",
}
# The mark a terminal sign-in (`--login`) leaves in the state directory: signed in from then on, across restarts.
LOGGED_IN = "logged-in"


@dataclass
class Config:
    """Every flag of the agent. The first group is what a well-behaved agent offers; the rest are faults."""

    state_dir: Path
    advertise_load: bool = True
    advertise_resume: bool = True
    advertise_list: bool = True
    advertise_close: bool = True
    advertise_delete: bool = True
    advertise_fork: bool = True
    protocol_version: int = 1
    config_style: str = "both"
    mcp_http: bool = True
    mcp_sse: bool = True
    additional_directories: bool = True
    media: bool = False  # advertise image and audio prompts (and take them)
    log: str | None = None
    faults: dict[str, str] = field(default_factory=dict)
    noise: int = 0
    huge_line: int = 0
    stderr_flood: int = 0
    fault_reason: str | None = None  # said on stderr before an error fault's answer, as real agents say why
    replay_delay: float = 0.0
    late_replay: bool = False
    permission: bool = False
    tool_calls: bool = False
    stream: int = 0
    require_auth: bool = False
    auth_env: str | None = None
    auth_terminal: bool = False
    auth_terminal_env: dict[str, str] = field(default_factory=lambda: {"REF_LOGIN": "1"})  # the terminal method's env
    login: bool = False
    auth_fails: bool = False
    # Sessions are made without a key, but prompts answer auth_required unless this variable is set (as
    # claude-agent-acp does without ANTHROPIC_API_KEY), offering no method for it
    prompt_key: str | None = None
    ignore_cancel: bool = False
    slow_init: float = 0.0  # seconds before initialize is answered
    brief_turns: bool = False  # every turn is one update and its answer, whatever the prompt asks
    grandchild_pidfile: str | None = None
    faults_once: dict[str, str] = field(default_factory=dict)
    replay_on_resume: bool = False
    bad_stop_reason: bool = False
    bad_update: bool = False
    linger: bool = False
    forget_config: bool = False
    refuse_values: frozenset[tuple[str, str]] = frozenset()
    drop_after_restart: frozenset[str] = frozenset()
    leaky_mcp: bool = False
    ignore_client_capabilities: bool = False  # fault: call fs, terminal and elicitation methods though not offered
    keep_terminals: bool = False  # fault: never release a terminal
    auth_terminal_always: bool = False  # fault: advertise the terminal sign-in to a client that does not run them
    quirks: frozenset[str] = frozenset()  # of QUIRKS
