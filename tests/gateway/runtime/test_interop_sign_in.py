"""Signing in a real agent that asks for it: GitHub's copilot CLI (`copilot --acp`), pinned by `make interop`, run
offline. It answers `session/new` with auth_required: the session waits for a sign-in with the methods it offers (its
own terminal login, in the older `_meta["terminal-auth"]` form) and the token its profile says it reads; a token
given with a dummy value relaunches it with the variable set — and the value is in no answer, event, log line,
metric or recording (its wire runs under `acp-gateway record`)."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from tests.gateway_harness import GatewayProcess, metrics_text, running, subscribed
from tests.support.paths import REPO
from tests.third_party import INTEROP, interop_node

DUMMY = "dummy-copilot-token-0123456789"


async def test_copilot_asks_for_a_sign_in_and_gets_a_token_it_never_shows(tmp_path: Path) -> None:
    copilot = INTEROP / "@github" / "copilot" / "npm-loader.js"
    if not copilot.exists():
        pytest.fail("the copilot CLI is not installed: `make interop` (part of `make test`) installs it")
    agents = tmp_path / "agents"
    agents.mkdir()
    (tmp_path / "work").mkdir()
    wire, seen = tmp_path / "copilot.wire.jsonl", tmp_path / "token-seen"
    record = [sys.executable, "-m", "gateway.cli", "record", "--out", str(wire), "--", str(interop_node()),
              str(copilot), "--acp"]
    # Each launch notes whether its environment has the token (the name, never the value).
    command = ["sh", "-c", f'env | grep -c "^COPILOT_GITHUB_TOKEN=" >> {seen}; exec "$@"', "sh", *record]
    profile = (REPO / "agents" / "profiles" / "copilot.toml").read_text()
    (agents / "copilot.toml").write_text(profile.replace('command = ["copilot", "--acp"]',
                                                         f"command = {orjson.dumps(command).decode()}")
                                         + f'\n[env]\nHOME = "{tmp_path / "home"}"\n')
    (tmp_path / "home").mkdir()
    gw = GatewayProcess(tmp_path / "state", agents)
    async with running(gw):
        client, log = await subscribed(gw)
        view = await client.call("task.session.start", {"agent": "copilot", "cwd": str(tmp_path / "work"),
                                                        "wait_ready": True})
        assert (view["state"], view["is_agent_running"]) == ("WAITING_FOR_INPUT", False)  # asking, not FAILED
        methods = {m["id"]: m for m in view["config"]["auth"]["methods"]}
        assert methods["copilot-login"]["kind"] == "terminal" and methods["copilot-login"]["args"] == ["login"]
        assert methods["copilot-login"]["command"].endswith("copilot")
        assert methods["profile-env"] == {"id": "profile-env", "name": "COPILOT_GITHUB_TOKEN", "kind": "env_var",
                                          "description": methods["profile-env"]["description"],
                                          "vars": ["COPILOT_GITHUB_TOKEN"]}
        signed = await client.call("task.session.authenticate", {
            "session_id": view["session_id"], "method_id": "profile-env", "values": {"COPILOT_GITHUB_TOKEN": DUMMY}})
        # Relaunched with the token set (offline it cannot be checked, so copilot asks again).
        assert seen.read_text().split() == ["0", "1"]
        assert signed["config"]["auth"] is not None
        events = await client.call("task.session.events", {"session_id": view["session_id"]})
        _, metrics = await metrics_text(gw.port, gw.token or "")
        await client.close()
    for where in (orjson.dumps([view, signed, events, log.events]), "".join(gw.stderr_lines).encode(),
                  metrics.encode(), wire.read_bytes()):
        assert DUMMY.encode() not in where
