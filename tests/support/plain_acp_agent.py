"""A small ACP agent of the Python standard library alone, for machines that have nothing of the gateway's (a remote
host's tests send it over ssh). Prompts: `/write NAME TEXT` writes TEXT to NAME in its cwd with its own file I/O;
`/gate PATH N` streams `chunk 0 ` … `chunk N-1 `, waiting after the tenth until PATH exists; `/fs NAME` asks the
client for NAME with `fs/read_text_file` and says what came back; `/ls DIR` says what DIR holds; `/env NAME` says NAME's
value; anything else is echoed."""

from __future__ import annotations

import json
import os
import sys
import time

out = sys.stdout


def send(message: dict[str, object]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def say(session_id: str, text: str) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session_id, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})


def main() -> None:
    cwd = os.getcwd()
    asked = 1000
    for raw in sys.stdin:
        message = json.loads(raw)
        method, params, ident = message.get("method"), message.get("params") or {}, message.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": ident, "result": {"protocolVersion": 1, "authMethods": [],
                  "agentCapabilities": {"loadSession": False}, "agentInfo": {"name": "plain", "version": "1"}}})
        elif method == "session/new":
            cwd = params.get("cwd") or cwd
            send({"jsonrpc": "2.0", "id": ident, "result": {"sessionId": f"plain-{os.getpid()}"}})
        elif method == "session/prompt":
            sid = params["sessionId"]
            text = "".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict))
            word, _, rest = text.partition(" ")
            if word == "/write":
                name, _, content = rest.partition(" ")
                with open(os.path.join(cwd, name), "w") as fh:
                    fh.write(content)
                say(sid, f"wrote {name} as uid {os.getuid()} on {os.uname().nodename}")
            elif word == "/gate":
                gate, _, count = rest.partition(" ")
                for i in range(int(count)):
                    if i == 10:
                        while not os.path.exists(gate):
                            time.sleep(0.02)
                    say(sid, f"chunk {i} ")
            elif word == "/ls":
                try:
                    said = " ".join(sorted(os.listdir(rest)))
                except OSError as exc:
                    said = f"error {exc.strerror}"
                say(sid, f"ls {rest}: {said}")
            elif word == "/env":  # says a variable's value: the gateway must hide a secret it says
                say(sid, f"env {rest}={os.environ.get(rest, '(unset)')}")
            elif word == "/fs":
                asked += 1
                send({"jsonrpc": "2.0", "id": asked, "method": "fs/read_text_file",
                      "params": {"sessionId": sid, "path": os.path.join(cwd, rest)}})
                answer = json.loads(sys.stdin.readline())
                say(sid, f"fs said for {rest}: {json.dumps(answer.get('error') or answer.get('result'))}")
            else:
                say(sid, f"echo {text}")
            send({"jsonrpc": "2.0", "id": ident, "result": {"stopReason": "end_turn"}})
        elif ident is not None:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
