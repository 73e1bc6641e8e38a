"""Sessions: launch, restore, prompt, recover — the driver that performs what the pure rules decide.

Decisions live elsewhere and are only applied here: the restore rules (`acp.restore`), state
transitions (`gateway.states`), status evaluation and the initial-prompt switch (`gateway.status`),
the resume context (`gateway.resume_context`). Every write goes to the store before the event that
announces it is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp.client import AcpClient, ClientOptions
from acp.errors import AcpError, RpcError, TransportError
from acp.restore import Outcome
from acp.session_setup import RestoreResult, establish_session
from agents.profiles import AgentProfile

from .errors import (
    ALREADY_TERMINAL,
    BUSY,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LIMIT_EXCEEDED,
    NOT_FOUND,
    NOT_RESUMABLE,
    WORKSPACE_MISSING,
    GatewayError,
    not_found,
)
from .events import EventBus, Subscription, synthetic_frame
from .history import HistoryCoalescer
from .permissions import CANCELLED, decide_permission, option_ids, refusal, selected
from .resume_context import HistoryEntry, render_resume_context
from .states import (
    TERMINAL_SESSION_STATES,
    SessionEvent,
    SessionState,
    TaskEvent,
    TaskState,
    transition_session,
    transition_task,
)
from .status import Boot, BootFacts, StatusFacts, decide_boot, evaluate_status
from .store import ExecutorRow, SessionRow, Store

log = logging.getLogger(__name__)

# Agent error codes passed to callers as they are; anything else would collide with our own codes.
_STANDARD_CODES = {-32700, -32600, -32601, -32602, -32603, -32800}


@dataclass
class Settings:
    state_dir: Path
    stale_window: float = 60.0
    ready_timeout: float = 90.0
    stop_grace: float = 2.0
    cancel_grace: float = 5.0
    request_timeout: float | None = 120.0  # session setup and other non-prompt requests to an agent
    initialize_timeout: float = 60.0
    max_live_sessions_per_owner: int = 32
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


class HistoryWriter:
    """Appends a session's history entries in order, off the update path; `idle()` waits for the writes."""

    def __init__(self, store: Store, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self._pending: list[HistoryEntry] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, entries: list[HistoryEntry]) -> None:
        if not entries:
            return
        self._pending.extend(entries)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self.store.history.append(self.session_id, batch)
            except Exception:
                log.exception("session %s: history not written", self.session_id)

    async def idle(self) -> None:
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)


@dataclass
class LiveSession:
    session_id: str
    owner: str
    task_id: str
    profile: AgentProfile
    client: AcpClient
    acp_session_id: str
    execution_id: str
    needs_resume_context: bool = False
    turn_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    coalescer: HistoryCoalescer = field(default_factory=HistoryCoalescer)
    history: HistoryWriter | None = None
    stopping: bool = False
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)


@dataclass
class LaunchResult:
    live: bool
    restore: RestoreResult | None = None
    error: str | None = None


def content_blocks(prompt: Any) -> list[dict[str, Any]]:
    """`prompt` as ACP content blocks: a string is one text block; blocks pass through untouched."""
    if isinstance(prompt, str):
        return [{"type": "text", "text": prompt}]
    return [dict(b) for b in prompt]


def prompt_text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")


class SessionManager:
    def __init__(self, store: Store, bus: EventBus, profiles: Mapping[str, AgentProfile], settings: Settings,
                 instance_id: str) -> None:
        self.store = store
        self.bus = bus
        self.profiles = profiles
        self.settings = settings
        self.instance_id = instance_id
        self.live: dict[str, LiveSession] = {}
        self._launches: dict[str, asyncio.Future[LaunchResult]] = {}
        self._launch_cancels: dict[str, asyncio.Event] = {}
        self._cancels: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._permission_waiters: dict[str, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._state_locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Task[Any]] = set()

    # -- life of the manager ---------------------------------------------------------
    async def open(self) -> None:
        await self.store.instances.register(self.instance_id)
        await self.store.permissions.expire_all()
        self.bus.reoffer = self._reoffer_permissions
        # A cancel that was requested but not finished before a crash still ends the session.
        for session_id in await self.store.cancels.pending():
            row = await self.store.sessions.get(session_id)
            if row is not None and SessionState(row.state) not in TERMINAL_SESSION_STATES:
                await self._apply(row, SessionEvent.CANCEL, TaskEvent.CANCEL)
            await self.store.cancels.clear(session_id)

    async def shutdown(self) -> None:
        """End running turns, stop every agent; sessions stay resumable (their tokens are stored)."""
        await asyncio.gather(*(self._stop_live(live, cancel_turn=True) for live in list(self.live.values())),
                             return_exceptions=True)
        for task in list(self._background):
            task.cancel()
        await self.store.instances.mark_dead(self.instance_id)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- reading -----------------------------------------------------------------------
    async def row(self, owner: str, session_id: Any) -> SessionRow:
        if not isinstance(session_id, str):
            raise not_found(str(session_id))
        row = await self.store.sessions.get(session_id, owner)
        if row is None:
            raise not_found(session_id)
        return row

    async def view(self, row: SessionRow) -> dict[str, Any]:
        return self._view(row, await self.store.executors.get(row.id))

    def _view(self, row: SessionRow, executor: ExecutorRow | None) -> dict[str, Any]:
        live = row.id in self.live
        return {
            "session_id": row.id,
            "task_id": row.task_id,
            "agent": row.agent,
            "cwd": row.cwd,
            "title": row.title,
            "state": row.state,
            "task_state": row.task_state,
            "error_message": row.error_message,
            "is_agent_running": live,
            "has_resume_token": bool(executor and executor.resume_token),
            "acp_session_id": executor.resume_token if executor else None,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
        }

    async def status(self, owner: str, session_id: Any) -> dict[str, Any]:
        found = await self.store.sessions.with_status_facts(session_id, owner) if isinstance(session_id, str) else None
        if found is None:
            raise not_found(str(session_id))
        row, executor, pending_permissions = found
        other_seen_ago = None
        if (executor is not None and executor.status == "running" and executor.instance_id
                and executor.instance_id != self.instance_id
                and await self.store.instances.is_alive(executor.instance_id)):
            other_seen_ago = time.time() - executor.last_seen
        decision = evaluate_status(StatusFacts(
            state=SessionState(row.state),
            has_token=bool(executor and executor.resume_token),
            executor_exists=executor is not None and row.launched,
            live_here=row.id in self.live,
            other_owner_seen_ago=other_seen_ago,
            stale_window=self.settings.stale_window,
            recovery_pending=row.recovery_pending,
        ))
        return {
            **self._view(row, executor),
            "needs_resume": decision.needs_resume,
            "is_resumable": decision.is_resumable,
            "resume_reason": decision.resume_reason.value,
            "pending_permissions": pending_permissions,
        }

    # -- state changes -------------------------------------------------------------------
    def _lock(self, session_id: str) -> asyncio.Lock:
        return self._state_locks.setdefault(session_id, asyncio.Lock())

    async def _apply(self, row: SessionRow, event: SessionEvent | None, task_event: TaskEvent | None,
                     **fields: Any) -> SessionRow:
        """Apply one transition (pure tables decide), persist it, then publish `session_status`."""
        async with self._lock(row.id):
            current = await self.store.sessions.get(row.id)
            if current is None:
                return row
            state = transition_session(SessionState(current.state), event) if event else None
            task_state = transition_task(TaskState(current.task_state), task_event) if task_event else None
            await self.store.sessions.update(row.id, state=state, task_state=task_state, **fields)
            updated = await self.store.sessions.get(row.id)
            assert updated is not None
        await self._publish(updated, "session_status", {
            "state": updated.state, "task_state": updated.task_state, "error_message": updated.error_message,
            "is_agent_running": updated.id in self.live,
        })
        return updated

    async def _publish(self, row: SessionRow, type_: str, data: dict[str, Any]) -> None:
        await self.bus.publish(type_, row.owner, row.id, row.task_id, data)

    async def _stage(self, row: SessionRow, stage: str) -> None:
        await self._publish(row, "session_active_stage", {"stage": stage})

    async def _message(self, row: SessionRow, level: str, text: str) -> None:
        await self._publish(row, "session_message", {"level": level, "text": text})

    # -- start -------------------------------------------------------------------------
    async def start(self, owner: str, *, agent: str, cwd: str, description: str | None = None,
                    title: str | None = None, task_id: str | None = None, wait_ready: bool = False) -> dict[str, Any]:
        profile = self.profiles.get(agent)
        if profile is None:
            known = ", ".join(sorted(self.profiles))
            raise GatewayError(INVALID_PARAMS, f"unknown agent {agent!r}; known agents: {known}", {"field": "agent"})
        if not os.path.isabs(cwd):
            raise GatewayError(INVALID_PARAMS, "cwd must be an absolute path", {"field": "cwd"})
        if not os.path.isdir(cwd):
            raise GatewayError(WORKSPACE_MISSING, f"workspace {cwd} does not exist: create it first",
                               {"cwd": cwd})
        if task_id is not None:
            task = await self.store.tasks.get(task_id)
            if task is not None and task.owner != owner:
                raise GatewayError(INVALID_PARAMS, f"task {task_id} not found", {"field": "task_id"})
        self._check_live_limit(owner)
        row = await self.store.sessions.create(
            owner=owner, agent=agent, cwd=cwd, title=title, description=description, task_id=task_id,
            task_state=TaskState.TODO, session_state=SessionState.CREATED)
        await self._publish(row, "session_created", await self.view(row))
        future = self._launch_once(row, fresh_start=False)
        if wait_ready:
            await asyncio.shield(future)
        return await self.view(await self.row(owner, row.id))

    # -- resume ------------------------------------------------------------------------
    async def resume(self, owner: str, session_id: Any, *, wait_ready: bool = True) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        if row.id in self.live:
            return {**await self.view(row), "already_running": True}
        self._check_resumable(row)
        if row.id not in self._launches:
            self._check_live_limit(owner)
        future = self._launch_once(row, fresh_start=False)
        if wait_ready:
            await asyncio.shield(future)
        return {**await self.view(await self.row(owner, row.id)), "already_running": False}

    def _check_live_limit(self, owner: str) -> None:
        live = sum(1 for s in self.live.values() if s.owner == owner) + sum(
            1 for sid in self._launches if sid not in self.live)
        if live >= self.settings.max_live_sessions_per_owner:
            raise GatewayError(LIMIT_EXCEEDED, f"{live} live sessions already (limit "
                               f"{self.settings.max_live_sessions_per_owner}): cancel or stop one first",
                               {"limit": self.settings.max_live_sessions_per_owner})

    def _check_resumable(self, row: SessionRow) -> None:
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise GatewayError(NOT_RESUMABLE, f"session {row.id} is {row.state} and cannot be resumed; "
                               "start a new session", {"session_id": row.id, "state": row.state})
        if not os.path.isdir(row.cwd):
            raise GatewayError(WORKSPACE_MISSING, f"workspace {row.cwd} of session {row.id} no longer exists: "
                               "restore the directory, then resume", {"session_id": row.id, "cwd": row.cwd})

    async def recover(self, owner: str, session_id: Any, action: str) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        if row.id in self.live:
            if action == "retry":
                return {**await self.view(row), "already_running": True}
            await self._stop_live(self.live[row.id], cancel_turn=True)
        self._check_resumable(row)
        fresh = action == "fresh_start"
        if fresh:
            await self.store.executors.set_token(row.id, None)
        future = self._launch_once(row, fresh_start=fresh)
        await asyncio.shield(future)
        return {**await self.view(await self.row(owner, row.id)), "already_running": False}

    def _launch_once(self, row: SessionRow, *, fresh_start: bool) -> asyncio.Future[LaunchResult]:
        """One launch per session at a time: every concurrent caller shares the same future."""
        existing = self._launches.get(row.id)
        if existing is not None:
            return existing
        cancel = asyncio.Event()
        self._launch_cancels[row.id] = cancel
        future = asyncio.ensure_future(self._launch(row, fresh_start=fresh_start, cancel=cancel))
        self._launches[row.id] = future

        def done(_: Any) -> None:
            self._launches.pop(row.id, None)
            self._launch_cancels.pop(row.id, None)

        future.add_done_callback(done)
        return future

    async def _launch(self, row: SessionRow, *, fresh_start: bool, cancel: asyncio.Event) -> LaunchResult:
        try:
            return await self._launch_inner(row, fresh_start=fresh_start, cancel=cancel)
        except Exception as exc:  # a bug must not leave the session STARTING forever
            log.exception("launch of session %s failed", row.id)
            with contextlib.suppress(Exception):
                current = await self.store.sessions.get(row.id)
                if current is not None and SessionState(current.state) == SessionState.STARTING:
                    await self._preserve(current, f"internal error while starting the agent: {type(exc).__name__}")
            return LaunchResult(False, error=str(exc))

    async def _launch_inner(self, row: SessionRow, *, fresh_start: bool, cancel: asyncio.Event) -> LaunchResult:
        profile = self.profiles.get(row.agent)
        if profile is None:
            await self._apply(row, SessionEvent.FAIL, TaskEvent.FAIL,
                              error_message=f"agent profile {row.agent!r} is no longer configured")
            return LaunchResult(False, error="unknown agent")
        executor = await self.store.executors.get(row.id)
        token = None if fresh_start or executor is None else executor.resume_token
        first_launch = not row.launched
        row = await self._apply(row, SessionEvent.LAUNCH, TaskEvent.START if first_launch else None,
                                error_message=None)
        await self._stage(row, "launching")
        env = profile.launch_env(self.settings.environ)
        # Updates flow from the first byte: a session/load replays history before it answers.
        coalescer = HistoryCoalescer()
        history = HistoryWriter(self.store, row.id)
        on_update = self._update_intake(row, coalescer, history)

        async def abandon() -> None:
            await history.idle()

        try:
            client = await AcpClient.launch(
                profile.argv(token, str(self.settings.state_dir)), cwd=row.cwd, env=env,
                on_update=on_update,
                on_permission=lambda params: self._on_permission(row.id, params),
                options=ClientOptions(request_timeout=self.settings.request_timeout,
                                      initialize_timeout=self.settings.initialize_timeout,
                                      stop_grace=self.settings.stop_grace),
            )
        except AcpError as exc:
            reason = f"could not launch agent {profile.id!r} for session {row.id}: {exc}"
            await self._apply(row, SessionEvent.FAIL, TaskEvent.FAIL, error_message=reason)
            await self._message(row, "error", reason)
            return LaunchResult(False, error=reason)
        execution_id = f"x-{uuid.uuid4().hex}"
        await self.store.executors.set_running(row.id, execution_id=execution_id, instance_id=self.instance_id,
                                               cwd=row.cwd)
        try:
            await self._stage(row, "initializing")
            await client.initialize()
            restoring = bool(token) and profile.native_session_resume
            await self._stage(row, "authenticating" if profile.auth_method and not restoring else "restoring")
            result = await establish_session(
                client, native_session_resume=profile.native_session_resume, resume_token=token,
                cwd=row.cwd, auth_method=profile.auth_method, environ=env, cancel=cancel)
        except (AcpError, TimeoutError) as exc:
            await client.stop()
            await abandon()
            tail = " | ".join(client.process.stderr.tail_lines(3))
            reason = f"agent {profile.id!r} failed to start: {exc}" + (f" (stderr: {tail})" if tail else "")
            await self.store.executors.set_stopped(row.id, "failed")
            await self._preserve(row, reason)
            return LaunchResult(False, error=reason)

        if result.outcome in (Outcome.PRESERVED, Outcome.FAILED) or result.session_id is None:
            await client.stop()
            await abandon()
            await self.store.executors.set_stopped(row.id, "failed")
            reason = (f"agent {profile.id!r} could not restore session {token}: {result.failure_class} "
                      f"({result.describe_failure()}); the saved session is kept — use task.session.recover "
                      "with action 'retry' or 'fresh_start'") if token else (
                      f"agent {profile.id!r} could not create a session: {result.describe_failure()}")
            await self._preserve(row, reason)
            return LaunchResult(False, restore=result, error=reason)

        started_fresh = result.outcome in (Outcome.NEW, Outcome.FALLBACK_NEW)
        if result.session_id != token:
            await self.store.executors.set_token(row.id, result.session_id)
        if result.outcome is Outcome.FALLBACK_NEW:
            await self._message(row, "warning",
                                f"The agent no longer knew session {token} ({result.failure_class}); "
                                f"a fresh session {result.session_id} was started.")
        has_history = await self.store.history.exists(row.id)
        task = await self.store.tasks.get(row.task_id)
        boot = decide_boot(BootFacts(
            first_launch=first_launch, has_description=bool(task and task.description),
            started_fresh=started_fresh, history_context_injection=profile.history_context_injection,
            has_history=has_history))
        live = LiveSession(row.id, row.owner, row.task_id, profile, client, result.session_id, execution_id,
                           needs_resume_context=boot is Boot.IDLE_INJECT_CONTEXT, coalescer=coalescer,
                           history=history)
        self.live[row.id] = live
        live.tasks.add(asyncio.ensure_future(self._watch_exit(live)))
        row = await self._apply(row, None, None, launched=True, recovery_pending=False, error_message=None,
                                needs_resume_context=live.needs_resume_context)
        await self._stage(row, "ready")
        if boot is Boot.INITIAL_PROMPT and task and task.description:
            self._spawn(self._initial_prompt(live, task.description))
        else:
            await self._apply(row, SessionEvent.READY, TaskEvent.REVIEW)
        return LaunchResult(True, restore=result)

    async def _preserve(self, row: SessionRow, reason: str) -> None:
        """A failure that keeps the saved identity: resumable later, but not automatically."""
        current = await self.store.sessions.get(row.id) or row
        event = SessionEvent.TURN_ENDED if SessionState(current.state) != SessionState.CREATED else None
        await self._apply(current, event, TaskEvent.REVIEW, error_message=reason, recovery_pending=True)
        await self._message(current, "error", reason)

    async def _initial_prompt(self, live: LiveSession, description: str) -> None:
        with contextlib.suppress(GatewayError):
            async with live.turn_lock:
                await self._turn(live, content_blocks(description))

    # -- prompt ------------------------------------------------------------------------
    async def prompt(self, owner: str, session_id: Any, prompt: Any) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        blocks = content_blocks(prompt)
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise GatewayError(NOT_RESUMABLE, f"session {row.id} is {row.state}: start a new session",
                               {"session_id": row.id, "state": row.state})
        for attempt in range(2):
            live = await self._ensure_live(row)
            if live.turn_lock.locked():
                raise GatewayError(BUSY, f"session {row.id} is busy with a turn: wait for it or cancel it",
                                   {"session_id": row.id})
            async with live.turn_lock:
                if not live.client.alive and attempt == 0:
                    # The execution vanished between the resume and the send: resume once, retry once.
                    await self._forget(live, "exited")
                    continue
                return await self._turn(live, blocks)
        raise GatewayError(NOT_RESUMABLE, f"the agent of session {row.id} keeps exiting before the prompt "
                           "could be sent; see task.session.status", {"session_id": row.id})

    async def _ensure_live(self, row: SessionRow) -> LiveSession:
        live = self.live.get(row.id)
        if live is not None:
            return live
        self._check_resumable(row)
        future = self._launch_once(row, fresh_start=False)
        try:
            await asyncio.wait_for(asyncio.shield(future), self.settings.ready_timeout)
        except TimeoutError:
            raise GatewayError(NOT_RESUMABLE, f"session {row.id} was not ready within "
                               f"{self.settings.ready_timeout:g}s; try again later",
                               {"session_id": row.id}) from None
        live = self.live.get(row.id)
        if live is None:
            current = await self.store.sessions.get(row.id)
            reason = current.error_message if current else None
            raise GatewayError(NOT_RESUMABLE, reason or f"session {row.id} could not be resumed",
                               {"session_id": row.id, "state": current.state if current else None})
        return live

    async def _turn(self, live: LiveSession, blocks: list[dict[str, Any]]) -> dict[str, Any]:
        row = await self.store.sessions.get(live.session_id)
        assert row is not None
        user_text = prompt_text(blocks)

        await self.store.history.append(row.id, [HistoryEntry("user_message", user_text)])
        sent = blocks
        if live.needs_resume_context:
            earlier = (await self.store.history.all(row.id))[:-1]
            context = render_resume_context(earlier, user_text)
            sent = [{"type": "text", "text": context}, *(b for b in blocks if b.get("type") != "text")]
        row = await self._apply(row, SessionEvent.PROMPT, TaskEvent.WORK)
        await self._publish(row, "turn_started", {"prompt": blocks})
        await self._stage(row, "prompting")
        try:
            response = await live.client.prompt(live.acp_session_id, sent)
        except (RpcError, TransportError) as exc:
            await self._end_turn(live)
            if live.stopping:
                # The session is being cancelled or stopped: whoever stops it owns its state.
                await self._publish(row, "turn_ended", {"stop_reason": "cancelled", "error": str(exc)})
                return {"stop_reason": "cancelled"}
            if isinstance(exc, RpcError):
                message = f"agent {live.profile.id!r} failed the turn: {exc.message}"
                await self._publish(row, "turn_ended", {"stop_reason": None, "error": exc.to_dict()})
                await self._apply(row, SessionEvent.TURN_ENDED, TaskEvent.REVIEW, error_message=message)
                await self._stage(row, "ready")  # a failed turn: the agent is alive and waits for the next
                code = exc.code if exc.code in _STANDARD_CODES else INTERNAL_ERROR
                raise GatewayError(code, message, {"session_id": row.id, "agent_error": exc.to_dict()}) from None
            await self._forget(live, "exited")
            message = (f"agent {live.profile.id!r} exited during the turn ({exc}); the session is kept: "
                       "resume it to continue")
            await self._publish(row, "turn_ended", {"stop_reason": None, "error": {"message": message}})
            await self._apply(row, SessionEvent.TURN_ENDED, TaskEvent.REVIEW, error_message=message)
            raise GatewayError(INTERNAL_ERROR, message, {"session_id": row.id, "needs_resume": True}) from None
        live.needs_resume_context = False
        await self._end_turn(live)
        await self._publish(row, "turn_ended", {"stop_reason": response.stopReason})
        if not live.stopping:
            await self._apply(row, SessionEvent.TURN_ENDED, TaskEvent.REVIEW, error_message=None,
                              needs_resume_context=False)
            await self._stage(row, "ready")
        return {"stop_reason": response.stopReason}

    async def _end_turn(self, live: LiveSession) -> None:
        """Every update of the turn is queued for the journal and its history committed before the turn ends."""
        assert live.history is not None
        live.history.add(live.coalescer.flush())
        await live.history.idle()

    # -- agent output ----------------------------------------------------------------
    def _update_intake(self, row: SessionRow, coalescer: HistoryCoalescer,
                       history: HistoryWriter) -> Callable[[dict[str, Any], bool], None]:
        """Called by the ACP client for each update, in arrival order, on the read loop: no task hop,
        no await. The event's id and order are fixed here; its commit comes with the next group."""
        enqueue, owner, sid, task_id = self.bus.enqueue, row.owner, row.id, row.task_id

        def on_update(params: dict[str, Any], replay: bool) -> None:
            update = params.get("update")
            enqueue("session_update", owner, sid, task_id, {"update": update, "replay": replay})
            if not replay and isinstance(update, dict):
                entries = coalescer.feed(update)
                if entries:
                    history.add(entries)

        return on_update

    async def _on_permission(self, session_id: str, params: dict[str, Any]) -> dict[str, Any]:
        """An agent asks: the profile's policy may answer; otherwise frontends do, first answer wins."""
        live = self.live.get(session_id)
        row = await self.store.sessions.get(session_id)
        if row is None:
            return dict(CANCELLED)
        profile = self.profiles.get(row.agent)
        policy = profile.permission_policy if profile else "ask"
        request_id = f"perm-{uuid.uuid4().hex[:12]}"
        tool_call = params.get("toolCall")
        decided = decide_permission(policy, params)
        if decided is not None:
            await self._publish(row, "permission_resolved", {"request_id": request_id, "outcome": decided,
                                                             "by": "policy", "policy": policy, "tool_call": tool_call})
            return decided
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._permission_waiters[request_id] = (session_id, waiter)
        await self.store.permissions.add(request_id, session_id, row.owner, params)
        event = await self.bus.publish("permission_requested", row.owner, row.id, row.task_id, {
            "request_id": request_id, "tool_call": tool_call, "options": params.get("options"),
            "acp_session_id": params.get("sessionId")})
        await self.store.permissions.set_event(request_id, event.id)
        timeout = profile.permission_timeout if profile else None
        try:
            if timeout is not None:
                try:
                    return await asyncio.wait_for(asyncio.shield(waiter), timeout)
                except TimeoutError:
                    answer = refusal(params)
                    if await self._resolve_permission(row, request_id, answer, "timeout"):
                        return answer
                    return await waiter
            return await waiter
        except asyncio.CancelledError:
            # The client cancelled the request (session/cancel): record it, answer cancelled.
            if live is not None and not waiter.done():
                self._spawn(self._resolve_permission(row, request_id, dict(CANCELLED), "cancel"))
            raise
        finally:
            self._permission_waiters.pop(request_id, None)

    async def _resolve_permission(self, row: SessionRow, request_id: str, answer: dict[str, Any], by: str) -> bool:
        if not await self.store.permissions.resolve(request_id, answer):
            return False
        entry = self._permission_waiters.get(request_id)
        if entry is not None and not entry[1].done():
            entry[1].set_result(answer)
        await self._publish(row, "permission_resolved", {"request_id": request_id, "outcome": answer, "by": by})
        return True

    async def respond_permission(self, owner: str, session_id: Any, request_id: str, option_id: str | None,
                                 cancelled: bool) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        stored = await self.store.permissions.get(request_id)
        if stored is None or stored[0] != row.id:
            raise GatewayError(NOT_FOUND, f"permission request {request_id} not found in session {row.id}",
                               {"request_id": request_id})
        _, _, state, params = stored
        if state != "pending":
            raise GatewayError(ALREADY_TERMINAL, f"permission request {request_id} was already answered "
                               "(first answer wins)", {"request_id": request_id, "state": state})
        if cancelled == (option_id is not None):
            raise GatewayError(INVALID_PARAMS, "give exactly one of option_id or cancelled: true",
                               {"field": "option_id"})
        if option_id is not None and option_id not in option_ids(params):
            raise GatewayError(INVALID_PARAMS, f"option_id {option_id!r} is not one of {option_ids(params)}",
                               {"field": "option_id"})
        answer = dict(CANCELLED) if cancelled else selected(option_id or "")
        if not await self._resolve_permission(row, request_id, answer, "user"):
            raise GatewayError(ALREADY_TERMINAL, f"permission request {request_id} was already answered "
                               "(first answer wins)", {"request_id": request_id, "state": "resolved"})
        return {"request_id": request_id, "outcome": answer}

    async def _cancel_permissions(self, row: SessionRow) -> None:
        for request_id, (session_id, _) in list(self._permission_waiters.items()):
            if session_id == row.id:
                await self._resolve_permission(row, request_id, dict(CANCELLED), "cancel")

    async def _reoffer_permissions(self, sub: Subscription, cursor: int) -> None:
        """Pending requests whose offer the subscriber did not just replay are offered again."""
        for request_id, session_id, event_id, params in await self.store.permissions.pending(sub.owner,
                                                                                             sub.session_id):
            if request_id not in self._permission_waiters:
                continue
            if event_id is not None and event_id > cursor:
                continue  # still to come live, or just replayed
            row = await self.store.sessions.get(session_id)
            sub.sink.send(synthetic_frame("permission_requested", {
                "request_id": request_id, "tool_call": params.get("toolCall"), "options": params.get("options"),
                "acp_session_id": params.get("sessionId"), "reoffered": True, "event_id": event_id,
            }, session_id, row.task_id if row else None))

    async def _watch_exit(self, live: LiveSession) -> None:
        await live.client.process.wait()
        if live.stopping or self.live.get(live.session_id) is not live:
            return
        if live.turn_lock.locked():
            return  # the turn sees the transport error and cleans up
        await self._forget(live, "exited")
        row = await self.store.sessions.get(live.session_id)
        if row is not None:
            tail = " | ".join(live.client.process.stderr.tail_lines(3))
            await self._apply(row, None, None, error_message=f"agent process exited (status "
                              f"{live.client.process.returncode})" + (f": {tail}" if tail else ""))

    async def _forget(self, live: LiveSession, status: str) -> None:
        if self.live.get(live.session_id) is live:
            del self.live[live.session_id]
        live.stopping = True
        for task in live.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        with contextlib.suppress(Exception):
            await live.client.stop()
        await self.store.executors.set_stopped(live.session_id, status)

    async def _stop_live(self, live: LiveSession, *, cancel_turn: bool) -> None:
        live.stopping = True
        if cancel_turn and live.turn_lock.locked():
            row = await self.store.sessions.get(live.session_id)
            if row is not None:
                await self._interrupt_turn(row, live)
        await self._forget(live, "stopped")

    async def _interrupt_turn(self, row: SessionRow, live: LiveSession) -> None:
        """Answer pending permission requests `cancelled`, send ACP `session/cancel` if a turn runs, and give
        that turn the cancel grace to end (DESIGN §4.5). The turn's caller sees how it ended."""
        await self._cancel_permissions(row)
        if not live.turn_lock.locked():
            return
        await live.client.cancel(live.acp_session_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.cancel_grace):
                async with live.turn_lock:
                    pass

    # -- small methods -------------------------------------------------------------------
    async def cancel_turn(self, owner: str, session_id: Any) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        live = self.live.get(row.id)
        if live is not None and live.turn_lock.locked():
            await self._stage(row, "cancelling")
            await self._interrupt_turn(row, live)
        return await self.view(await self.row(owner, row.id))

    async def cancel(self, owner: str, session_id: Any) -> dict[str, Any]:
        """End the session for good (DESIGN §4.5); concurrent calls share one cancellation."""
        row = await self.row(owner, session_id)
        pending = self._cancels.get(row.id)
        if pending is not None:
            return await asyncio.shield(pending)
        if SessionState(row.state) in TERMINAL_SESSION_STATES:
            raise GatewayError(ALREADY_TERMINAL, f"session {row.id} is already {row.state}",
                               {"session_id": row.id, "state": row.state})
        future = asyncio.ensure_future(self._cancel(row))
        self._cancels[row.id] = future
        future.add_done_callback(lambda _: self._cancels.pop(row.id, None))
        return await asyncio.shield(future)

    async def _cancel(self, row: SessionRow) -> dict[str, Any]:
        await self.store.cancels.request(row.id)  # durable first: a crash from here on still ends CANCELLED
        await self._publish(row, "session_cancel_requested", {})
        await self._stage(row, "cancelling")
        launch = self._launches.get(row.id)
        if launch is not None:
            self._launch_cancels[row.id].set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(launch), self.settings.cancel_grace)
        live = self.live.get(row.id)
        if live is not None:
            live.stopping = True
            await self._interrupt_turn(row, live)
            init = live.client.init
            if init is not None and init.agentCapabilities.can_close and live.client.alive:
                with contextlib.suppress(AcpError, TimeoutError):
                    await asyncio.wait_for(live.client.close_session(live.acp_session_id), self.settings.stop_grace)
            await self._stage(row, "stopping")
            await self._forget(live, "cancelled")
        current = await self.store.sessions.get(row.id) or row
        if SessionState(current.state) not in TERMINAL_SESSION_STATES:
            current = await self._apply(current, SessionEvent.CANCEL, TaskEvent.CANCEL)
        await self.store.cancels.clear(row.id)
        return await self.view(current)

    async def set_title(self, owner: str, session_id: Any, title: str) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        row = await self._apply(row, None, None, title=title)
        await self._publish(row, "session_title", {"title": title})
        return await self.view(row)

    async def delete(self, owner: str, session_id: Any) -> None:
        row = await self.row(owner, session_id)
        live = self.live.get(row.id)
        if live is not None:
            await self._stop_live(live, cancel_turn=True)
        await self.store.sessions.delete(row.id)
        await self._publish(row, "session_deleted", {})

    async def list(self, owner: str, *, states: list[str] | None, limit: int, cursor: str | None) -> dict[str, Any]:
        before = None
        if cursor is not None:
            try:
                before = int(cursor)
            except ValueError:
                raise GatewayError(INVALID_PARAMS, "cursor is not one this gateway issued",
                                   {"field": "cursor"}) from None
        event_cursor = self.bus.head  # committed and handed out: subscribing from it misses nothing
        rows = await self.store.sessions.list(owner, states=states, before_seq=before, limit=limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return {
            "sessions": [await self.view(r) for r in rows],
            "next_cursor": str(rows[-1].seq) if more and rows else None,
            "event_cursor": event_cursor,
        }

    async def history(self, owner: str, session_id: Any, after: int, limit: int) -> dict[str, Any]:
        row = await self.row(owner, session_id)
        entries = await self.store.history.page(row.id, after, limit + 1)
        more = len(entries) > limit
        entries = entries[:limit]
        return {
            "entries": [{"id": e.id, "kind": e.kind, "name": e.name, "content": e.content, "ts": e.ts}
                        for e in entries],
            "next": entries[-1].id if more and entries else None,
        }
