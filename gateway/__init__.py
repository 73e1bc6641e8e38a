"""The gateway service: store, sessions and resume, events, JSON-RPC over WebSocket, CLI."""

__version__ = "0.1.0"
