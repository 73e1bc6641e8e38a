"""Choosing an `authenticate` method: pure, and it never invents credentials."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
