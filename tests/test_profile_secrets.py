"""The operator's keys in a profile's `env` are scrubbed like a session's own secrets: an agent that prints one (as
it is, or URL-encoded) has it shown as `[secret]` in events, history, the log and recordings."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.gateway_harness import BOB, agent_said, reference_profile, running, two_owner_gateway

KEY = "dummy/profile+key=0123456789"  # URL-encoding changes it: dummy%2Fprofile%2Bkey%3D0123456789
URL_KEY = "dummy%2Fprofile%2Bkey%3D0123456789"


async def test_a_profile_key_the_agent_prints_never_reaches_events_history_log_or_recordings(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=f'record_dir = "{tmp_path / "rec"}"\n')
    reference_profile(gw.agents_dir, tmp_path / "agent-state", "ref", extra=f'[env]\nVENDOR_KEY = "{KEY}"\n')
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await bob.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                     "wait_ready": True}))["session_id"]
        quote = "import os, urllib.parse; print(urllib.parse.quote(os.environ['VENDOR_KEY'], safe=''))"
        said = await agent_said(gw, BOB, sid, f'/sh echo "plain $VENDOR_KEY"; python3 -c "{quote}"')
        assert "plain [secret]" in said and said.count("[secret]") == 2, said  # it did print both
        events = orjson.dumps(await bob.call("task.session.events", {"session_id": sid})).decode()
        history = orjson.dumps(await bob.call("task.session.history", {"session_id": sid})).decode()
        await bob.close()
    recordings = "".join(p.read_text() for p in (tmp_path / "rec").rglob("*.jsonl"))
    assert recordings  # recorded
    for where, text in (("events", events), ("history", history), ("log", "".join(gw.stderr_lines)),
                        ("recordings", recordings)):
        assert KEY not in text and URL_KEY not in text, where
