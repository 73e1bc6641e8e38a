"""Record and replay: `record` (a transparent stdio proxy writing both directions of ACP traffic to JSONL, and the
redaction it applies), `recording` (the gateway recording each agent process it runs), `rules` and `script` (which
recorded frame answers a client's, pure), `agent` (the replay agent: `python -m agents.replay`, `acp-gateway
replay`), `diff` and `fixtures` (`acp-gateway fixtures diff`: what changed between two recordings)."""
