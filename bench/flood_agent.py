"""A minimal ACP agent that floods: `session/prompt` with text N answers N `session/update`s, then end_turn.

Lines are written from a prepared template so the agent is never the bottleneck.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    out = os.fdopen(sys.stdout.fileno(), "wb", buffering=1 << 20, closefd=False)
    template = b""
    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            result: object = {"protocolVersion": 1, "agentCapabilities": {"loadSession": False}, "authMethods": []}
        elif method in ("session/new",):
            result = {"sessionId": "flood-1"}
            update = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "flood-1", "update": {
                "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x" * 64}}}}
            template = json.dumps(update, separators=(",", ":")).encode() + b"\n"
        elif method == "session/resume":
            result = {}
        elif method == "session/prompt" and msg["params"]["prompt"][0]["text"].startswith("lat:"):
            # Latency mode: one update at a time, each stamped with the time it was written.
            count = int(msg["params"]["prompt"][0]["text"][4:])
            for _ in range(count):
                stamp = str(time.perf_counter_ns()).encode()
                out.write(template.replace(b"x" * 20, stamp.ljust(20, b"x"), 1))
                out.flush()
                time.sleep(0.0005)
            result = {"stopReason": "end_turn"}
        elif method == "session/prompt":
            count = int(msg["params"]["prompt"][0]["text"])
            block = template * 1000
            for _ in range(count // 1000):
                out.write(block)
            out.write(template * (count % 1000))
            result = {"stopReason": "end_turn"}
        elif mid is None:
            continue
        else:
            out.write(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "nope"}}).encode()
                      + b"\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
