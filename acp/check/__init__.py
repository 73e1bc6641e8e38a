"""The conformance checker behind `acp-gateway check`: `framework` (tiers, verdicts, the probe, the registry),
the checks (`core`: the protocol's rules and what a gateway needs across restarts; `kit`: the rest of the official
kit's v1 requirements), `run` (running them), `report`, `options` (what is said to the agent), `terminals` (what it
is served) and `schema` (the ACP v1 JSON Schema check). The registry is filled in that order: the kit's checks run
after the core ones in the shared session."""

from __future__ import annotations

from . import core, kit
from .core import SCHEMA_CHECK, STARTUP_CHECK, startup_verdict
from .framework import (
    CHECKS,
    UNDECIDED,
    UNKNOWN_PREFIX,
    Check,
    CheckContext,
    CheckResult,
    Probe,
    Result,
    Tier,
    launch_probe,
)

# Judged from every response of the run (`run.py`), not run on their own.
RUN_WIDE_CHECKS: tuple[Check, ...] = (kit.ENVELOPE_CHECK, kit.ERROR_CHECK, kit.UTF8_CHECK)


def all_checks() -> list[Check]:
    return [*CHECKS, STARTUP_CHECK, SCHEMA_CHECK, *RUN_WIDE_CHECKS]


__all__ = ["CHECKS", "RUN_WIDE_CHECKS", "SCHEMA_CHECK", "STARTUP_CHECK", "UNDECIDED", "UNKNOWN_PREFIX", "Check",
           "CheckContext", "CheckResult", "Probe", "Result", "Tier", "all_checks", "core", "kit", "launch_probe",
           "startup_verdict"]
