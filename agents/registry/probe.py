"""What an installed agent says when it is started: its `initialize` (protocol version, capabilities, sign-in
methods) and whether `session/new` gives a session or asks to be signed in — and, from that, what the person must
do next. Run after `agents add` and by `agents doctor`; kept in the install's probe.json for `agents list` and the
web UI's agents page."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from acp.auth import PROFILE_METHOD, describe_methods
from acp.client import AcpClient, ClientOptions
from acp.errors import AUTH_REQUIRED, AcpError, RpcError
from agents.profiles import AgentProfile
from agents.registry.credentials import given, keep_vars, offered_vars, required_vars


async def probe(profile: AgentProfile, env: Mapping[str, str], timeout: float = 60.0) -> dict[str, Any]:
    """Start the agent in an empty directory, ask `initialize` and `session/new`, stop it. Never raises for what the
    agent does: each step's status is in the answer (`ok`, `auth_required`, `error`, `not_run`)."""
    result: dict[str, Any] = {"at": time.time(), "agent": profile.id, "version": profile.version,
                              "initialize": {"status": "not_run"}, "session_new": {"status": "not_run"}}
    with tempfile.TemporaryDirectory(prefix="acp-probe-") as workdir:
        client: AcpClient | None = None
        try:
            client = await AcpClient.launch(profile.argv(), cwd=workdir, env=dict(env),
                                            options=ClientOptions(request_timeout=timeout,
                                                                  initialize_timeout=timeout))
            init = await client.initialize()
            caps = init.agentCapabilities
            result["initialize"] = {"status": "ok"}
            result["protocol_version"] = init.protocolVersion
            result["agent_info"] = init.agentInfo.model_dump(mode="json", exclude_none=True) if init.agentInfo else None
            result["capabilities"] = caps.model_dump(mode="json", exclude_none=True)
            result["auth_methods"] = describe_methods(init.authMethods, keep_vars(profile))
            try:
                await client.request("session/new", {"cwd": workdir, "mcpServers": []}, timeout=timeout)
                result["session_new"] = {"status": "ok"}
            except RpcError as exc:
                asked = exc.code == AUTH_REQUIRED or "authentication required" in str(exc).lower()
                result["session_new"] = {"status": "auth_required" if asked else "error",
                                         "code": exc.code, "message": str(exc)[:300]}
        except (AcpError, TimeoutError, OSError) as exc:
            step = "initialize" if result["initialize"]["status"] == "not_run" else "session_new"
            result[step] = {"status": "error", "message": str(exc)[:300] or type(exc).__name__}
        finally:
            if client is not None:
                hidden = [v for k, v in env.items() if k in profile.env and len(v) >= 8]  # its keys, by value
                result["stderr_tail"] = [_scrub(line, hidden) for line in client.process.stderr.tail_lines(6)]
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.stop(), 10)
    required = required_vars(profile)
    result["sign_in_vars"] = list(dict.fromkeys([*required, *offered_vars(result.get("auth_methods") or [])]))
    result["missing_vars"] = [] if given(required, env) else required
    result["auth_state"] = auth_state(result)
    result["next"] = next_steps(profile.id, result)
    return result


def auth_state(found: Mapping[str, Any]) -> str:
    """`signed_in` (a session was given, and a key it is known to read is set), `needs_sign_in` (it asked, or
    it made a session without the key it is known to read: claude-agent-acp does, then refuses every prompt),
    `unknown` (it did not get that far)."""
    status = found.get("session_new", {}).get("status")
    if status == "ok" and found.get("missing_vars"):
        return "needs_sign_in"
    return {"ok": "signed_in", "auth_required": "needs_sign_in"}.get(status, "unknown")


def next_steps(agent_id: str, found: Mapping[str, Any]) -> list[str]:
    """What the person does next, one line each."""
    init, new = found.get("initialize", {}), found.get("session_new", {})
    if init.get("status") != "ok":
        tail = " / ".join(found.get("stderr_tail") or [])[-300:]
        return [f"it did not start: {init.get('message', '')}" + (f" (its stderr: {tail})" if tail else ""),
                f"try another version: acp-gateway agents add {agent_id}@VERSION (the registry's may be broken)"]
    missing = found.get("missing_vars") or []
    if new.get("status") == "ok" and missing:
        method = next((m.get("id") for m in found.get("auth_methods") or []
                       if m.get("kind") == "env_var" and missing[0] in (m.get("vars") or [])), PROFILE_METHOD)
        return [f"needs sign-in: set {' or '.join(missing)} (its key: it made a session without one, and its prompts "
                f"would fail). Start a session (acp-gateway start --agent {agent_id}, or the web UI) and it asks for "
                f"it: acp-gateway sign-in SESSION {method} {missing[0]}=- reads it from stdin, or the web "
                "UI's sign-in card; it is kept write-only for your sessions of this agent"]
    if new.get("status") == "ok":
        return [f"ready: acp-gateway run --agent {agent_id} --prompt 'hello', or start it from the web UI"]
    if new.get("status") != "auth_required":
        return [f"session/new failed: {new.get('message', '')}", f"acp-gateway agents doctor {agent_id} reruns this"]
    steps = []
    for method in found.get("auth_methods") or []:
        kind, label = method.get("kind"), method.get("name") or method.get("id")
        if kind == "env_var":
            steps.append(f"sign in with {label}: set {', '.join(method.get('vars') or [])} (the web UI's sign-in "
                         "keeps it for your sessions of this agent)")
        elif kind == "terminal":
            steps.append(f"sign in with {label}: the web UI's sign-in runs the agent's own login in a terminal")
        else:
            steps.append(f"sign in with {label}: start a session and choose it in the web UI's sign-in")
    return steps or ["it asks to be signed in but offers no method: see its documentation"]


def _scrub(line: str, hidden: list[str]) -> str:
    for value in hidden:
        line = line.replace(value, "[secret]")
    return line
