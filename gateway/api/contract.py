"""The API's contract: every method's params and result, and the event notification, as pydantic models.

One vocabulary: `rpc` validates params with these models, `openrpc` publishes them (`/openrpc.json`,
`rpc.discover`), and the test suite checks every answer and event it sees against that document. Results are
described, not built, here: the runtime returns plain dicts (its hot paths avoid a model per answer), and
the suite holds them to these shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_ID = 2**63 - 1  # SQLite's largest integer: a larger cursor is a bad param, not an overflow deep in the store

SessionStateName = Literal["CREATED", "STARTING", "RUNNING", "WAITING_FOR_INPUT", "COMPLETED", "FAILED", "CANCELLED"]
TaskStateName = Literal["TODO", "IN_PROGRESS", "REVIEW", "COMPLETED", "FAILED", "CANCELLED"]
ResumeReasonName = Literal["agent_running", "stale_execution", "agent_not_running", "agent_not_running_fresh_start",
                           "terminal_state", "error_recovery", "not_started"]
EventTypeName = Literal[
    "session_created", "session_status", "session_deleted", "session_active_stage", "session_cancel_requested",
    "session_title", "session_update", "session_message", "permission_requested", "permission_resolved",
    "turn_started", "turn_ended", "session_config", "terminal_started", "terminal_output", "terminal_exited",
    "elicitation_requested", "elicitation_resolved", "elicitation_completed",
    "caught_up", "heartbeat"]
OptionId = Annotated[str, Field(min_length=1, max_length=200)]
OptionValue = Annotated[str, Field(max_length=1000)] | bool


# -- params ----------------------------------------------------------------------------------------------
class Params(BaseModel):
    # Built at a method's first call, not at import: a restart listens sooner, and most methods are never called
    # in a process's life (tests/test_import_cost.py).
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class NoParams(Params):
    pass


class SessionParams(Params):
    session_id: str = Field(min_length=1, max_length=200, description="the session's id (`s-…`), or its name")


# A session's name: what an owner calls it instead of its id (never of an id's form, so the two cannot be confused).
SESSION_ID_PATTERN = r"^s-[0-9a-f]{32}$"
SESSION_ID = re.compile(SESSION_ID_PATTERN)
SessionName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                                   description="letters, digits, '.', '_', '-', not of an id's form (s- and 32 hex "
                                               "digits); unique among your sessions")]


class WorktreeSpec(Params):
    repo: str = Field(min_length=1, max_length=4096, description="the top directory of a git repository, inside a "
                      "workspace root")
    base: str | None = Field(default=None, min_length=1, max_length=200, description="the branch, tag or commit "
                             "the worktree starts from; default: the repository's HEAD")
    branch: str | None = Field(default=None, min_length=1, max_length=200, description="the new branch the "
                               "worktree is on; default: acp/<name or session id>")


class StartParams(Params):
    agent: str | None = Field(default=None, min_length=1, max_length=200,
                              description="agent profile id; default: the gateway's default agent")
    cwd: str | None = Field(default=None, min_length=1, max_length=4096, description="absolute directory, inside a "
                            "workspace root (required unless `worktree` is given)")
    worktree: WorktreeSpec | None = Field(default=None, description="run the session in a git worktree of its own, "
                                          "made for it from `repo` on a new branch: its cwd (docs/worktrees.md)")
    host: str | None = Field(default=None, min_length=1, max_length=300, description="run its agent on this remote "
                             "host: the name (or ssh:// URL) of one the operator configured (docs/remote-hosts.md); "
                             "`cwd` is then a directory there. Default: the profile's, else the gateway's machine")
    description: str | None = Field(default=None, max_length=1_000_000,
                                    description="the task: sent as the first prompt on the first launch")
    title: str | None = Field(default=None, max_length=1000)
    name: SessionName | None = Field(default=None, description="a name for the session, accepted wherever its id "
                                     "is (unique among your sessions)")
    task_id: str | None = Field(default=None, min_length=1, max_length=200,
                                description="one of your task ids (created if new); default: a new task")
    wait_ready: bool = Field(default=False, description="answer once the agent is ready")
    config: dict[OptionId, OptionValue] | None = Field(
        default=None, max_length=64, description="choices by option id (`mode` and `model` name those), applied "
        "once the agent is up and re-applied after every restore; over the profile's")
    mcp_servers: list[dict[str, Any]] | None = Field(
        default=None, max_length=16, description="ACP McpServer objects (stdio only where your configuration allows "
        "it); env and header values are never shown again")
    additional_directories: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        default=None, max_length=32, description="absolute directories the agent may also work in (the workspace "
        "rules of cwd apply)")


class SetConfigOptionParams(SessionParams):
    config_id: OptionId = Field(description="the option's id (from the view's config.options)")
    value: OptionValue | None = Field(description="one of a select's values, or true/false for a boolean; null "
                                      "forgets the choice (the agent keeps its value, and no restore sets it again)")


class SetModeParams(SessionParams):
    mode_id: OptionId = Field(description="one of the mode option's values")


class ResumeParams(SessionParams):
    wait_ready: bool = True


class RecoverParams(SessionParams):
    action: Literal["retry", "fresh_start"]


class PromptParams(SessionParams):
    prompt: str | list[dict[str, Any]] = Field(min_length=1, description="text, or ACP content blocks")
    meta: dict[str, Any] | None = Field(default=None, description="given to the agent unchanged as the "
                                        "`session/prompt` request's `_meta`")


class ListParams(Params):
    states: list[SessionStateName] | None = None
    cwd: str | None = Field(default=None, min_length=1, max_length=4096, description="only sessions in this "
                            "working directory (as started)")
    limit: int = Field(default=50, ge=1, le=500)
    cursor: str | None = Field(default=None, max_length=100, description="a `next_cursor` from the page before")


class SubscribeParams(Params):
    since: int | None = Field(default=None, ge=0, le=MAX_ID,
                              description="replay the events after this id first; default: from now")
    session_id: str | None = Field(default=None, min_length=1, max_length=200, description="only this session")
    batch: bool = Field(default=False, description="a backlog may arrive as one JSON array of notifications "
                        "(many JSON-RPC clients reject those: off by default)")


class PingParams(Params):
    heartbeat: float | None = Field(default=None, ge=0.2, le=300, description="seconds between this client's pings "
                                    "from now on: a connection that sends nothing for 3 of them is closed (4408); "
                                    "default: no promise, and the connection lives while the network says it does")


class UnsubscribeParams(Params):
    subscription_id: str = Field(min_length=1, max_length=100)


class PermissionParams(SessionParams):
    request_id: str = Field(min_length=1, max_length=100)
    option_id: str | None = Field(default=None, min_length=1, max_length=500)
    cancelled: bool = False


class AuthenticateParams(SessionParams):
    method_id: str = Field(min_length=1, max_length=200, description="one of the session's `config.auth.methods`")
    values: dict[str, Annotated[str, Field(max_length=32768)]] | None = Field(
        default=None, max_length=20, description="an env_var method's variables and their values: kept for your "
        "agents of this profile, never shown again")


class ElicitationParams(SessionParams):
    request_id: str = Field(min_length=1, max_length=100)
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = Field(default=None, description="with accept of a form: the answer, an object "
                                           "that validates against the requested schema")


class HistoryParams(SessionParams):
    after: int = Field(default=0, ge=0, le=MAX_ID, description="an entry id: the page starts after it")
    limit: int = Field(default=100, ge=1, le=1000)


class EventsParams(SessionParams):
    after: int = Field(default=0, ge=0, le=MAX_ID, description="an event id: the page starts after it")
    limit: int = Field(default=500, ge=1, le=2000)


class TitleParams(SessionParams):
    title: str = Field(max_length=1000)


class DeleteParams(SessionParams):
    discard: bool = Field(default=False, description="a worktree session: delete its branch too (its worktree "
                          "goes either way)")


class DiffParams(SessionParams):
    against: Annotated[int, Field(ge=1, le=MAX_ID)] | Literal["base", "head"] | None = Field(
        default=None, description="a checkpoint's number, `base` (a worktree's base; else the first checkpoint) or "
        "`head` (the commit checked out); default: base")


class RewindParams(SessionParams):
    checkpoint: int = Field(ge=1, le=MAX_ID, description="the checkpoint's number (task.session.checkpoints)")


class ForkParams(SessionParams):
    title: str | None = Field(default=None, max_length=1000,
                              description="default: the original's, marked (fork); untitled: fork of NAME-OR-ID")
    name: SessionName | None = Field(default=None, description="a name for the new session")


# -- results ---------------------------------------------------------------------------------------------
class Result(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built only for the OpenRPC document


class SessionSummary(Result):
    """A session as `task.session.list` shows it; one session's view adds `config`."""

    session_id: str
    name: str | None = Field(description="the name given at start, accepted wherever the id is")
    forked_from: str | None = Field(default=None, description="the session this one was forked from "
                                    "(task.session.fork)")
    task_id: str
    agent: str
    agent_version: str | None = Field(default=None, description="the installed version of the agent this session "
                                      "runs (an agent added from the ACP registry; null for others): kept across "
                                      "restores, changed only by a fresh restart")
    cwd: str
    worktree: WorktreeView | None = Field(default=None, description="its own git worktree, when it was started with "
                                          "one (docs/worktrees.md)")
    host: str | None = Field(default=None, description="the remote host its agent runs on, by its configured name "
                             "(docs/remote-hosts.md); null: the gateway's machine")
    title: str | None
    state: SessionStateName
    task_state: TaskStateName
    error_message: str | None
    is_agent_running: bool
    has_resume_token: bool
    acp_session_id: str | None = Field(description="the ACP session id the agent knows (the resume token)")
    needs_resume: bool = Field(description="its agent is not running and a resume (or a prompt) brings it back, by "
                               "the status rules; task.session.status also weighs a cluster's other nodes")
    resume_reason: ResumeReasonName
    created_at: float
    updated_at: float


class Chosen(Result):
    value: str | bool
    by: Literal["user", "agent", "profile"] = Field(description="who chose it: a frontend (or a start), the agent's "
                                                    "own change, or the agent profile's default")


class Unapplied(Result):
    kind: Literal["option", "mcp_server", "directory"]
    id: str = Field(description="the option's id, the MCP server's name, or the directory")
    value: str | bool
    reason: str = Field(description="option_not_offered, value_not_offered, wrong_type, agent_refused, not_taken, "
                        "not_advertised, refused")
    message: str
    offered: list[str] = Field(description="what the agent offers instead: option ids, values, or MCP transports")


class McpServerView(Result):
    """An MCP server as shown: names of its env variables and headers, never their values."""

    name: str
    type: Literal["stdio", "http", "sse"]
    command: str | None = None
    args: list[str] | None = None
    env: list[str] | None = None
    url: str | None = Field(default=None, description="without user info or query")
    headers: list[str] | None = None


class SignInMethod(Result):
    id: str
    name: str
    description: str | None
    kind: str = Field(description="agent (the agent signs in itself), env_var (it reads `vars` from its "
                      "environment: give their values) or terminal (a login program)")
    vars: list[str] | None = None
    args: list[str] | None = None
    env: dict[str, str] | None = None
    command: str | None = Field(default=None, description="a terminal method's program, when the agent names one")


class AuthNeeded(Result):
    methods: list[SignInMethod]
    reason: str = Field(description="what the agent said")


class ConfigView(Result):
    options: list[dict[str, Any]] = Field(description="ACP SessionConfigOption objects: the agent's configOptions, "
                                          "plus its modes and legacy models in that shape where no option covers them")
    modes: dict[str, Any] | None = Field(description="the agent's SessionModeState, as it sent it")
    models: dict[str, Any] | None = Field(description="the agent's legacy SessionModelState, as it sent it")
    chosen: dict[str, Chosen] = Field(description="what is re-applied after every restore, by option id")
    unapplied: list[Unapplied] = Field(description="what the last set-up could not give the agent, and why")
    commands: list[dict[str, Any]] = Field(description="the agent's slash commands (ACP AvailableCommand objects)")
    usage: dict[str, Any] | None = Field(description="the agent's last usage_update: used, size, cost")
    mcp_servers: list[McpServerView]
    additional_directories: list[str]
    auth: AuthNeeded | None = Field(default=None, description="set while the agent asks to be signed in: answer "
                                    "with task.session.authenticate")
    can_fork: bool = Field(default=False, description="the agent's last initialize advertised session/fork: "
                           "task.session.fork makes a new session with this one's conversation")
    agent_info: dict[str, Any] | None = Field(default=None, description="what the agent said of itself in its "
                                              "last initialize (ACP agentInfo: name, title, version), as it said it")


class WorktreeView(Result):
    repo: str = Field(description="the repository it was made from")
    path: str = Field(description="the worktree: the session's cwd")
    branch: str
    base: str = Field(description="the ref it started from, as given (or the commit)")


class FileChangeView(Result):
    path: str
    status: Literal["A", "M", "D", "T"] = Field(description="added, modified, deleted, type changed")
    added: int | None = Field(description="lines added (null: a binary file)")
    deleted: int | None


class DiffView(Result):
    against: dict[str, Any] = Field(description="what the files are compared with: {base: commit}, {checkpoint: n} "
                                    "or {head: true}")
    files: list[FileChangeView]
    patch: str = Field(description="the unified diff (git's), cut at 2 MiB")
    truncated: bool = Field(description="the patch was cut")


class CheckpointView(Result):
    checkpoint: int
    turn: int | None = Field(description="the turn_started event it was taken before (null: taken before a rewind)")
    at: float
    kind: Literal["turn", "rewind"] = Field(description="turn: at the start of a turn; rewind: the files as they "
                                            "were just before a rewind (rewinding to it undoes that rewind)")
    prompt: str = Field(description="the start of the turn's prompt")
    files_changed: int | None = Field(description="files that differ from this checkpoint to the next (the last: "
                                      "to the files now)")


class CheckpointsView(Result):
    checkpoints: list[CheckpointView] = Field(description="oldest first (at most the newest 500)")


class RewindView(Result):
    checkpoint: int
    turn: int | None
    files: list[FileChangeView] = Field(description="what the rewind changed")
    undo_checkpoint: int = Field(description="a checkpoint of the files just before the rewind")


class MergeView(Result):
    merged: bool = Field(description="false: the branch had nothing its base lacks (no merge commit made)")
    commit: str = Field(description="the merge commit, now the base branch's head (not merged: the base's head)")
    branch: str
    base: str
    checkout: str | None = Field(description="where the base branch is checked out (it moved with it), if anywhere")


class SessionView(SessionSummary):
    config: ConfigView


class PermissionOptionView(Result):
    option_id: str
    name: str
    kind: str = Field(description="ACP's PermissionOptionKind: allow_once, allow_always, reject_once, reject_always")


class PendingPermission(Result):
    request_id: str = Field(description="answer it with task.session.permission.respond")
    title: str | None = Field(description="the tool call's title, as the agent gave it")
    tool_call_id: str | None
    options: list[PermissionOptionView] = Field(description="what it may be answered with")


class PendingElicitation(Result):
    request_id: str = Field(description="answer it with task.session.elicitation.respond")
    title: str = Field(description="the agent's message")
    mode: Literal["form", "url"]
    requested_schema: dict[str, Any] | None = Field(default=None, description="form: the JSON Schema of the answer")
    url: str | None = Field(default=None, description="url: the page to open")


class StatusView(SessionView):
    needs_resume: bool
    is_resumable: bool
    resume_reason: ResumeReasonName
    pending_permissions: list[PendingPermission] = Field(description="the agent's permission requests waiting for "
                                                         "an answer, oldest first")
    pending_elicitations: list[PendingElicitation] = Field(default_factory=list, description="the agent's questions "
                                                           "still open (a live session's), oldest first")


class ResumeView(SessionView):
    already_running: bool
    how: str | None = Field(default=None, description="how the agent came back (restored by session/resume or "
                            "load, a fresh session and why) or why it could not; null when it was already running "
                            "or not waited for")


class PromptResult(Result):
    stop_reason: str | None = Field(description="the agent's stop reason (`end_turn`, `cancelled`, …)")


class SessionPage(Result):
    sessions: list[SessionSummary]
    next_cursor: str | None
    event_cursor: int = Field(description="subscribe from this id to miss nothing after this page was read")


class HistoryItem(Result):
    id: int
    kind: str = Field(description="`user_message`, `agent_message`, `tool_call`, `tool_result`, `turn_interrupted`, "
                      "`rewind` (the files were put back as at a checkpoint: its number is `name`)")
    name: str
    content: str
    ts: float


class HistoryPage(Result):
    entries: list[HistoryItem]
    next: int | None


class Subscribed(Result):
    subscription_id: str
    cursor: int


class PermissionAnswer(Result):
    request_id: str
    outcome: dict[str, Any] = Field(description="what the agent was told: the ACP permission outcome")


class ElicitationAnswer(Result):
    request_id: str
    action: Literal["accept", "decline", "cancel"] = Field(description="what the agent was told (never the content)")


class LastCheck(Result):
    at: float = Field(description="when (Unix seconds)")
    verdict: Literal["conformant", "not_conformant", "not_shown"]
    counts: dict[str, int] = Field(description="checks by result: pass, fail, blocked, inconclusive, skip, info")


class AgentInfo(Result):
    id: str
    name: str
    host: str | None = Field(default=None, description="the remote host its sessions run on unless a start names "
                             "another (its profile's `host`; docs/remote-hosts.md); null: the gateway's machine")
    native_session_resume: bool
    history_context_injection: bool
    command_found: bool = Field(description="the agent itself is on this machine (not merely npx or uvx)")
    availability: Literal["installed", "downloads_on_first_start", "not_found"] = Field(
        description="installed; or a package runner (npx, uvx…) fetches it at its first start, which needs the "
                    "network; or neither is there")
    auto_resume: bool = Field(description="frontends may resume its sessions on their own (off for paid agents)")
    version: str | None = Field(default=None, description="the installed version new sessions start with (an agent "
                                "added from the ACP registry; null for others)")
    installed_versions: list[str] = Field(default_factory=list, description="every version of it installed "
                                          "(sessions keep the one they started with)")
    auth_state: Literal["signed_in", "needs_sign_in", "unknown", "not_probed"] | None = Field(
        default=None, description="yours: needs_sign_in until a variable that signs it in is set (its profile's env, "
        "or a value you gave it) or it signed you in (a method, a turn it answered), and again after it asked to be "
        "signed in; else, for an agent added from the ACP registry, what its last probe found; null when nothing "
        "is known")
    sign_in_vars: list[str] = Field(default_factory=list, description="the variables that sign it in (names, never "
                                    "values): its profile's sign_in_vars, its registry entry's, its own env_var "
                                    "methods'")
    last_check: LastCheck | None = Field(default=None, description="its last conformance checks")


class RemoteHostInfo(Result):
    name: str = Field(description="what a start's `host` names")
    workspace_roots: list[str] = Field(description="where on it your sessions may run: a cwd there lies inside one")


class GatewayInfo(Result):
    version: str
    protocol_version: int
    owner: str
    default_agent: str
    agents: list[AgentInfo]
    workspace_roots: list[str] = Field(description="where your sessions may run: a cwd must lie inside one")
    remote_hosts: list[RemoteHostInfo] = Field(default_factory=list, description="the remote hosts your sessions may "
                                               "run on (`host` of task.session.start; docs/remote-hosts.md)")
    instance_id: str = Field(description="this gateway process's id, new at every start: a client that sees it "
                             "change knows the gateway restarted (sessions whose agent it ran need a resume)")


class Pong(Result):
    heartbeat: float | None = Field(description="the interval this connection promised, in seconds (null: none)")
    cursor: int = Field(description="your journal's head now: events up to it exist, so a client whose cursor is "
                                    "behind it and sees nothing arrive knows its stream is stuck")


class Event(Result):
    """The params of a `task.session.event` notification."""

    id: int | None = Field(description="per owner, from 1, no gaps; null for caught_up, heartbeat and re-offers")
    type: EventTypeName
    session_id: str | None
    task_id: str | None
    ts: float
    data: dict[str, Any]


class EventsPage(Result):
    events: list[Event] = Field(description="the session's journal events, oldest first, as subscribers got them")
    next: int | None = Field(description="the `after` of the next page; null once the page reaches `cursor`")
    cursor: int = Field(description="the journal's head when this was read: a subscription from it misses nothing")
    complete: bool = Field(description="the journal still holds the session's first event (false: older events "
                                       "were pruned by retention; task.session.history has what they said)")


@dataclass(frozen=True)
class MethodSpec:
    params: type[Params]
    result: type[Result] | None  # None: the result is null
    summary: str


METHODS: dict[str, MethodSpec] = {
    "gateway.info": MethodSpec(NoParams, GatewayInfo, "The gateway's version, your owner name and the agents"),
    "gateway.ping": MethodSpec(PingParams, Pong, "A heartbeat: answered at once; with `heartbeat`, the gateway "
                               "closes the connection once the client misses three"),
    "task.session.start": MethodSpec(StartParams, SessionView, "Start a session (a new agent)"),
    "task.session.status": MethodSpec(SessionParams, StatusView, "A session and whether it needs a resume"),
    "task.session.resume": MethodSpec(ResumeParams, ResumeView, "Bring the session's agent back"),
    "task.session.recover": MethodSpec(RecoverParams, ResumeView, "Retry a failed restore, or start fresh"),
    "task.session.prompt": MethodSpec(PromptParams, PromptResult, "Send a prompt; answers when the turn ends"),
    "task.session.cancel_turn": MethodSpec(SessionParams, SessionView, "Stop the running turn"),
    "task.session.cancel": MethodSpec(SessionParams, SessionView, "End the session for good"),
    "task.session.list": MethodSpec(ListParams, SessionPage, "Your sessions, newest first"),
    "task.session.get": MethodSpec(SessionParams, SessionView, "One session"),
    "task.session.history": MethodSpec(HistoryParams, HistoryPage, "What the session recorded, oldest first"),
    "task.session.events": MethodSpec(EventsParams, EventsPage, "The session's events from the journal, oldest "
                                      "first: what a frontend renders its transcript from"),
    "task.session.set_title": MethodSpec(TitleParams, SessionView, "Rename a session"),
    "task.session.set_config_option": MethodSpec(SetConfigOptionParams, SessionView,
                                                 "Set one of the agent's options (model, mode, …) and keep it"),
    "task.session.set_mode": MethodSpec(SetModeParams, SessionView, "Set the session's mode and keep it"),
    "task.session.delete": MethodSpec(DeleteParams, None, "Delete a session and its history (and its worktree)"),
    "task.session.diff": MethodSpec(DiffParams, DiffView, "What the session changed in its files: against its "
                                    "worktree's base, or a checkpoint"),
    "task.session.checkpoints": MethodSpec(SessionParams, CheckpointsView, "The session's checkpoints: its files "
                                           "at the start of each turn"),
    "task.session.rewind": MethodSpec(RewindParams, RewindView, "Put the session's files back as at a checkpoint "
                                      "(its agent is told at its next prompt)"),
    "task.session.worktree.merge": MethodSpec(SessionParams, MergeView, "Merge the session's worktree branch (its "
                                              "files as they are now) into its base branch"),
    "task.session.fork": MethodSpec(ForkParams, SessionView, "A new session with this one's conversation so far "
                                    "(ACP session/fork, where the agent offers it); the original goes on"),
    "task.session.subscribe": MethodSpec(SubscribeParams, Subscribed, "Receive task.session.event notifications"),
    "task.session.unsubscribe": MethodSpec(UnsubscribeParams, None, "Stop a subscription"),
    "task.session.permission.respond": MethodSpec(PermissionParams, PermissionAnswer,
                                                  "Answer a permission request"),
    "task.session.authenticate": MethodSpec(AuthenticateParams, SessionView, "Sign the session's agent in with one "
                                            "of the methods it offers, and start it again"),
    "task.session.logout": MethodSpec(SessionParams, SessionView, "Sign the session's agent out (ACP `logout` where "
                                      "it serves it) and forget what you gave its profile's agents to sign in"),
    "task.session.elicitation.respond": MethodSpec(ElicitationParams, ElicitationAnswer,
                                                   "Answer an agent's question (an elicitation): accept with "
                                                   "content that fits its schema, decline or cancel"),
}


MAX_NESTING = 64  # of a call's params, on both edges: deeper is refused (-32602) before anything encodes it again


def too_deep(value: Any, limit: int = MAX_NESTING) -> bool:
    """More than `limit` arrays and objects inside one another (a `_meta` 300 deep parsed, but encoding it for the
    agent hit orjson's recursion limit: an internal error for a bad input)."""
    level: list[tuple[Any, int]] = [(value, 0)]
    while level:
        item, depth = level.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            level.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            level.extend((v, depth + 1) for v in item)
    return False
