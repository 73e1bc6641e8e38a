"""Every rule and every failure class of docs/restore.md, negotiated with the reference agent as a real process."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from acp.client import AcpClient, ClientOptions
from acp.models import conversation, text_block
from acp.restore import FailureClass, Outcome
from acp.session_setup import RestoreResult, establish_session
from tests.conftest import Recorder

Launch = Callable[..., Any]


@pytest.fixture
async def token(launch: Launch, workdir: Path) -> str:
    """A session created and prompted in one agent process, which is then stopped."""
    client: AcpClient = await launch()
    await client.initialize()
    result = await establish_session(client, native_session_resume=True, resume_token=None, cwd=str(workdir))
    assert result.session_id is not None
    await client.prompt(result.session_id, [text_block("first")])
    await client.stop()
    return result.session_id


async def restore(client: AcpClient, workdir: Path, token: str | None, native: bool = True,
                  **kwargs: Any) -> RestoreResult:
    await client.initialize()
    return await establish_session(client, native_session_resume=native, resume_token=token, cwd=str(workdir),
                                   **kwargs)


def sent(result: RestoreResult) -> list[tuple[str, int | None]]:
    return [(a.method.value, a.failure.code if a.failure else None) for a in result.attempts]


async def test_r1_resume_without_replay(launch: Launch, workdir: Path, token: str) -> None:
    rec = Recorder()
    client = await launch(on_update=rec)
    result = await restore(client, workdir, token)
    assert (result.plan, sent(result), result.outcome) == ("resume", [("session/resume", None)], Outcome.RESTORED)
    assert result.session_id == token and conversation([u for u, _ in rec.updates]) == []  # commands are no replay
    assert (await client.prompt(token, [text_block("second")])).stopReason == "end_turn"
    assert rec.texts() == ["echo: second"]


async def test_r2_method_not_found_then_load(launch: Launch, workdir: Path, token: str) -> None:
    rec = Recorder()
    client = await launch("--fault", "session/resume=unsupported", on_update=rec)
    result = await restore(client, workdir, token)
    assert sent(result) == [("session/resume", -32601), ("session/load", None)]
    assert result.outcome is Outcome.RESTORED and result.session_id == token
    assert rec.texts(replay=True) == ["first", "echo: first"] and rec.texts(replay=False) == []


async def test_r2_not_taken_when_the_restore_is_cancelled(launch: Launch, workdir: Path, token: str) -> None:
    client = await launch("--fault", "session/resume=hang")
    cancel = asyncio.Event()
    resume_sent = asyncio.Event()
    client.conn.observers.append(lambda d, m: resume_sent.set() if m.get("method") == "session/resume" else None)
    task = asyncio.ensure_future(restore(client, workdir, token, cancel=cancel))
    await asyncio.wait_for(resume_sent.wait(), 10)
    cancel.set()
    result = await asyncio.wait_for(task, 10)
    assert [a.method.value for a in result.attempts] == ["session/resume"]
    assert (result.outcome, result.failure_class) == (Outcome.PRESERVED, FailureClass.CANCELLATION)


async def test_r3_load_replays_before_answer(launch: Launch, workdir: Path, token: str) -> None:
    rec = Recorder()
    client = await launch("--no-resume", on_update=rec)
    result = await restore(client, workdir, token)
    assert (result.plan, sent(result), result.outcome) == ("load", [("session/load", None)], Outcome.RESTORED)
    assert rec.texts(replay=True) == ["first", "echo: first"]
    await client.prompt(token, [text_block("after load")])
    assert rec.texts(replay=False) == ["echo: after load"]


async def test_r3_late_replay_is_still_marked_replay(launch: Launch, workdir: Path, token: str) -> None:
    rec = Recorder()
    client = await launch("--no-resume", "--late-replay", on_update=rec)
    result = await restore(client, workdir, token)
    assert result.outcome is Outcome.RESTORED
    await rec.wait_for(lambda: len(conversation([u for u, _ in rec.updates])) == 2)
    assert rec.texts(replay=True) == ["first", "echo: first"]


async def test_r3_prime_neither_advertised_falls_back_without_sending(launch: Launch, workdir: Path,
                                                                      token: str) -> None:
    client = await launch("--no-resume", "--no-load")
    result = await restore(client, workdir, token)
    assert (result.plan, sent(result)) == ("new", [("session/new", None)])
    assert (result.outcome, result.failure_class) == (Outcome.FALLBACK_NEW, FailureClass.UNSUPPORTED)
    assert result.session_id != token


@pytest.mark.parametrize("native", [False, True])
async def test_r4_new(launch: Launch, workdir: Path, token: str, native: bool) -> None:
    client = await launch()
    result = await restore(client, workdir, token if not native else None, native=native)
    assert (result.plan, sent(result), result.outcome) == ("new", [("session/new", None)], Outcome.NEW)


FALLBACKS = [
    ("unsupported", ["--fault", "session/resume=unsupported", "--fault", "session/load=unsupported"],
     [("session/resume", -32601), ("session/load", -32601), ("session/new", None)], FailureClass.UNSUPPORTED),
    ("unsupported, no load", ["--fault", "session/resume=unsupported", "--no-load"],
     [("session/resume", -32601), ("session/new", None)], FailureClass.UNSUPPORTED),
    ("unknown session -32002", ["--fault", "session/resume=unknown_session"],
     [("session/resume", -32002), ("session/new", None)], FailureClass.UNKNOWN_SESSION),
    ("unknown session named", ["--fault", "session/resume=named_not_found"],
     [("session/resume", -32603), ("session/new", None)], FailureClass.UNKNOWN_SESSION),
    ("unknown session -32602", ["--fault", "session/resume=invalid_params_not_found"],
     [("session/resume", -32602), ("session/new", None)], FailureClass.UNKNOWN_SESSION),
    ("unknown session on load", ["--no-resume", "--fault", "session/load=unknown_session"],
     [("session/load", -32002), ("session/new", None)], FailureClass.UNKNOWN_SESSION),
]


@pytest.mark.parametrize(("name", "flags", "calls", "cls"), FALLBACKS, ids=[f[0] for f in FALLBACKS])
async def test_fallback_to_new(launch: Launch, workdir: Path, token: str, name: str, flags: list[str],
                               calls: list[tuple[str, int | None]], cls: FailureClass) -> None:
    client = await launch(*flags)
    result = await restore(client, workdir, token)
    assert sent(result) == calls
    assert (result.outcome, result.failure_class) == (Outcome.FALLBACK_NEW, cls)
    assert result.session_id and result.session_id != token
    assert (await client.prompt(result.session_id, [text_block("fresh")])).stopReason == "end_turn"


async def test_forgotten_session_really_unknown(launch: Launch, workdir: Path) -> None:
    client = await launch()
    result = await restore(client, workdir, "ref-never-existed")
    assert sent(result) == [("session/resume", -32002), ("session/new", None)]
    assert result.failure_class is FailureClass.UNKNOWN_SESSION


PRESERVES = [
    ("transport: crash", ["--fault", "session/resume=crash"], {}, FailureClass.TRANSPORT),
    ("transport: crash in load replay", ["--no-resume", "--fault", "session/load=exit_mid_replay"], {},
     FailureClass.TRANSPORT),
    ("transport: timeout", ["--fault", "session/resume=hang"], {"options": ClientOptions(request_timeout=0.3)},
     FailureClass.TRANSPORT),
    ("authentication", ["--fault", "session/resume=auth"], {}, FailureClass.AUTHENTICATION),
    ("authentication after authenticate", ["--require-auth", "--auth-fails"], {}, FailureClass.AUTHENTICATION),
    ("cancellation -32800", ["--fault", "session/resume=cancelled"], {}, FailureClass.CANCELLATION),
    ("inconclusive -32603", ["--fault", "session/resume=internal"], {}, FailureClass.INCONCLUSIVE),
    ("inconclusive other id", ["--fault", "session/resume=other_not_found"], {}, FailureClass.INCONCLUSIVE),
    ("inconclusive config", ["--fault", "session/resume=config_not_found"], {}, FailureClass.INCONCLUSIVE),
]


@pytest.mark.parametrize(("name", "flags", "kwargs", "cls"), PRESERVES, ids=[p[0] for p in PRESERVES])
async def test_preserve_identity(launch: Launch, workdir: Path, token: str, name: str, flags: list[str],
                                 kwargs: dict[str, Any], cls: FailureClass) -> None:
    client = await launch(*flags, **kwargs)
    auth = {"auth_method": "reference-login"} if "--auth-fails" in flags else {}
    result = await restore(client, workdir, token, **auth)
    assert (result.outcome, result.failure_class) == (Outcome.PRESERVED, cls)
    assert result.session_id is None
    assert all(a.method.value != "session/new" for a in result.attempts)
    # The identity is intact: a healthy agent process still restores it afterwards.
    healthy = await launch()
    again = await restore(healthy, workdir, token)
    assert again.outcome is Outcome.RESTORED


async def test_auth_with_env_var_method_then_retry(launch: Launch, workdir: Path, token: str,
                                                   spans: InMemorySpanExporter) -> None:
    env = {**os.environ, "REFERENCE_KEY": "k"}
    client = await launch("--require-auth", "--auth-env", "REFERENCE_KEY", env=env)
    result = await restore(client, workdir, token, environ=env)
    assert sent(result) == [("session/resume", None)] and result.outcome is Outcome.RESTORED
    assert "acp.authenticate" in [s.name for s in spans.get_finished_spans()]


async def test_auth_never_invented(launch: Launch, workdir: Path, token: str, spans: InMemorySpanExporter) -> None:
    client = await launch("--require-auth", "--auth-env", "REFERENCE_KEY")
    result = await restore(client, workdir, token, environ={})
    assert (result.outcome, result.failure_class) == (Outcome.PRESERVED, FailureClass.AUTHENTICATION)
    assert "acp.authenticate" not in [s.name for s in spans.get_finished_spans()]


async def test_profile_auth_method_is_used_up_front(launch: Launch, workdir: Path, token: str) -> None:
    client = await launch("--require-auth")
    result = await restore(client, workdir, token, auth_method="reference-login")
    assert sent(result) == [("session/resume", None)]


async def test_spans_name_the_methods_really_sent(launch: Launch, workdir: Path, token: str,
                                                  spans: InMemorySpanExporter) -> None:
    spans.clear()
    client = await launch("--fault", "session/resume=unsupported")
    await restore(client, workdir, token)
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    assert names == ["acp.initialize", "acp.session.resume", "acp.session.load", "acp.session.restore"]
    root = finished[-1]
    assert root.attributes is not None and root.attributes["acp.restore.outcome"] == "restored"
    for child in finished[1:3]:
        assert child.parent is not None and child.parent.span_id == root.context.span_id
    assert finished[1].attributes is not None and finished[1].attributes["acp.error.code"] == -32601


async def test_preserved_restore_span_is_an_error(launch: Launch, workdir: Path, token: str,
                                                  spans: InMemorySpanExporter) -> None:
    spans.clear()
    client = await launch("--fault", "session/resume=internal")
    await restore(client, workdir, token)
    root = spans.get_finished_spans()[-1]
    assert root.name == "acp.session.restore" and not root.status.is_ok
    assert root.attributes is not None and root.attributes["acp.restore.failure_class"] == "inconclusive"
