"""The ACP client side: framing, JSON-RPC peer, agent process, restore rules. No tasks, storage or sockets."""

PROTOCOL_VERSION = 1
