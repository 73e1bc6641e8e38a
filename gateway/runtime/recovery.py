"""Start-up recovery: before a gateway serves anyone, it ends and settles what a crashed instance left behind.

In order: agent processes still running are ended (`reaper`), so no session can get a second agent; pending
permission requests expire (no agent waits for them any more); a turn that was running is closed as
`interrupted` (`turns.close_interrupted`); a cancel that was requested but not finished still ends its session;
and every other session whose agent was running is said, on the event stream, to need a resume (`session_status`
with `is_agent_running: false`, `needs_resume`, `resume_reason`): a frontend that resubscribes from its cursor
learns it without asking. (A gateway that stops cleanly says so of the agents it stops: `SessionManager.shutdown`.)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet

from ..store import StoreBase
from . import reaper
from .states import TERMINAL_SESSION_STATES, SessionEvent, SessionState
from .turns import TurnRunner
from .writer import SessionWriter, status_data

log = logging.getLogger(__name__)


async def recover_after_crash(store: StoreBase, writer: SessionWriter, turns: TurnRunner, instance_id: str,
                              held_elsewhere: Callable[[str], Awaitable[str | None]] | None = None,
                              kept: AbstractSet[str] = frozenset()) -> None:
    """`held_elsewhere` (a cluster): what a live node holds is that node's, running, and is left alone; the rest
    was a dead node's (or this one's before a crash) and is settled here. `kept`: sessions whose agents their
    hosts kept running, attached again already: left alone too (their questions are asked again as the agent's
    lines are replayed)."""
    async def orphaned(session_id: str) -> bool:
        return session_id not in kept and (held_elsewhere is None or await held_elsewhere(session_id) is None)

    leftovers = [e for e in await store.executors.leftovers(instance_id) if await orphaned(e.session_id)]
    killed = await reaper.reap(reaper.Execution(e.execution_id, e.pid, e.proc_start, e.boot_id)
                               for e in leftovers if e.execution_id)
    if killed:
        log.warning("ended %d agent process(es) a previous gateway left running: %s", len(killed),
                    ", ".join(str(p.pid) for p in killed))
    for executor in leftovers:
        await store.executors.set_stopped(executor.session_id, "stopped")
    if held_elsewhere is None and not kept:
        await store.permissions.expire_all()
    else:
        for session_id in await store.permissions.sessions_pending():
            if await orphaned(session_id):
                await store.permissions.expire(session_id)
    closed = set()
    for row in await store.sessions.running():
        if await orphaned(row.id):
            await turns.close_interrupted(row)  # its session_status says it needs a resume
            closed.add(row.id)
    for session_id in await store.cancels.pending():
        if not await orphaned(session_id):
            continue
        cancelled = await store.sessions.get(session_id)
        if cancelled is not None and SessionState(cancelled.state) not in TERMINAL_SESSION_STATES:
            await writer.apply(cancelled, SessionEvent.CANCEL)
        await store.cancels.clear(session_id)
    for executor in leftovers:
        if executor.session_id in closed:
            continue
        left = await store.sessions.get(executor.session_id)
        if left is not None and SessionState(left.state) not in TERMINAL_SESSION_STATES:
            await writer.publish(left, "session_status", status_data(left, False, bool(executor.resume_token)))
