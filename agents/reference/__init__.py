"""The reference agent: a real ACP agent over stdio that persists its sessions and injects faults on demand.

Read `example.py` first: a short, complete ACP agent. The rest is the fault layer over it and its wiring:
`faults.py` (the example's hooks made to misbehave, flag by flag), `commands.py` (the slash commands a prompt can
start with), `tools.py` (tool calls and the calls to the client they make), `auth.py` (the extra sign-ins),
`options.py` (modes, models, config options), `store.py` (the session files), `config.py` and `cli_args.py` (the
flags), and `agent.py` (`python -m agents.reference`: stdio, the wire quirks, `main`)."""
