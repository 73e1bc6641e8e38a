"""What an agent said on stderr, made part of the error a user sees: bounded, secrets redacted, a failed download
named. An agent that fails `initialize`, `session/new`, a restore or a turn usually says why only there (a missing
API key, an unreachable model, npx offline), while its JSON-RPC error says "Internal error". And what its exit
says of the profile's limits it ran into."""

from __future__ import annotations

import os
from collections.abc import Sequence

from acp import mcp
from acp.process import RunningAgent
from agents.profiles import AgentProfile, download_failed

from . import sandbox
from .live import LiveSession

TAIL_LINES = 5  # what is shown: the last lines, where the reason usually is
SCAN_LINES = 40  # what is searched for a package runner's download failure (npm prints a dozen lines)
LINE_CHARS = 300
MIN_SECRET_CHARS = 8  # a profile's env values this long are hidden too (an API key); "1" or "true" are not secrets


def hidden_values(profile: AgentProfile, secrets: Sequence[str]) -> list[str]:
    """What never appears: the session's MCP secrets, the profile's env values and brokered keys (its API keys)."""
    values = [*profile.resolved_env(os.environ).values(),
              *(key for entry in profile.brokered if (key := entry.real_key(os.environ)))]
    return [*secrets, *dict.fromkeys(v for v in values if len(v) >= MIN_SECRET_CHARS)]


def stderr_said(process: RunningAgent, profile: AgentProfile, secrets: Sequence[str], since: int = 0) -> str:
    """`; <why a download failed>` and ` (agent stderr: line | line)`, or "" when it said nothing."""
    lines = [line.strip() for line in process.stderr.tail_lines(SCAN_LINES, since) if line.strip()]
    if not lines:
        return ""
    hint = download_failed(profile.argv(), lines)  # the command as configured (the launch may wrap it)
    shown = " | ".join(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + "…" for line in lines[-TAIL_LINES:])
    return mcp.scrub((f"; {hint}" if hint else "") + f" (agent stderr: {shown})", hidden_values(profile, secrets))


def limit_said(live: LiveSession) -> str:
    """`: it hit its file_size limit (…)` when the agent's exit says it ran into one of its profile's limits."""
    limits = sandbox.Limits(**live.profile.limits.model_dump())
    hit = sandbox.limit_hit(live.client.process.returncode, live.client.process.stderr.tail_lines(20), limits)
    if hit is None:
        return ""
    value = getattr(limits, hit, None)
    return (f": it hit its {hit} limit" + (f" (limits.{hit} = {value} in profile {live.profile.id!r})"
                                           if value is not None else ""))
