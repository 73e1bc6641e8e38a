"""Every check, in the registry's order: importing this fills the registry (`framework.CHECKS`), the core checks
first, then the kit's, so the kit's run after the core ones in the shared session. The package's names come from
here, loaded at their first use (`acp/check/__init__.py`)."""

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
