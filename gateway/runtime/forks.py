"""Forking a session (`task.session.fork`, ACP's unstable `session/fork`): the agent copies its conversation into a
new ACP session, and the gateway makes that a session of its own — a copy of the history so far, the same
configuration, its own agent process.

Why a process of its own: a gateway session is one agent process (its turns, its restore, its lease). The fork is
made by the original's process (only it holds the conversation), then let go there (`session/close` where the
agent serves it) and restored in the new session's process by the restore rules (§3.1) like any saved session; an
agent that cannot load or resume it there gets a fresh session and, where its profile says so, the copied history
as context, exactly as after any restore that could not happen.

Where it enters: `SessionManager.fork` (which routes it to the node holding the original and starts the new
session's agent). Where it leaves: the agent (`session/fork`, `session/close`), the store (one transaction: the new
session, its history, the forked ACP session to restore), the journal (`session_created`, a `session_message` on
each side).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from acp import mcp
from acp.errors import AcpError

from ..errors import agent_failed, busy, invalid_params
from ..store import SessionRow, StoreBase
from .config import setup_plan
from .live import LiveSession
from .settings import Settings
from .states import SessionState, TaskState
from .workspace import unfit
from .worktrees import Worktree
from .writer import SessionWriter

log = logging.getLogger(__name__)


def fork_refusal(live: LiveSession) -> str | None:
    """Why this live session cannot be forked now (None: it can)."""
    init = live.client.init
    if init is None or not init.agentCapabilities.can_fork:
        return (f"agent {live.profile.id!r} does not fork sessions (its initialize does not advertise "
                "sessionCapabilities.fork): start a new session instead")
    return None


async def fork_session(store: StoreBase, writer: SessionWriter, settings: Settings, live: LiveSession,
                       title: str | None, name: str | None, session_id: str | None = None,
                       worktree: Worktree | None = None) -> SessionRow:
    """The new session (CREATED, not launched yet) forked from `live`'s conversation as it stands now; in
    `worktree`, a worktree of its own made for it (`session_git.fork_worktree`), where the original has one."""
    row = live.row
    refused = fork_refusal(live)
    if refused is not None:
        raise invalid_params("session_id", f"session {row.id}: {refused}")
    if live.turn_running:
        raise busy(row.id, SessionState.RUNNING)
    # The conversation forked is what the agent has said until now, all of it written: the history copied ends there
    # (a turn started meanwhile belongs to the original only).
    await live.history.idle()
    through = await store.history.last_id(row.id)
    config, init = live.config, live.client.init
    assert init is not None  # fork_refusal said so
    servers, directories, _ = setup_plan(config, init.agentCapabilities, lambda d: unfit(settings, row.owner, d))
    try:
        forked = await asyncio.wait_for(
            live.client.fork_session(live.acp_session_id, worktree.path if worktree else row.cwd, servers,
                                     directories), settings.request_timeout)
    except (AcpError, TimeoutError) as exc:
        said = config.scrubber().text(str(exc) or type(exc).__name__)
        raise agent_failed(row.id, live.profile.id, f"agent {live.profile.id!r} could not fork session {row.id}: "
                           f"{said}", None, False) from None
    # Let go in the original's process: the new session's own process restores it (two processes on one saved
    # session would each write it).
    if init.agentCapabilities.can_close and live.client.alive:
        try:
            await asyncio.wait_for(live.client.close_session(forked), settings.stop_grace)
        except Exception as exc:  # the fork stands: it is restored in its own process all the same
            log.info("session %s: agent %s did not close the forked session %s: %s", row.id, live.profile.id,
                     forked, exc)
    setup = {"chosen": {k: c.to_json() for k, c in config.chosen.items()},
             "mcp_servers": [mcp.wire(s) for s in config.mcp_servers],  # secrets included, kept as the original's
             "additional_directories": list(config.additional_directories)}
    new = await store.sessions.create(
        owner=row.owner, agent=row.agent, cwd=worktree.path if worktree else row.cwd,
        title=title if title is not None else _fork_title(row),
        description=None, task_id=None, task_state=TaskState.TODO, session_state=SessionState.CREATED,
        config=setup, name=name, fork=(row.id, forked, through), agent_version=row.agent_version,
        session_id=session_id, worktree=worktree.to_json() if worktree else None, host=row.host)
    with contextlib.suppress(Exception):  # said for the people watching the original; the fork stands regardless
        await writer.message(row, "info", f"Forked into session {new.id}.")
    return new


def _fork_title(row: SessionRow) -> str:
    """The original's title marked "(fork)"; an untitled original's fork says whose it is up front, so the two do not
    read alike where a list cuts long titles ("s-af1c… (fork)" and "s-af1c…" did)."""
    return (f"{row.title} (fork)" if row.title else f"fork of {row.name or row.id}")[:1000]

