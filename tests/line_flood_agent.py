"""An ACP agent that answers `initialize` and `session/new`, then on any prompt writes a 64 MiB line (not JSON) and
150 MB without a newline, and ends the turn: a hostile agent's output, for the isolation test."""

from __future__ import annotations

import json
import sys

LINE_BYTES = 64 * 1024 * 1024
FLOOD_BYTES = 150 * 1000 * 1000


def main() -> None:
    out = sys.stdout.buffer
    block = b"z" * (1 << 20)
    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            result: object = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            result = {"sessionId": "flood-1"}
        elif method == "session/prompt":
            for _ in range(LINE_BYTES // len(block)):
                out.write(block)
            out.write(b"\n")
            for _ in range(FLOOD_BYTES // len(block)):
                out.write(block)
            out.write(b"\n")
            result = {"stopReason": "end_turn"}
        elif mid is None:
            continue
        else:
            out.write(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": method}}).encode()
                      + b"\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
