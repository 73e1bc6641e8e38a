"""Deprecated home of the Python client: it moved to `gateway.clients.client` (and its rules to
`gateway.clients.policy`). Importing from here still works and warns once; it will go in a later release."""

from __future__ import annotations

import warnings

from .clients.client import *  # noqa: F403
from .clients.client import __all__  # noqa: F401

warnings.warn("gateway.client moved to gateway.clients.client; import it from there",
              DeprecationWarning, stacklevel=2)
