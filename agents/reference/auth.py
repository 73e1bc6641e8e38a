"""The reference agent's sign-in options beyond the example's always-accepted one: an API key in the environment
(`--auth-env`), and a terminal sign-in the client runs for its person (`--auth-terminal`, which runs this program
with `--login`)."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from .config import LOGGED_IN, Config


def extra_auth_methods(config: Config, client_caps: dict[str, Any]) -> list[dict[str, Any]]:
    """The auth methods the flags add to `initialize`'s answer; the terminal one only for a client that runs them
    (or always, with the fault `--auth-terminal-always`)."""
    methods: list[dict[str, Any]] = []
    if config.auth_env:
        methods.append({"id": "reference-env", "name": "API key", "type": "env_var",
                        "vars": [{"name": config.auth_env}]})
    client_auth = client_caps.get("auth") or {}
    if config.auth_terminal and (client_auth.get("terminal") is True or config.auth_terminal_always):
        methods.append({"id": "reference-tui", "name": "Device login", "type": "terminal",
                        "description": "in a terminal", "args": ["--login"], "env": dict(config.auth_terminal_env)})
    return methods


def login(config: Config) -> NoReturn:
    """`--login`: the terminal sign-in a client runs for its person — says where to go, then is signed in (exit
    0), or fails (`--auth-fails`: exit 1)."""
    print("To sign in, open https://example.com/device and enter the code REF-1234", flush=True)
    # REF_LOGIN comes from the env the auth method advertised: a client that dropped it did not launch it as told.
    if config.auth_fails or os.environ.get("REF_LOGIN") != "1":
        print("\x1b[31mlogin failed\x1b[0m", flush=True)
        sys.exit(1)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    (config.state_dir / LOGGED_IN).write_text("yes\n")
    print("\x1b[32msigned in\x1b[0m", flush=True)
    sys.exit(0)
