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


PROFILE_METHOD = "profile-env"  # the env_var method a profile's `sign_in_vars` offer


def describe_methods(advertised: Sequence[AuthMethod], profile_vars: Sequence[str] = ()) -> list[dict[str, Any]]:
    """How a frontend shows an agent's sign-in methods: id, name, description, kind, and what each needs (the
    variable names of an `env_var` method; the arguments, environment and, when the agent names one, the program of
    a `terminal` one — also the older `_meta["terminal-auth"]` form, as the copilot CLI sends it). `profile_vars`
    (a profile's `sign_in_vars`) add an env_var method when the agent offers none with them."""
    shown: list[dict[str, Any]] = []
    for method in advertised:
        extra = method.model_extra or {}
        meta = extra.get("_meta")
        found = meta.get("terminal-auth") if isinstance(meta, dict) else None
        legacy: dict[str, Any] | None = found if isinstance(found, dict) else None
        entry: dict[str, Any] = {"id": method.id, "name": method.name or method.id,
                                 "description": method.description,
                                 "kind": "terminal" if legacy is not None and not method.type else method_kind(method)}
        if entry["kind"] == "env_var":
            entry["vars"] = method.env_var_names()
        if entry["kind"] == "terminal":
            source = legacy if legacy is not None else extra
            entry["args"] = [a for a in source.get("args") or [] if isinstance(a, str)]
            env = source.get("env")
            entry["env"] = {str(k): v for k, v in env.items() if isinstance(v, str)} if isinstance(env, dict) else {}
            if legacy is not None and isinstance(legacy.get("command"), str):
                entry["command"] = legacy["command"]
        shown.append(entry)
    offered = {v for m in shown if m["kind"] == "env_var" for v in m["vars"]}
    if profile_vars and not set(profile_vars) <= offered:
        shown.append({"id": PROFILE_METHOD, "name": ", ".join(profile_vars), "kind": "env_var",
                      "description": "read from the agent's environment: yours, kept for your agents of this profile",
                      "vars": list(profile_vars)})
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
