"""Prints what the TypeScript client is generated from, as JSON: the gateway's OpenRPC document and the clients'
policy (gateway.clients.policy: its numbers and link table). Run by scripts/generate-types.mjs with the gateway's
Python (the repository's .venv, or $ACP_GATEWAY_PYTHON)."""

from __future__ import annotations

import json
import sys

from gateway.api.openrpc import document
from gateway.clients import policy


def contract() -> dict[str, object]:
    numbers = {name: getattr(policy, name) for name in (
        "RECONCILE_INTERVAL", "RECONCILE_JITTER", "HEALTH_SAMPLE_INTERVAL", "DEGRADED_AFTER_SAMPLES",
        "MALFORMED_LIMIT", "BACKOFF_BASE", "BACKOFF_CAP", "HEARTBEAT_INTERVAL", "SILENT_AFTER")}
    transitions = [[state.value, event.value, target.value]
                   for (state, event), target in policy.LINK_TRANSITIONS.items()]
    doc = dict(document())
    doc["info"] = {k: v for k, v in doc["info"].items() if k != "version"}  # the types do not change per release
    return {"openrpc": doc, "policy": {"numbers": numbers, "link_states": [s.value for s in policy.Link],
                                       "link_events": [e.value for e in policy.LinkEvent],
                                       "link_transitions": transitions}}


if __name__ == "__main__":
    json.dump(contract(), sys.stdout, indent=1, sort_keys=True)
