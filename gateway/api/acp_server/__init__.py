"""ACP over WebSocket at `/acp`: remote ACP clients drive gateway sessions, with the gateway as their ACP agent."""

from .connection import AcpConnection, EdgeInfo

__all__ = ["AcpConnection", "EdgeInfo"]
