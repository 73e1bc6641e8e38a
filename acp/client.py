"""The ACP client: one agent process, one JSON-RPC connection, the client-side methods it serves.

This is where agent messages enter (`_on_notification`, `_on_request`) and where the client's
requests leave (`initialize`, `session_call`, `prompt`...). Decisions about restoring sessions are
not made here: see `acp.restore` (pure) and `acp.session_setup` (the driver).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import propagate, trace
from pydantic import ValidationError

from . import PROTOCOL_VERSION, fs
from .budget import RequestBudget
from .elicitation import Elicitation, check_request
from .errors import INVALID_PARAMS, METHOD_NOT_FOUND, ProtocolVersionError, RpcError, TransportError
from .framing import DEFAULT_MAX_LINE
from .jsonrpc import Connection
from .models import (
    InitializeResponse,
    PromptResponse,
    ReadTextFileRequest,
    RequestPermissionRequest,
    WriteTextFileRequest,
    parse_request,
)
from .offload import Offloader
from .process import AgentProcess, RunningAgent
from .terminals import TERMINAL_METHODS, TerminalHost, Terminals

tracer = trace.get_tracer("acp")

CLIENT_INFO = {"name": "acp-gateway", "title": "ACP session gateway", "version": "0.1.0"}
SUPPORTED_PROTOCOL_VERSIONS = frozenset({PROTOCOL_VERSION})

# (params of session/update, replay) -> None. Params are forwarded raw: unknown kinds included.
UpdateHandler = Callable[[dict[str, Any], bool], None]
class ElicitationHandler(Protocol):
    """Who puts an agent's elicitations to people: `ask` answers one (the ACP response), `completed` hears that a URL
    elicitation's out-of-band interaction finished."""

    async def ask(self, elicitation: Elicitation, params: dict[str, Any]) -> dict[str, Any]: ...

    def completed(self, params: dict[str, Any]) -> None: ...


# params of session/request_permission -> the `outcome` object to answer with.
PermissionHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
CANCELLED_OUTCOME: dict[str, Any] = {"outcome": "cancelled"}


async def _cancel_every_permission(params: dict[str, Any]) -> dict[str, Any]:
    return dict(CANCELLED_OUTCOME)


def _ignore_update(params: dict[str, Any], replay: bool) -> None:
    return None


@dataclass
class ClientOptions:
    request_timeout: float | None = None  # every request but prompts; None waits until the process dies
    prompt_timeout: float | None = None  # a turn may legitimately run for hours: no limit by default
    initialize_timeout: float = 60.0
    max_line: int = DEFAULT_MAX_LINE
    stop_grace: float = 2.0
    never_serve: tuple[str, ...] = ()  # paths the fs methods refuse even inside the cwd (besides /proc, /sys, /dev)
    file_timeout: float = 30.0  # a file read or write that takes longer answers the agent an error
    serve_files: bool = True  # the fs methods offered (False: the agent's files are not on this machine)
    tree_marker: str | None = None  # an entry of the agent's env unique to it: what carries it is stopped with it
    request_budget: RequestBudget | None = None  # the agent's requests that may wait for answers at once
    first_request_id: int = 0  # where this client's request ids start (a reattached hosted agent's are above)


class FileServer(Protocol):
    """Who reads and writes the agent's files when they are not on this machine (`fs/*`, by the same rules)."""

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str: ...

    async def write_text_file(self, path: str, content: str) -> None: ...


def traced(params: Any) -> Any:
    """`params` with the current trace context as `_meta.traceparent` (W3C Trace Context, as ACP's propagation RFD
    says), so the agent's spans join the gateway's trace; unchanged when nothing is traced, or when the caller's
    `_meta` already names a trace (it passes through as given)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier or not isinstance(params, dict):
        return params
    meta = params.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    for key in ("traceparent", "tracestate"):
        if key in carrier and key not in meta:
            meta[key] = carrier[key]
    return {**params, "_meta": meta}


def _pin(directory: str) -> fs.Root:
    """A directory pinned for the fs methods; one that cannot be opened (gone) stays a path, and the fs methods
    refuse what does not exist under it anyway."""
    try:
        return fs.PinnedRoot.open(directory)
    except OSError:
        return directory


def _unpin(roots: Sequence[fs.Root]) -> None:
    for root in roots:
        if isinstance(root, fs.PinnedRoot):
            with contextlib.suppress(OSError):
                root.close()


class AcpClient:
    def __init__(
        self,
        process: RunningAgent,
        *,
        cwd: str,
        on_update: UpdateHandler = _ignore_update,
        on_permission: PermissionHandler = _cancel_every_permission,
        on_ext_notification: Callable[[str, Any], None] | None = None,
        options: ClientOptions | None = None,
        terminal_host: TerminalHost | None = None,
        on_elicitation: ElicitationHandler | None = None,
    ) -> None:
        self.process = process
        # The agent's terminals, where the host serves them (then `terminal: true` in initialize); None: not offered.
        self.terminals = Terminals(terminal_host) if terminal_host is not None else None
        # Who puts an agent's `elicitation/create` to people (then offered in initialize), and hears `complete`.
        self.on_elicitation = on_elicitation
        self.cwd = os.path.realpath(cwd)
        # The session's directories, pinned now (see acp.fs): the fs methods never resolve them again.
        self.root: fs.Root = _pin(self.cwd)
        self._extra_roots: tuple[fs.Root, ...] = ()
        self.on_update = on_update
        self.on_permission = on_permission
        self.on_ext_notification = on_ext_notification
        self.options = options or ClientOptions()
        self.init: InitializeResponse | None = None
        self.replaying = False  # set while session/load replays history (see acp.session_setup)
        self.files = Offloader(timeout=self.options.file_timeout)
        # The agent's files served elsewhere (where it runs: an agent host on another machine), else here
        self.file_server: FileServer | None = None
        self.pending_permissions: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.unknown_methods: list[str] = []
        self.conn = Connection(
            process.stdout,
            process.stdin,
            on_request=self._on_request,
            on_notification=self._on_notification,
            max_line=self.options.max_line,
            name=f"agent {process.argv[0]} (pid {process.pid})",
            budget=self.options.request_budget,
            first_id=self.options.first_request_id,
        )
        self.conn.start()
        self._watch = asyncio.get_running_loop().create_task(self._watch_exit())

    @classmethod
    async def launch(
        cls,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str] | None = None,
        process_cwd: str | None = None,
        pass_fds: Sequence[int] = (),
        **kwargs: Any,
    ) -> AcpClient:
        """Start the agent and speak ACP to it; `cwd` is its sessions' directory, `process_cwd` (default: `cwd`)
        the one its process starts in (a sandbox's wrapper starts in / and gives the agent `cwd` inside)."""
        options = kwargs.get("options")
        process = await AgentProcess.spawn(argv, cwd=process_cwd or cwd, env=env, pass_fds=pass_fds,
                                           tree_marker=options.tree_marker if options is not None else None)
        return cls(process, cwd=cwd, **kwargs)

    async def _watch_exit(self) -> None:
        rc = await self.process.wait()
        if self.terminals is not None:  # an agent's terminals end with it
            await self.terminals.close()
        # stdout may still hold answers written just before exit: let the reader finish first.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.conn.wait_closed(), 1.0)
        self.conn.close(f"agent process exited with status {rc}")

    @property
    def serves_files(self) -> bool:
        return self.options.serve_files or self.file_server is not None

    # -- requests to the agent -----------------------------------------------------
    async def request(self, method: str, params: Any = None, timeout: float | None = None) -> Any:
        return await self.conn.request(method, traced(params), timeout=timeout or self.options.request_timeout)

    async def initialize(self) -> InitializeResponse:
        with tracer.start_as_current_span("acp.initialize") as span:
            raw = await self.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": {
                        "fs": {"readTextFile": self.serves_files, "writeTextFile": self.serves_files},
                        "terminal": self.terminals is not None,
                        # A client that runs terminals runs an agent's terminal login too (the gateway does).
                        **({"auth": {"terminal": True}} if self.terminals is not None else {}),
                        **({"elicitation": {"form": {}, "url": {}}} if self.on_elicitation is not None else {}),
                        # Boolean config options are relayed and set like selects (acp.session_config).
                        "session": {"configOptions": {"boolean": {}}},
                    },
                    "clientInfo": CLIENT_INFO,
                },
                timeout=self.options.initialize_timeout,
            )
            try:
                init = InitializeResponse.model_validate(raw)
            except ValidationError as exc:
                raise RpcError(INVALID_PARAMS, f"malformed initialize answer: {exc.errors()[0]['msg']}") from exc
            span.set_attribute("acp.protocol_version", init.protocolVersion)
            if init.protocolVersion not in SUPPORTED_PROTOCOL_VERSIONS:
                raise ProtocolVersionError(
                    f"agent speaks ACP protocol version {init.protocolVersion}; this gateway speaks "
                    f"{sorted(SUPPORTED_PROTOCOL_VERSIONS)}: upgrade the gateway or pin an older agent"
                )
            self.init = init
            return init

    async def authenticate(self, method_id: str) -> Any:
        with tracer.start_as_current_span("acp.authenticate") as span:
            span.set_attribute("acp.auth_method", method_id)
            return await self.request("authenticate", {"methodId": method_id})

    async def prompt(self, session_id: str, prompt: list[dict[str, Any]],
                     meta: dict[str, Any] | None = None, request_id: int | None = None) -> PromptResponse:
        """`session/prompt`; `meta` goes as its `_meta`, unchanged (the trace context added where it names none).
        `request_id`: the id it goes with (`conn.next_id()`, named before it is sent)."""
        self.replaying = False  # a turn starts: anything after this is live
        params: dict[str, Any] = {"sessionId": session_id, "prompt": prompt}
        if meta is not None:
            params["_meta"] = meta
        with tracer.start_as_current_span("acp.session.prompt"):
            raw = await self.conn.request("session/prompt", traced(params), timeout=self.options.prompt_timeout,
                                          request_id=request_id)
        return PromptResponse.model_validate(raw)

    async def prompt_answer(self, request_id: int | str) -> PromptResponse:
        """The answer to a `session/prompt` an earlier connection sent (a hosted agent's turn that outlived a
        gateway)."""
        self.replaying = False
        return PromptResponse.model_validate(await self.conn.answer_to(request_id))

    async def cancel(self, session_id: str) -> None:
        """ACP `session/cancel`, and every pending permission request answered `cancelled`."""
        for fut in list(self.pending_permissions.values()):
            if not fut.done():
                fut.set_result(dict(CANCELLED_OUTCOME))
        with contextlib.suppress(TransportError):
            await self.conn.notify("session/cancel", {"sessionId": session_id})

    async def close_session(self, session_id: str) -> Any:
        return await self.request("session/close", {"sessionId": session_id})

    async def delete_session(self, session_id: str) -> Any:
        return await self.request("session/delete", {"sessionId": session_id})

    async def fork_session(self, session_id: str, cwd: str, mcp_servers: list[dict[str, Any]],
                           additional_directories: list[str]) -> str:
        """`session/fork` (unstable): a new session in this agent with `session_id`'s conversation; its id."""
        params: dict[str, Any] = {"sessionId": session_id, "cwd": cwd, "mcpServers": mcp_servers}
        if additional_directories:
            params["additionalDirectories"] = additional_directories
        answer = await self.request("session/fork", params)
        forked = answer.get("sessionId") if isinstance(answer, dict) else None
        if not isinstance(forked, str) or not forked:
            raise RpcError(INVALID_PARAMS, f"the agent's answer to session/fork has no sessionId: {answer!r}")
        return forked

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None) -> Any:
        params: dict[str, Any] = {}
        if cwd is not None:
            params["cwd"] = cwd
        if cursor is not None:
            params["cursor"] = cursor
        return await self.request("session/list", params)

    @property
    def extra_roots(self) -> tuple[fs.Root, ...]:
        return self._extra_roots

    @extra_roots.setter
    def extra_roots(self, directories: tuple[str, ...]) -> None:
        """The session's additional directories, once sent to the agent: pinned as the cwd is."""
        _unpin(self._extra_roots)
        self._extra_roots = tuple(_pin(d) for d in directories)

    async def stop(self) -> int:
        if self.terminals is not None:
            await self.terminals.close()
        rc = await self.process.stop(self.options.stop_grace)
        self.conn.close(f"agent stopped (status {rc})")
        self._watch.cancel()
        _unpin((self.root, *self._extra_roots))
        self.root, self._extra_roots = self.cwd, ()
        return rc

    @property
    def alive(self) -> bool:
        return self.process.returncode is None and not self.conn.closed

    # -- messages from the agent ---------------------------------------------------
    def _on_notification(self, method: str, params: Any) -> None:
        if method == "session/update":
            if isinstance(params, dict):
                self.on_update(params, self.replaying)
            return
        if method == "elicitation/complete" and self.on_elicitation is not None:
            if isinstance(params, dict) and isinstance(params.get("elicitationId"), str):
                self.on_elicitation.completed(params)
            return
        if self.on_ext_notification is not None:
            self.on_ext_notification(method, params)

    async def _on_request(self, method: str, params: Any) -> Any:
        if method == "fs/read_text_file" and self.file_server is not None:  # served where the agent's files are
            read = parse_request(ReadTextFileRequest, params, method)
            return {"content": await self.file_server.read_text_file(read.path, read.line, read.limit)}
        if method == "fs/write_text_file" and self.file_server is not None:
            write = parse_request(WriteTextFileRequest, params, method)
            await self.file_server.write_text_file(write.path, write.content)
            return {}
        if method in ("fs/read_text_file", "fs/write_text_file") and not self.options.serve_files:
            raise RpcError(METHOD_NOT_FOUND, f"{method}: this client did not offer file access (its initialize said "
                           "readTextFile and writeTextFile false): the files are on the agent's machine, read and "
                           "write them there", {"method": method})
        if method == "fs/read_text_file":
            read = parse_request(ReadTextFileRequest, params, method)
            content = await self.files.run(f"reading {read.path}", fs.read_text_file, self.root, read.path,
                                           read.line, read.limit, self.options.never_serve, self.extra_roots)
            return {"content": content}
        if method == "fs/write_text_file":
            write = parse_request(WriteTextFileRequest, params, method)
            await self.files.run(f"writing {write.path}", fs.write_text_file, self.root, write.path, write.content,
                                 self.options.never_serve, self.extra_roots)
            return {}
        if method in TERMINAL_METHODS:
            if self.terminals is None:
                raise RpcError(METHOD_NOT_FOUND, f"{method}: this client did not offer terminals (its initialize "
                               "said terminal: false)", {"method": method})
            return await self.terminals.handle(method, params)
        if method == "elicitation/create":
            if self.on_elicitation is None:
                raise RpcError(METHOD_NOT_FOUND, f"{method}: this client did not offer elicitation", {"method": method})
            return await self.on_elicitation.ask(check_request(params), params)
        if method == "session/request_permission":
            parse_request(RequestPermissionRequest, params, method)
            return {"outcome": await self._ask_permission(params)}
        self.unknown_methods.append(method)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}", {"method": method})

    async def _ask_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        """Route to the callback; `cancel()` may answer first with `cancelled` (first answer wins)."""
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        key = id(waiter)
        self.pending_permissions[key] = waiter
        asker = asyncio.ensure_future(self.on_permission(params))

        def settle(task: asyncio.Future[dict[str, Any]]) -> None:
            if waiter.done():
                return
            if task.cancelled():
                waiter.set_result(dict(CANCELLED_OUTCOME))
            elif task.exception() is not None:
                waiter.set_exception(task.exception())  # type: ignore[arg-type]
            else:
                waiter.set_result(task.result())

        asker.add_done_callback(settle)
        try:
            return await waiter
        finally:
            self.pending_permissions.pop(key, None)
            if not asker.done():
                asker.cancel()
