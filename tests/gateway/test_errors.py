"""gateway.errors: every constructor's `data` has the one shape its code promises; each code is defined once."""

from __future__ import annotations

import re

import pytest

from gateway import error_codes, errors
from gateway.errors import ERROR_DATA, GatewayError
from tests.support.paths import REPO

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
    errors.config_refused("s-1", "model", "x", "value_not_offered", "option \"model\" has no value \"x\"", ["a", "b"]),
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


ROOT = REPO


def test_each_code_is_defined_once() -> None:
    """Every side names a code by gateway/error_codes.py's constants (the ACP side's own codes are acp/errors.py's):
    no other module of the gateway assigns one, and the TypeScript client's copy holds the same names and numbers."""
    assignment = re.compile(r"^\s*([A-Z][A-Z_]*)\s*=\s*-32\d{3}\b", re.M)
    elsewhere = {str(path.relative_to(ROOT)): assignment.findall(path.read_text())
                 for path in (ROOT / "gateway").rglob("*.py") if path.name != "error_codes.py"}
    assert {path: names for path, names in elsewhere.items() if names} == {}
    ts = ROOT / "clients" / "typescript" / "src"
    constants = re.compile(r"^(?:export )?const ([A-Z][A-Z_]*) = (-32\d{3});", re.M)
    scripts = [*ts.glob("*.ts"), *(ROOT / "gateway" / "ui").glob("*.js")]  # the web UI takes them from the client
    ts_elsewhere = {path.name: constants.findall(path.read_text()) for path in scripts
                    if path.name not in ("codes.ts", "client.js")}
    assert {path: names for path, names in ts_elsewhere.items() if names} == {}
    typescript = {name: int(code) for name, code in constants.findall((ts / "codes.ts").read_text())}
    assert typescript == {name: getattr(error_codes, name) for name in error_codes.__all__}


def test_the_server_names_the_wires_codes() -> None:
    assert {name: getattr(errors, name) for name in error_codes.__all__} == {
        name: getattr(error_codes, name) for name in error_codes.__all__}
    assert set(errors.ERROR_MEANINGS) == {getattr(error_codes, name) for name in error_codes.__all__}
