"""Crash windows a test cannot hit from outside: the gateway kills itself (SIGKILL, as `kill -9`) at a named point
when `ACP_GATEWAY_FAILPOINT` names it. Unset, as in every real deployment, each point is one dictionary lookup.

Points: `turn-recorded` — a turn's `turn_started` is committed, its prompt not yet sent to the agent;
`terminal-started` — an agent's terminal runs, its id not yet answered to the agent.
"""

from __future__ import annotations

import os
import signal

ENV = "ACP_GATEWAY_FAILPOINT"
_armed = os.environ.get(ENV, "")


def reached(point: str) -> None:
    """Die here, as a `kill -9` would, if this point is armed."""
    if _armed == point:
        os.kill(os.getpid(), signal.SIGKILL)
