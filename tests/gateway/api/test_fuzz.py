"""Property-based fuzzing of the WebSocket API (hypothesis): random frames, JSON, params for every method, batches.

The property: whatever arrives, the gateway answers well-formed JSON-RPC (or closes with a proper
code), never crashes, and keeps serving — checked after every single case by a probe call.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.gateway_harness import TOKEN, reference_profile

METHODS = ["gateway.info", "task.session.start", "task.session.status", "task.session.resume",
           "task.session.recover", "task.session.prompt", "task.session.cancel", "task.session.cancel_turn",
           "task.session.list", "task.session.get", "task.session.history", "task.session.subscribe",
           "task.session.unsubscribe", "task.session.permission.respond", "task.session.set_title",
           "task.session.delete"]
PARAM_NAMES = ["session_id", "agent", "cwd", "description", "title", "task_id", "wait_ready", "action", "prompt",
               "states", "limit", "cursor", "after", "since", "subscription_id", "request_id", "option_id",
               "cancelled"]
PROPER_CLOSE_CODES = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1011, 4429}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12)
param_values = json_values | st.sampled_from(["", "/", "/tmp", "s-x", "retry", "fresh_start", "RUNNING", "ref",
                                              "/nonexistent"]) | st.integers(-5, 5)
params = (st.dictionaries(st.sampled_from(PARAM_NAMES), param_values, max_size=5)
          | st.dictionaries(st.text(max_size=8), json_values, max_size=3) | st.lists(json_values, max_size=3))
ids = st.integers(-10**6, 10**6) | st.text(max_size=8) | st.none() | st.floats(allow_nan=False) | st.booleans()


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]))}
    msg["method"] = draw(st.sampled_from(METHODS) | st.text(max_size=20) | json_values)
    if draw(st.booleans()):
        msg["params"] = draw(params)
    if draw(st.integers(0, 4)):
        msg["id"] = draw(ids)
    if draw(st.integers(0, 9)) == 0:
        msg[draw(st.text(max_size=5))] = draw(json_values)
    return msg


frames = (st.text(max_size=200).map(str.encode) | st.binary(max_size=100)
          | json_values.map(orjson.dumps) | requests().map(orjson.dumps)
          | st.lists(requests() | json_values, max_size=5).map(orjson.dumps))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "agents").mkdir()
    reference_profile(tmp / "agents", tmp / "agent-state", "ref")
    config = tmp / "gw.toml"
    # The default agent hosts, stopped with the gateway (on_stop = "stop"): nothing of it outlives the module.
    config.write_text("max_live_sessions_per_owner = 2\nmax_frame_bytes = 65536\nready_timeout = 5.0\n"
                      "on_stop = \"stop\"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_GATEWAY")}
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--port", "0", "--state-dir",
                             str(tmp / "state"), "--agents-dir", str(tmp / "agents"), "--token", TOKEN,
                             "--default-agent", "ref", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    match = re.search(r":(\d+)/rpc", line)
    assert match, line
    yield proc, int(match.group(1))
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


class Session:
    def __init__(self, port: int) -> None:
        self.port = port
        self.ws: ClientConnection | None = None
        self.probe_id = 0
        self.stack = contextlib.ExitStack()

    def conn(self) -> ClientConnection:
        if self.ws is None:
            self.ws = self.stack.enter_context(connect(
                f"ws://127.0.0.1:{self.port}/rpc", additional_headers={"Authorization": f"Bearer {TOKEN}"},
                max_size=None, open_timeout=10))
        return self.ws


def check_answer(raw: str | bytes) -> list[dict[str, Any]]:
    answer = orjson.loads(raw)
    items = answer if isinstance(answer, list) else [answer]
    assert items, "an empty batch answer"
    for item in items:
        if item.get("method") == "task.session.event":
            continue  # a subscription the fuzzer opened
        assert item.get("jsonrpc") == "2.0" and "id" in item, item
        assert ("result" in item) != ("error" in item), item
        if "error" in item:
            err = item["error"]
            assert isinstance(err.get("code"), int) and isinstance(err.get("message"), str), item
            assert "Traceback" not in err["message"]
    return items


@settings(max_examples=2000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(frame=frames)
def test_gateway_survives_any_frame(gateway: tuple[subprocess.Popen[bytes], int], frame: bytes) -> None:
    proc, port = gateway
    session = _session(port)
    ws = session.conn()
    try:
        ws.send(frame.decode("utf-8", "replace") if frame and frame[:1] in b"[{\"" else frame)
        session.probe_id += 1
        probe = f"probe-{session.probe_id}"
        ws.send(orjson.dumps({"jsonrpc": "2.0", "id": probe, "method": "gateway.info"}).decode())
        while True:
            items = check_answer(ws.recv(timeout=30))
            if any(i.get("id") == probe and "result" in i for i in items):
                break
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else None
        assert code in PROPER_CLOSE_CODES, f"closed with {code}"
        session.ws = None
        assert session.conn() is not None  # and it serves a new connection
    assert proc.poll() is None, "the gateway died"


_SESSIONS: dict[int, Session] = {}


def _session(port: int) -> Session:
    return _SESSIONS.setdefault(port, Session(port))


def test_fuzzer_left_the_gateway_healthy(gateway: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = gateway
    with connect(f"ws://127.0.0.1:{port}/rpc", additional_headers={"Authorization": f"Bearer {TOKEN}"}) as ws:
        ws.send('{"jsonrpc":"2.0","id":1,"method":"task.session.list","params":{}}')
        assert "result" in orjson.loads(ws.recv(timeout=10))
    assert proc.poll() is None
    assert Path(f"/proc/{proc.pid}").exists()
