"""Agent hosts (docs/agent-hosts.md): a detached process per agent execution that owns the agent's pipes, spools its
lines and serves one gateway at a time on a unix socket, so the agent outlives the gateway. Imports nothing of the
gateway: the host runs on the standard library, orjson and `acp.process`."""
