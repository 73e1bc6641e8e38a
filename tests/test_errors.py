"""gateway.errors: every constructor's `data` has the one shape its code promises."""

from __future__ import annotations

import pytest

from gateway import errors
from gateway.errors import ERROR_DATA, GatewayError

CASES = [
    errors.invalid_params("cwd", "cwd must be an absolute path"),
    errors.internal_error("abc123"),
    errors.not_found("s-1"),
    errors.permission_not_found("s-1", "perm-1"),
    errors.subscription_not_found("sub-1"),
    errors.already_terminal("s-1", "CANCELLED"),
    errors.busy("s-1", "RUNNING"),
    errors.workspace_missing("s-1", "/gone"),
    errors.workspace_missing(None, "/gone"),
    errors.not_resumable("s-1", "CANCELLED", "session s-1 is CANCELLED: start a new session"),
    errors.limit_exceeded(3, "3 live sessions already", "max_live_sessions_per_owner"),
    errors.limit_exceeded(30, "30 starts in the last minute", "max_starts_per_minute_per_owner", retry_after=1.5),
    errors.agent_failed("s-1", "ref", "agent 'ref' failed the turn: boom", {"code": -32603, "message": "boom"}, False),
    errors.resync_required("cursor_ahead", "cursor 9 is ahead", head=3),
    errors.config_refused("s-1", "model", "x", "value_not_offered", "option 'model' has no value 'x'", ["a", "b"]),
    errors.config_refused("s-1", "model", "a", "agent_refused", "agent 'ref' refused model = 'a': no",
                          [], {"code": -32602, "message": "no"}),
]


@pytest.mark.parametrize("error", CASES, ids=lambda e: f"{e.code}:{e.message[:30]}")
def test_data_has_the_shape_of_its_code(error: GatewayError) -> None:
    assert error.data is not None
    assert frozenset(error.data) in ERROR_DATA[error.code]
    assert error.message  # says what happened and what to do


def test_codes_are_distinct() -> None:
    codes = [errors.UNAUTHORIZED, errors.NOT_FOUND, errors.ALREADY_TERMINAL, errors.BUSY, errors.WORKSPACE_MISSING,
             errors.RESYNC_REQUIRED, errors.NOT_RESUMABLE, errors.LIMIT_EXCEEDED, errors.AGENT_FAILED,
             errors.STORAGE_FAILED, errors.CONFIG_REFUSED]
    assert len(set(codes)) == len(codes)


def test_unexpected_tells_storage_faults_from_bugs(caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import sqlite3

    log = logging.getLogger("test.errors")
    full = errors.unexpected(log, "method x", sqlite3.OperationalError("database or disk is full"))
    assert (full.code, full.data) == (errors.STORAGE_FAILED, {"reason": "database or disk is full"})
    bug = errors.unexpected(log, "method x", KeyError("oops"))
    assert bug.code == errors.INTERNAL_ERROR and bug.data is not None
    records = {r.getMessage(): r.exc_info is not None for r in caplog.records}
    assert records == {"method x: the store refused a write: database or disk is full": False,  # one line
                       f"method x failed (error id {bug.data['error_id']})": True}  # with its traceback
