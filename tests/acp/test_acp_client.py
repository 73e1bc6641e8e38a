"""The ACP client against the reference agent as a real subprocess: transport, faults, client methods."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp.client import AcpClient, ClientOptions
from acp.errors import ProtocolVersionError, RequestTimeout, TransportError
from acp.models import text_block
from acp.session_setup import establish_session
from tests.conftest import Recorder, process_alive, wait_until
from tests.gateway_harness import agent_log

Launch = Callable[..., Any]


async def new_session(client: AcpClient, cwd: Path) -> str:
    await client.initialize()
    result = await establish_session(client, native_session_resume=True, resume_token=None, cwd=str(cwd))
    assert result.session_id
    return result.session_id


async def test_prompt_round_trip(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    init = await client.initialize()
    assert init.protocolVersion == 1 and init.agentCapabilities.can_resume and init.agentCapabilities.can_load
    sid = await new_session(client, workdir)
    response = await client.prompt(sid, [text_block("hello")])
    assert response.stopReason == "end_turn"
    assert rec.texts() == ["echo: hello"]


async def test_unknown_update_kind_passes_through_raw(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    sid = await new_session(client, workdir)
    await client.prompt(sid, [text_block("/unknown-update")])
    kinds = [p["update"] for p, _ in rec.updates]
    assert {"sessionUpdate": "_reference_future_kind", "payload": {"x": 1}} in kinds


async def test_ten_mib_line_each_way(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    sid = await new_session(client, workdir)
    big = "q" * (10 * 1024 * 1024)
    # client -> agent: a 10 MiB prompt, echoed back: agent -> client is 10 MiB too.
    response = await client.prompt(sid, [text_block(big)])
    assert response.stopReason == "end_turn"
    assert rec.texts() == [f"echo: {big}"]
    await client.prompt(sid, [text_block(f"/huge {10 * 1024 * 1024}")])
    assert rec.texts()[-1] == "y" * (10 * 1024 * 1024)
    assert client.conn.stats.oversized == 0


async def test_line_over_the_limit_is_skipped_not_fatal(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch(on_update=rec, options=ClientOptions(max_line=1024 * 1024))
    sid = await new_session(client, workdir)
    await client.prompt(sid, [text_block(f"/huge {2 * 1024 * 1024}")])
    assert client.conn.stats.oversized == 1
    assert (await client.prompt(sid, [text_block("still here")])).stopReason == "end_turn"
    assert rec.texts() == ["echo: still here"]


async def test_stderr_flood_is_drained(launch: Launch, workdir: Path) -> None:
    client = await launch("--stderr-flood", str(10 * 1000 * 1000))
    sid = await new_session(client, workdir)
    assert (await client.prompt(sid, [text_block("after the flood")])).stopReason == "end_turn"
    await wait_until(lambda: client.process.stderr.total_bytes >= 10 * 1000 * 1000, what="stderr drained")
    assert len(client.process.stderr.text()) <= client.process.stderr.capacity
    assert "stderr flood" in client.process.stderr.tail_lines(1)[0]


async def test_noise_on_stdout_is_counted_not_fatal(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch("--noise", "5", on_update=rec)
    sid = await new_session(client, workdir)
    assert (await client.prompt(sid, [text_block("hi")])).stopReason == "end_turn"
    assert client.conn.stats.non_json == 10
    assert "noise" in client.conn.stats.samples[0]
    assert rec.texts() == ["echo: hi"]


async def test_crash_fails_pending_request_at_once(launch: Launch, workdir: Path) -> None:
    client = await launch()
    sid = await new_session(client, workdir)
    with pytest.raises(TransportError, match=r"closed|exited"):
        # The request itself has no timeout: only the process's death can end it.
        await asyncio.wait_for(client.prompt(sid, [text_block("/crash")]), 1.0)
    with pytest.raises(TransportError):
        await client.prompt(sid, [text_block("after")])


async def test_no_orphaned_grandchild_after_stop(launch: Launch, workdir: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    client = await launch("--grandchild-pidfile", str(pidfile))
    await client.initialize()
    pid = int(pidfile.read_text())
    assert process_alive(pid)
    await client.stop()
    await wait_until(lambda: not process_alive(pid), what=f"grandchild {pid} to exit")




async def test_stop_kills_an_agent_that_ignores_stdin_close(workdir: Path, tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                      "print('ready', flush=True)\ntime.sleep(3600)\n")
    client = await AcpClient.launch([sys.executable, str(script)], cwd=str(workdir),
                                    options=ClientOptions(stop_grace=0.2))
    await wait_until(lambda: client.conn.stats.non_json == 1, what="the stub to start")
    rc = await client.stop()
    assert rc == -9


async def test_unsupported_protocol_version(launch: Launch) -> None:
    client = await launch("--protocol-version", "2")
    with pytest.raises(ProtocolVersionError, match="version 2"):
        await client.initialize()


async def test_fs_read_write_inside_cwd(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    sid = await new_session(client, workdir)
    (workdir / "notes.txt").write_text("one\ntwo\nthree\n")
    await client.prompt(sid, [text_block(f"/read {workdir / 'notes.txt'} 2 1")])
    assert rec.texts()[-1] == 'fs/read_text_file ok: {"content":"two\\n"}'
    await client.prompt(sid, [text_block(f"/write {workdir / 'sub' / 'out.txt'} written by agent")])
    assert rec.texts()[-1] == "fs/write_text_file ok: {}"
    assert (workdir / "sub" / "out.txt").read_text() == "written by agent"


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
async def test_fs_escapes_refused(launch: Launch, workdir: Path, tmp_path: Path, kind: str) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    sid = await new_session(client, workdir)
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(tmp_path, workdir / "escape")
    path = {"dotdot": "../secret.txt", "absolute": str(secret), "symlink": str(workdir / "escape" / "secret.txt")}[kind]
    await client.prompt(sid, [text_block(f"/read {path}")])
    assert rec.texts()[-1].startswith("fs/read_text_file error -32602: access outside the session directory")
    await client.prompt(sid, [text_block(f"/write {path} overwritten")])
    assert rec.texts()[-1].startswith("fs/write_text_file error -32602: access outside the session directory")
    assert secret.read_text() == "top secret"


async def test_unknown_client_method_answers_32601(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    sid = await new_session(client, workdir)
    await client.prompt(sid, [text_block("/call _vendor/unknown")])
    assert rec.texts()[-1] == "_vendor/unknown error -32601: Method not found: _vendor/unknown"
    assert client.unknown_methods == ["_vendor/unknown"]
    # A method of ACP's that this client did not offer (no terminal host): -32601 too, saying so.
    await client.prompt(sid, [text_block("/call terminal/create")])
    assert rec.texts()[-1] == ("terminal/create error -32601: terminal/create: this client did not offer terminals "
                               "(its initialize said terminal: false)")


async def test_permission_routed_to_callback(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    asked: list[dict[str, Any]] = []

    async def decide(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"outcome": "selected", "optionId": params["options"][0]["optionId"]}

    client = await launch(on_update=rec, on_permission=decide)
    sid = await new_session(client, workdir)
    await client.prompt(sid, [text_block("/permission")])
    assert asked[0]["toolCall"]["title"] == "Write notes.txt"
    assert rec.texts()[-1] == 'permission: {"outcome":"selected","optionId":"allow-once"}'


async def test_cancel_answers_pending_permission_cancelled(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    asked = asyncio.Event()

    async def never(params: dict[str, Any]) -> dict[str, Any]:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    client = await launch(on_update=rec, on_permission=never)
    sid = await new_session(client, workdir)
    turn = asyncio.ensure_future(client.prompt(sid, [text_block("/permission")]))
    await asyncio.wait_for(asked.wait(), 10)
    await client.cancel(sid)
    assert (await asyncio.wait_for(turn, 10)).stopReason == "cancelled"


async def test_cancel_ends_a_hanging_turn(launch: Launch, workdir: Path) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    sid = await new_session(client, workdir)
    turn = asyncio.ensure_future(client.prompt(sid, [text_block("/hang")]))
    await rec.wait_for(lambda: "hanging until cancelled" in rec.texts())
    await client.cancel(sid)
    assert (await asyncio.wait_for(turn, 10)).stopReason == "cancelled"


async def test_a_request_nobody_waits_for_is_withdrawn_both_ways(launch: Launch, workdir: Path,
                                                                 tmp_path: Path) -> None:
    """$/cancel_request: the client withdraws a request it stopped waiting for; the agent withdraws one of its own,
    and the client stops asking and answers it -32800."""
    log = tmp_path / "agent.log"
    asked, gave_up = asyncio.Event(), asyncio.Event()

    async def never_answers(params: dict[str, Any]) -> dict[str, Any]:
        asked.set()
        try:
            await asyncio.Event().wait()
        finally:
            gave_up.set()
        raise AssertionError("unreachable")

    client = await launch("--fault", "session/set_mode=hang", "--log", str(log), on_permission=never_answers)
    sid = await new_session(client, workdir)
    with pytest.raises(RequestTimeout):
        await client.request("session/set_mode", {"sessionId": sid, "modeId": "ask"}, timeout=0.3)
    await client.request("session/list", {})  # answered after the agent read what came before it
    withdrawn = [e for e in agent_log(log) if e["method"] == "$/cancel_request"]
    assert len(withdrawn) == 1 and isinstance(withdrawn[0]["params"]["requestId"], int)
    rec = Recorder()
    client.on_update = rec
    await client.prompt(sid, [text_block("/withdraw")])
    await asyncio.wait_for(asked.wait(), 10)
    await asyncio.wait_for(gave_up.wait(), 10)  # the client stopped asking
    assert rec.texts()[-1] == "withdrew the permission request"


async def test_the_trace_context_goes_to_the_agent_as_meta_traceparent(launch: Launch, workdir: Path,
                                                                      tmp_path: Path) -> None:
    """One trace spans frontend, gateway and agent: W3C `traceparent` in `_meta`, an existing one left as given."""
    from opentelemetry import context, trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    log = tmp_path / "agent.log"
    client = await launch("--log", str(log))
    sid = await new_session(client, workdir)
    span = SpanContext(trace_id=0x0AF7651916CD43DD8448EB211C80319C, span_id=0xB7AD6B7169203331, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))
    token = context.attach(trace.set_span_in_context(NonRecordingSpan(span)))
    try:
        await client.request("session/list", {})
        await client.request("session/list", {"_meta": {"traceparent": "00-given-by-the-frontend", "x": 1}})
        await client.prompt(sid, [text_block("hello")])
    finally:
        context.detach(token)
    await client.request("session/list", {})  # nothing traced: nothing added
    sent = [e["params"].get("_meta") for e in agent_log(log) if e["method"] in ("session/list", "session/prompt")]
    expected = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert sent[:2] == [{"traceparent": expected}, {"traceparent": "00-given-by-the-frontend", "x": 1}]
    # The prompt goes under a span of its own (`acp.session.prompt`, where an SDK records spans): the same trace.
    assert sent[2]["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-") and sent[3] is None
