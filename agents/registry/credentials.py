"""The variables that sign an agent in, known before it is ever started: its profile's `sign_in_vars` and, for an
agent added from the ACP registry, what its upstream documents (`credentials.json`, each entry naming the upstream
file that says so). Frontends name them (`gateway.info`'s `sign_in_vars`), `agents add` and `doctor` say which is
missing, and the gateway offers to keep one for an agent that offers no `env_var` method of its own."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

import orjson

from agents.profiles import AgentProfile

TABLE = Path(__file__).with_name("credentials.json")


@functools.cache
def documented() -> dict[str, list[str]]:
    """Registry id -> the variables its upstream documents (any one signs it in)."""
    raw = orjson.loads(TABLE.read_bytes())
    return {agent_id: [str(v) for v in entry["vars"]] for agent_id, entry in raw.items()
            if not agent_id.startswith("_")}


def required_vars(profile: AgentProfile) -> list[str]:
    """The variables the gateway knows sign this agent in without asking it: the profile's `sign_in_vars`, then,
    for a registry install, its upstream's (a profile of the same id written by hand is the operator's own: only
    its `sign_in_vars` count)."""
    found = list(profile.sign_in_vars)
    if profile.install is not None:
        found += documented().get(profile.id, [])
    return _unique(found)


def keep_vars(profile: AgentProfile) -> list[str]:
    """The variables of the `env_var` method the gateway offers for this agent (`acp.auth.PROFILE_METHOD`): the
    profile's `sign_in_vars` (all of them), else the first its upstream documents (one of them signs it in)."""
    if profile.sign_in_vars:
        return list(profile.sign_in_vars)
    return required_vars(profile)[:1]


def offered_vars(methods: Iterable[Mapping[str, object]]) -> list[str]:
    """The variables of the `env_var` methods an agent offered (as `acp.auth.describe_methods` shows them)."""
    found: list[str] = []
    for method in methods:
        names = method.get("vars") if method.get("kind") == "env_var" else None
        if isinstance(names, list):
            found += [str(n) for n in names]
    return _unique(found)


def given(names: Iterable[str], *sources: Mapping[str, object]) -> list[str]:
    """Which of `names` one of `sources` (a profile's env, an owner's kept values, a launch environment) sets."""
    return [n for n in names if any(source.get(n) for source in sources)]


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
