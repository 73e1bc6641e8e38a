"""A live session: its agent, the turn it runs, and the in-memory view that reads are answered from.

A `LiveSession` exists from the moment its agent is ready until the agent is stopped or gone. It owns
its turn (`turn`, a task of the runtime, never of a client's call), so a client that goes away only
stops waiting. Its `row` is kept current by the write path, so status, get and list of a live session
need no store round-trip.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from acp.client import AcpClient
from agents.profiles import AgentProfile

from ..agenthost.ledger import Ledger
from ..store import SessionRow
from .commands import CommandPhase, phase_of
from .config import SessionConfig
from .history import HistoryCoalescer
from .states import TERMINAL_SESSION_STATES, SessionState
from .writer import HistoryWriter


@dataclass
class LiveSession:
    row: SessionRow
    profile: AgentProfile
    client: AcpClient
    acp_session_id: str  # also the resume token
    execution_id: str
    history: HistoryWriter
    coalescer: HistoryCoalescer
    config: SessionConfig = field(default_factory=SessionConfig)  # what its agent offers and its user chose
    needs_resume_context: bool = False
    stopping: bool = False  # the agent is being stopped: no new turn starts
    turn: asyncio.Task[dict[str, Any]] | None = None
    # Of the running turn: whether its session/prompt went to the agent, and whether a cancel came before it did
    # (then it never goes: the turn ends `cancelled` without asking the agent).
    prompt_sent: bool = False
    cancel_requested: bool = False
    cancel_unanswered: bool = False  # its agent was stopped because the turn outlived the cancel grace
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    # An agent in a host (gateway.runtime.hosting): what is done with its lines, and the running turn's prompt id
    ledger: Ledger | None = None
    prompt_id: int | None = None

    @property
    def session_id(self) -> str:
        return self.row.id

    @property
    def owner(self) -> str:
        return self.row.owner

    @property
    def turn_running(self) -> bool:
        return self.turn is not None and not self.turn.done()

    @property
    def phase(self) -> CommandPhase:
        return phase_of(terminal=SessionState(self.row.state) in TERMINAL_SESSION_STATES,
                        turn_running=self.turn_running, stopping=self.stopping)
