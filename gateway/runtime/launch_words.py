"""What a launch tells people, as tables: why it failed (LW-1…3) and how an agent came back (LW-4…9). Pure: the
launcher gathers the facts, this chooses the rule and its words, and `tests/gateway/runtime/test_launch_words.py`
holds the table.

A rule id names each case in the code, the docs and the tests alike; the words say what the person can do next.
"""

from __future__ import annotations

from dataclasses import dataclass

from acp.restore import Outcome

# rule -> the words, formatted with the facts' fields
FAILURE_WORDS = {
    "LW-1": "agent {agent!r} failed to start: {failure}",
    "LW-2": ("agent {agent!r} could not restore session {token}: {failure_class} ({described}); the saved session is "
             "kept — use task.session.recover with action 'retry' or 'fresh_start'{sign_in}"),
    "LW-3": "agent {agent!r} could not create a session: {described}",
}
SIGN_IN_TOO = ", or sign in (task.session.authenticate)"

# rule -> (the message's level, its words)
RETURN_WORDS = {
    "LW-4": ("warning", "The agent no longer knew session {token} ({failure_class}); a fresh session {session} was "
                        "started."),
    "LW-5": ("info", "Agent {agent} relaunched; session {session} restored by {settled_by}{replayed}."),
    "LW-6": ("info", "Agent {agent} relaunched with a fresh session {session}: a fresh start was asked for; the saved "
                     "session was given up."),
    "LW-7": ("info", "Agent {agent} relaunched with a fresh session {session}: its profile does not restore sessions "
                     "natively."),
    "LW-8": ("info", "Agent {agent} relaunched with a fresh session {session}: no ACP session was saved."),
    "LW-9": ("info", "Agent {agent} started for this fork of session {forked_from} with session {session}, which "
                     "it made by session/fork; taken up by {settled_by}{replayed}."),
}
REPLAYED = ", which replayed the conversation"


@dataclass(frozen=True)
class FailureFacts:
    agent: str
    token: str | None  # the saved ACP session it was to restore, if any
    failure: str | None  # the launch's own error (initialize, transport), if it got no restore decision
    failure_class: str | None = None
    described: str = ""  # the restore's own account of what failed
    can_sign_in: bool = False  # the agent offered a sign-in


@dataclass(frozen=True)
class ReturnFacts:
    agent: str
    token: str | None
    outcome: Outcome
    session: str  # the ACP session it has now
    first_launch: bool
    fresh_start: bool
    native_session_resume: bool
    failure_class: str | None = None
    settled_by: str = ""
    replayed: bool = False
    forked_from: str | None = None  # the gateway session this one was forked from


def failure_rule(facts: FailureFacts) -> str:
    if facts.failure is not None:
        return "LW-1"
    return "LW-2" if facts.token else "LW-3"


def failure_said(facts: FailureFacts) -> str:
    """Why the launch left no live agent, in the words of its rule."""
    return FAILURE_WORDS[failure_rule(facts)].format(
        agent=facts.agent, failure=facts.failure, token=facts.token, failure_class=facts.failure_class,
        described=facts.described, sign_in=SIGN_IN_TOO if facts.can_sign_in else "")


def return_rule(facts: ReturnFacts) -> str | None:
    """Which way back the session's transcript tells of; None for a first launch, which tells nothing."""
    if facts.outcome is Outcome.FALLBACK_NEW:
        return "LW-4"
    if facts.outcome is Outcome.RESTORED and facts.first_launch and facts.forked_from is not None:
        return "LW-9"  # a fork's first start: the forked session taken up in its own process, not a relaunch
    if facts.outcome is Outcome.RESTORED:  # a relaunch the user should see (it may cost a paid agent's start)
        return "LW-5"
    if facts.first_launch:
        return None
    if facts.fresh_start:
        return "LW-6"
    return "LW-8" if facts.native_session_resume else "LW-7"


def return_said(facts: ReturnFacts) -> tuple[str, str] | None:
    """(level, words) of the message that says how the agent came back, or None."""
    rule = return_rule(facts)
    if rule is None:
        return None
    level, words = RETURN_WORDS[rule]
    return level, words.format(agent=facts.agent, token=facts.token, session=facts.session,
                               failure_class=facts.failure_class, settled_by=facts.settled_by,
                               replayed=REPLAYED if facts.replayed else "", forked_from=facts.forked_from)
