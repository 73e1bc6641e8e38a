"""The session runtime (docs/architecture.md: The runtime): live sessions own their turns; no client, crash or agent can
wedge one.

Where a command enters: `manager.SessionManager` (the facade the JSON-RPC adapter calls). Where it is decided
on: the pure tables — `commands`, `states`, `status`, `permissions`, `history`, `resume_context`, `sign_in_rules`,
`sign_in_needs`.
Where it leaves: `writer` (persist, then publish) and the agent, through `launcher`, `turns` and `broker`.
"""

from .manager import SessionManager
from .settings import Settings

__all__ = ["SessionManager", "Settings"]
