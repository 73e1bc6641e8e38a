"""The conformance checker behind `acp-gateway check`: `framework` (tiers, verdicts, the probe, the registry),
the checks (`core`: the protocol's rules and what a gateway needs across restarts; `kit`: the rest of the official
kit's v1 requirements), `catalog` (every check, in the registry's order), `run` (running them), `report`, `options`
(what is said to the agent), `terminals` (what it is served) and `schema` (the ACP v1 JSON Schema check).

The package's names (`from acp.check import all_checks`) load the checker at their first use, not when the package
is imported: an agent profile holds `options.CheckPrompts`, and loading a profile must not load the checker (its
ACP client, JSON Schema, …) into every `serve`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import core, kit
    from .catalog import (
        CHECKS,
        RUN_WIDE_CHECKS,
        SCHEMA_CHECK,
        STARTUP_CHECK,
        UNDECIDED,
        UNKNOWN_PREFIX,
        Check,
        CheckContext,
        CheckResult,
        Probe,
        Result,
        Tier,
        all_checks,
        launch_probe,
        startup_verdict,
    )

__all__ = ["CHECKS", "RUN_WIDE_CHECKS", "SCHEMA_CHECK", "STARTUP_CHECK", "UNDECIDED", "UNKNOWN_PREFIX", "Check",
           "CheckContext", "CheckResult", "Probe", "Result", "Tier", "all_checks", "core", "kit", "launch_probe",
           "startup_verdict"]


def __getattr__(name: str) -> Any:
    """A name of `__all__`, from `catalog` (loaded now, filling the registry in its order)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import catalog

    return getattr(catalog, name)
