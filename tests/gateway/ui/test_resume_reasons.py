"""The resume reasons' words: one table (gateway/clients/resume_reasons.py), the web UI's copy generated from it."""

from __future__ import annotations

import typing

import pytest

from gateway.api.contract import ResumeReasonName
from gateway.clients.resume_reasons import RESUME_REASONS, UI_MODULE, ui_module

pytestmark = pytest.mark.unit


def test_the_web_uis_copy_is_current() -> None:
    assert UI_MODULE.read_text() == ui_module(), (
        "gateway/ui/resume_reasons.js is stale: run `python -m gateway.clients.resume_reasons`")


def test_every_reason_a_frontend_shows_has_words() -> None:
    """Each reason the status view may carry, but those that need no explaining (running, ended)."""
    assert set(RESUME_REASONS) == set(typing.get_args(ResumeReasonName)) - {"agent_running", "terminal_state"}

