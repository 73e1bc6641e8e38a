"""Agents from the ACP registry: its index (validated data), installs pinned and verified from it, and what they are
asked after an install (their `initialize`, their sign-in, the conformance checks)."""
