"""The session runtime (docs/architecture.md: The runtime): live sessions own their turns; no client, crash or agent can
wedge one.

Where a command enters: `manager.SessionManager` (the facade the JSON-RPC adapter calls). Where it is decided
on: the pure tables — `commands`, `states`, `status`, `permissions`, `history`, `resume_context`, `sign_in_rules`,
`sign_in_needs`.
Where it leaves: `writer` (persist, then publish) and the agent, through `launcher`, `turns` and `broker`.

The package's names load the manager at their first use, not when the package is imported: `doctor` reads one
rule module of it (`confinement`) without the whole runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .manager import SessionManager
    from .settings import Settings

__all__ = ["SessionManager", "Settings"]


def __getattr__(name: str) -> Any:
    if name == "SessionManager":
        from .manager import SessionManager

        return SessionManager
    if name == "Settings":
        from .settings import Settings

        return Settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
