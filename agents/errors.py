"""The agents package's error that reaches the command line, kept apart from the profiles' models so the command
line can catch it without loading them (pydantic, the MCP shapes) for every verb."""

from __future__ import annotations


class ProfileError(ValueError):
    """One line: which file, which key, what is wrong."""
