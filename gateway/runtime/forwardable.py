"""The commands a cluster node runs for the node holding a session, in one registry: `@forwardable("prompt")` on a
`SessionManager` method registers it under that name and routes it, so the method's body runs only on the node
that holds the session (docs/architecture.md: Cluster).

The decorated method takes the session's row; the method the API calls takes `(owner, session_id, …)`. A call on a
node that does not hold the session is forwarded with its arguments by name, and the holder runs the same method
with `forwarded=True` (passed to the body only where it declares it: a forwarded command is never forwarded on).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from ..store import SessionRow

P = ParamSpec("P")
R = TypeVar("R")

FORWARDED: dict[str, str] = {}  # the command's name between nodes -> the method that runs it


class Routes(Protocol):
    async def row(self, owner: str, session_id: str) -> SessionRow: ...

    async def holder_elsewhere(self, row: SessionRow) -> str | None:
        """The other node holding the session, to forward to; None to run the command here."""

    async def forward(self, node: str, row: SessionRow, method: str, args: dict[str, Any]) -> Any: ...


S = TypeVar("S", bound=Routes)


def forwardable(method: str) -> Callable[[Callable[Concatenate[S, SessionRow, P], Awaitable[R]]],
                                         Callable[Concatenate[S, str, str, P], Awaitable[R]]]:
    def register(body: Callable[Concatenate[S, SessionRow, P], Awaitable[R]]) -> Callable[
            Concatenate[S, str, str, P], Awaitable[R]]:
        if method in FORWARDED:
            raise ValueError(f"{method!r} is registered twice")
        FORWARDED[method] = body.__name__
        signature = inspect.signature(body)
        wants_forwarded = "forwarded" in signature.parameters

        async def routed(self: S, owner: str, session_id: str, /, *args: P.args, **kwargs: P.kwargs) -> R:
            row = await self.row(owner, session_id)
            forwarded = bool(kwargs.get("forwarded", False))
            if not wants_forwarded:
                kwargs.pop("forwarded", None)
            if not forwarded:
                node = await self.holder_elsewhere(row)
                if node is not None:
                    bound = signature.bind(self, row, *args, **kwargs)
                    bound.apply_defaults()
                    named = {k: v for k, v in list(bound.arguments.items())[2:] if k != "forwarded"}
                    return cast(R, await self.forward(node, row, method, named))
            return await body(self, row, *args, **kwargs)

        functools.update_wrapper(routed, body)  # its name and docstring; the signature is routed's own
        return routed

    return register


def forwarded_method(method: object) -> str | None:
    """The method that runs a forwarded command, or None when no command has that name."""
    return FORWARDED.get(method) if isinstance(method, str) else None
