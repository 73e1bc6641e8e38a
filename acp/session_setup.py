"""The restore driver: performs the steps `acp.restore` decides (the calls of `plan_restore`, and the sign-ins of
`authenticate_first` and `authenticate_then_retry`), and traces them.

Spans: `acp.session.restore` around the whole negotiation, with one child per request really sent
(`acp.session.resume`, `acp.session.load`, `acp.session.new`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from pydantic import ValidationError

from .client import AcpClient
from .errors import INTERNAL_ERROR, RequestTimeout, RpcError, TransportError
from .models import NewSessionResponse
from .restore import (
    Call,
    Failure,
    FailureClass,
    FailureKind,
    Finished,
    Outcome,
    RestoreAttempt,
    RestoreInputs,
    RestoreMethod,
    authenticate_first,
    authenticate_then_retry,
    plan_name,
    plan_restore,
)

tracer = trace.get_tracer("acp")


@dataclass
class RestoreResult:
    plan: str
    outcome: Outcome
    failure_class: FailureClass | None
    attempts: list[RestoreAttempt] = field(default_factory=list)
    session_id: str | None = None
    response: dict[str, Any] | None = None
    rule: str = ""
    auth_error: str | None = None  # what `authenticate` answered when it failed (the session's failure follows)

    @property
    def settled_by(self) -> str:
        """The method that settled the outcome (the last one sent), or "none" when nothing was sent."""
        return self.attempts[-1].method.value if self.attempts else "none"

    @property
    def replayed(self) -> bool:
        return any(a.method is RestoreMethod.LOAD and a.succeeded for a in self.attempts)

    @property
    def last_failure(self) -> Failure | None:
        failures = [a.failure for a in self.attempts if a.failure is not None]
        return failures[-1] if failures else None

    def describe_failure(self) -> str:
        failure = self.last_failure
        if failure is None:
            return ""
        said = f"{failure.message} (code {failure.code})" if failure.kind is FailureKind.ERROR else (
            failure.message or failure.kind.value)
        return f"authenticate failed: {self.auth_error}; then {said}" if self.auth_error else said

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "attempts": [
                {
                    "method": a.method.value,
                    "error": None
                    if a.failure is None
                    # A transport failure has no JSON-RPC code: it is reported as an internal error.
                    else {"code": a.failure.code if a.failure.code is not None else INTERNAL_ERROR,
                          "message": a.failure.message},
                }
                for a in self.attempts
            ],
            "outcome": self.outcome.value,
            "failure_class": self.failure_class.value if self.failure_class else None,
        }


async def establish_session(
    client: AcpClient,
    *,
    native_session_resume: bool,
    resume_token: str | None,
    cwd: str,
    mcp_servers: Sequence[dict[str, Any]] = (),
    additional_directories: Sequence[str] = (),
    auth_method: str | None = None,
    environ: Mapping[str, str] | None = None,
    cancel: asyncio.Event | None = None,
) -> RestoreResult:
    """Negotiate by docs/restore.md and return what happened. Never raises for agent failures. `mcp_servers` and
    `additional_directories` go with every call (ACP wants them again on load and resume); give directories only
    to an agent that advertises them."""
    if client.init is None:
        raise RuntimeError("establish_session needs an initialized client")
    caps = client.init.agentCapabilities
    inputs = RestoreInputs(
        native_session_resume=native_session_resume,
        resume_token=resume_token or None,
        advertises_resume=caps.can_resume,
        advertises_load=caps.can_load,
    )
    env = os.environ if environ is None else environ
    cancel = cancel or asyncio.Event()
    result = RestoreResult(plan=plan_name(inputs), outcome=Outcome.NEW, failure_class=None)
    with tracer.start_as_current_span("acp.session.restore") as span:
        span.set_attribute("acp.restore.plan", result.plan)
        span.set_attribute("acp.restore.has_token", bool(inputs.resume_token))
        auth_tried = False
        first = authenticate_first(auth_method)
        if first is not None:
            try:
                await client.authenticate(first.method_id)
            except (RpcError, TransportError) as err:
                result.auth_error = str(err)
            auth_tried = True
        while True:
            step = plan_restore(inputs, tuple(result.attempts), cancel.is_set())
            if isinstance(step, Finished):
                result.outcome, result.failure_class, result.rule = step.outcome, step.failure_class, step.rule
                break
            attempt, response, auth_tried = await _perform(
                client, step, inputs, cwd, mcp_servers, additional_directories, auth_method, env, cancel, auth_tried
            )
            result.attempts.append(attempt)
            if attempt.succeeded:
                result.response = response
                if step.method is RestoreMethod.NEW:
                    result.session_id = (response or {}).get("sessionId")
                else:
                    result.session_id = inputs.resume_token
        span.set_attribute("acp.restore.outcome", result.outcome.value)
        if result.failure_class is not None:
            span.set_attribute("acp.restore.failure_class", result.failure_class.value)
        if result.outcome in (Outcome.PRESERVED, Outcome.FAILED):
            span.set_status(Status(StatusCode.ERROR, result.describe_failure()))
    return result


async def _perform(
    client: AcpClient,
    step: Call,
    inputs: RestoreInputs,
    cwd: str,
    mcp_servers: Sequence[dict[str, Any]],
    additional_directories: Sequence[str],
    auth_method: str | None,
    environ: Mapping[str, str],
    cancel: asyncio.Event,
    auth_tried: bool,
) -> tuple[RestoreAttempt, dict[str, Any] | None, bool]:
    params: dict[str, Any] = {"cwd": cwd, "mcpServers": list(mcp_servers)}
    if additional_directories:
        params["additionalDirectories"] = list(additional_directories)
    if step.method is not RestoreMethod.NEW:
        params["sessionId"] = inputs.resume_token
    span_name = "acp." + step.method.value.replace("/", ".")
    with tracer.start_as_current_span(span_name) as span:
        span.set_attribute("acp.method", step.method.value)
        span.set_attribute("acp.restore.rule", step.rule)
        if step.method is RestoreMethod.LOAD:
            # Updates from here until the next prompt are history being replayed, whether the
            # agent sends them before its answer (as the spec says) or after it.
            client.replaying = True
        elif step.method is RestoreMethod.NEW:
            client.replaying = False
        while True:
            try:
                raw = await _cancellable(client.request(step.method.value, params), cancel)
                response = _validate_response(step.method, raw)
                return RestoreAttempt(step.method), response, auth_tried
            except RpcError as err:
                retry = None if client.init is None else authenticate_then_retry(
                    err.code, auth_tried, client.init.authMethods, auth_method, environ
                )
                if retry is not None:  # AU2: sign in, then the same call once more
                    auth_tried = True
                    try:
                        await client.authenticate(retry.method_id)
                    except RpcError as auth_err:
                        err = auth_err
                    except TransportError as exc:
                        failure = Failure(FailureKind.TRANSPORT, message=str(exc), auth_tried=True)
                        return _failed(span, step, failure, client), None, auth_tried
                    else:
                        continue
                failure = Failure(FailureKind.ERROR, err.code, err.message, err.data, auth_tried)
            except asyncio.CancelledError:
                if not cancel.is_set():
                    raise
                failure = Failure(FailureKind.CANCELLED, message="restore cancelled by the gateway")
            except RequestTimeout as exc:
                failure = Failure(FailureKind.TIMEOUT, message=str(exc))
            except TransportError as exc:
                failure = Failure(FailureKind.TRANSPORT, message=str(exc))
            return _failed(span, step, failure, client), None, auth_tried


def _failed(span: trace.Span, step: Call, failure: Failure, client: AcpClient) -> RestoreAttempt:
    if step.method is RestoreMethod.LOAD:
        client.replaying = False
    span.set_attribute("acp.error.kind", failure.kind.value)
    if failure.code is not None:
        span.set_attribute("acp.error.code", failure.code)
    span.set_status(Status(StatusCode.ERROR, failure.message))
    return RestoreAttempt(step.method, failure)


def _validate_response(method: RestoreMethod, raw: Any) -> dict[str, Any]:
    if raw is None and method is not RestoreMethod.NEW:
        return {}
    if not isinstance(raw, dict):
        raise RpcError(INTERNAL_ERROR, f"{method.value} answered a non-object result: {raw!r:.100}")
    if method is RestoreMethod.NEW:
        try:
            NewSessionResponse.model_validate(raw)
        except ValidationError as exc:
            raise RpcError(INTERNAL_ERROR, f"session/new answer without a sessionId: {exc.errors()[0]['msg']}") from exc
    return raw


async def _cancellable(coro: Any, cancel: asyncio.Event) -> Any:
    """Await `coro` unless `cancel` is set first; then raise CancelledError (with cancel set)."""
    if cancel.is_set():
        coro.close()
        raise asyncio.CancelledError
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if task in done:
        return task.result()
    task.cancel()
    raise asyncio.CancelledError
