"""The launch's words by rule (gateway/runtime/launch_words.py): why a launch failed, how an agent came back."""

from __future__ import annotations

import pytest

from acp.restore import Outcome
from gateway.runtime.launch_words import (
    FAILURE_WORDS,
    RETURN_WORDS,
    FailureFacts,
    ReturnFacts,
    failure_rule,
    failure_said,
    return_rule,
    return_said,
)

pytestmark = pytest.mark.unit

FAILURES = [
    ("LW-1", FailureFacts("echo", "s-1", "initialize timed out"), "agent 'echo' failed to start: initialize timed out"),
    ("LW-2", FailureFacts("echo", "s-1", None, "not_found", "session/resume: -32002"),
     "agent 'echo' could not restore session s-1: not_found (session/resume: -32002); the saved session is kept — use "
     "task.session.recover with action 'retry' or 'fresh_start'"),
    ("LW-2", FailureFacts("echo", "s-1", None, "authentication", "auth_required", can_sign_in=True),
     "or sign in (task.session.authenticate)"),
    ("LW-3", FailureFacts("echo", None, None, "error", "session/new: -32603"),
     "agent 'echo' could not create a session: session/new: -32603"),
]


@pytest.mark.parametrize("rule,facts,words", FAILURES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(FAILURES)])
def test_a_failed_launch_says_why_by_its_rule(rule: str, facts: FailureFacts, words: str) -> None:
    assert failure_rule(facts) == rule
    assert words in failure_said(facts)


def back(outcome: Outcome, **facts: object) -> ReturnFacts:
    base: dict[str, object] = {"agent": "echo", "token": "s-1", "outcome": outcome, "session": "s-2",
                               "first_launch": False, "fresh_start": False, "native_session_resume": True}
    return ReturnFacts(**{**base, **facts})  # type: ignore[arg-type]


RETURNS = [
    (back(Outcome.FALLBACK_NEW, failure_class="not_found"), "LW-4", "warning",
     "The agent no longer knew session s-1 (not_found); a fresh session s-2 was started."),
    (back(Outcome.RESTORED, session="s-1", settled_by="session/load", replayed=True), "LW-5", "info",
     "Agent echo relaunched; session s-1 restored by session/load, which replayed the conversation."),
    (back(Outcome.RESTORED, session="s-1", settled_by="session/resume"), "LW-5", "info",
     "Agent echo relaunched; session s-1 restored by session/resume."),
    (back(Outcome.NEW, fresh_start=True), "LW-6", "info",
     "Agent echo relaunched with a fresh session s-2: a fresh start was asked for; the saved session was given up."),
    (back(Outcome.NEW, native_session_resume=False), "LW-7", "info",
     "Agent echo relaunched with a fresh session s-2: its profile does not restore sessions natively."),
    (back(Outcome.NEW, token=None), "LW-8", "info",
     "Agent echo relaunched with a fresh session s-2: no ACP session was saved."),
    (back(Outcome.NEW, first_launch=True, token=None), None, None, None),
    # A fork's first start takes up the session the agent forked: not a relaunch (issue 45, item 7).
    (back(Outcome.RESTORED, first_launch=True, token="s-9", session="s-9", settled_by="session/resume",
          forked_from="s-orig"), "LW-9", "info",
     "Agent echo started for this fork of session s-orig with session s-9, which it made by session/fork; taken up "
     "by session/resume."),
    # A later relaunch of a fork is a relaunch like any other.
    (back(Outcome.RESTORED, session="s-9", settled_by="session/resume", forked_from="s-orig"), "LW-5", "info",
     "Agent echo relaunched; session s-9 restored by session/resume."),
]


@pytest.mark.parametrize("facts,rule,level,words", RETURNS, ids=[f"{r}-{i}" for i, (_, r, _, _) in enumerate(RETURNS)])
def test_the_transcript_says_how_the_agent_came_back(facts: ReturnFacts, rule: str | None, level: str | None,
                                                     words: str | None) -> None:
    assert return_rule(facts) == rule
    assert return_said(facts) == (None if rule is None else (level, words))


def test_every_rule_has_its_words_and_a_case() -> None:
    assert {r for r, _, _ in FAILURES} == set(FAILURE_WORDS)
    assert {r for _, r, _, _ in RETURNS if r} == set(RETURN_WORDS)
