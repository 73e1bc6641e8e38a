"""Signing in to an agent: choosing an `authenticate` method, and describing and checking the methods offered to
people. Pure, and it never invents credentials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .models import AuthMethod


def choose_auth_method(
    advertised: Sequence[AuthMethod], profile_method: str | None, environ: Mapping[str, str]
) -> str | None:
    """The profile's method if it names one; else the first `env_var` method whose variables are all set."""
    if profile_method:
        return profile_method
    for method in advertised:
        if method.type != "env_var":
            continue
        names = method.env_var_names()
        if names and all(environ.get(name) for name in names):
            return method.id
    return None


def method_kind(method: AuthMethod) -> str:
    """`agent` (the agent signs in itself through `authenticate`), `env_var` (it reads a key from its environment) or
    `terminal` (a login program run for the person); an unknown type is told as it is."""
    return method.type or "agent"


def describe_methods(advertised: Sequence[AuthMethod]) -> list[dict[str, Any]]:
    """How a frontend shows an agent's sign-in methods: id, name, description, kind, and what each needs (the
    variable names of an `env_var` method, the arguments of a `terminal` one)."""
    shown: list[dict[str, Any]] = []
    for method in advertised:
        extra = method.model_extra or {}
        entry: dict[str, Any] = {"id": method.id, "name": method.name or method.id,
                                 "description": method.description, "kind": method_kind(method)}
        if entry["kind"] == "env_var":
            entry["vars"] = method.env_var_names()
        if entry["kind"] == "terminal":
            entry["args"] = [a for a in extra.get("args") or [] if isinstance(a, str)]
            env = extra.get("env")
            entry["env"] = {str(k): v for k, v in env.items() if isinstance(v, str)} if isinstance(env, dict) else {}
        shown.append(entry)
    return shown


def sign_in_refusal(methods: Sequence[Mapping[str, Any]], method_id: str,
                    values: Mapping[str, str] | None) -> tuple[str, str] | None:
    """Why `task.session.authenticate` with `method_id` and `values` cannot go ahead — (the field at fault, why) —
    or None: the method must be one the agent offered; an `env_var` one takes a non-empty value for each of its
    variables and nothing else; the others take no values."""
    method = next((m for m in methods if m.get("id") == method_id), None)
    if method is None:
        offered = ", ".join(str(m.get("id")) for m in methods) or "none"
        return "method_id", f"method {method_id!r} is not one the agent offered ({offered})"
    given = dict(values or {})
    if method["kind"] == "env_var":
        wanted = set(method.get("vars") or [])
        missing = sorted(wanted - {k for k, v in given.items() if v})
        if missing:
            return "values", f"method {method_id!r} needs a value for {', '.join(missing)}"
        if set(given) - wanted:
            return "values", f"method {method_id!r} takes only {', '.join(sorted(wanted))}"
        return None
    if given:
        return "values", f"method {method_id!r} ({method['kind']}) takes no values"
    return None
