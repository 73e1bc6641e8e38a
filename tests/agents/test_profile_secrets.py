"""The operator's keys in a profile's `env` and its MCP servers' headers are scrubbed like a session's own secrets:
an agent that prints one (as it is, or URL-encoded) has it shown as `[secret]` in events, history, views, the log,
the metrics and recordings."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.gateway_harness import ALICE, BOB, agent_said, metrics_text, reference_profile, running, two_owner_gateway

KEY = "dummy/profile+key=0123456789"  # URL-encoding changes it: dummy%2Fprofile%2Bkey%3D0123456789
URL_KEY = "dummy%2Fprofile%2Bkey%3D0123456789"
MCP_HEADER = "Bearer dummy-mcp-header-0123456789"
MCP_SERVER = ('[[mcp_servers]]\nname = "tracker"\ntype = "http"\nurl = "https://mcp.example/"\n'
              f'headers = [{{ name = "Authorization", value = "{MCP_HEADER}" }}]\n')


async def test_a_profile_key_the_agent_prints_never_reaches_events_history_log_or_recordings(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config=f'record_dir = "{tmp_path / "rec"}"\n')
    reference_profile(gw.agents_dir, tmp_path / "agent-state", "ref", "--leaky-mcp",
                      extra=f'{MCP_SERVER}[env]\nVENDOR_KEY = "{KEY}"\n')
    async with running(gw):
        bob = await gw.client(BOB)
        sid = (await bob.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                     "wait_ready": True}))["session_id"]
        quote = "import os, urllib.parse; print(urllib.parse.quote(os.environ['VENDOR_KEY'], safe=''))"
        said = await agent_said(gw, BOB, sid, f'/sh echo "plain $VENDOR_KEY"; python3 -c "{quote}"')
        assert "plain [secret]" in said and said.count("[secret]") == 2, said  # it did print both
        # An unconfined agent can read the configuration: the owners' tokens (and the cluster secret) it prints are
        # the gateway's own secrets, shown as [secret] too.
        head, tail = ALICE[:8], ALICE[8:]  # put together by the agent: the prompt never holds it
        tokens = await agent_said(gw, BOB, sid, f"/sh echo token {head}''{tail}")
        assert "token [secret]" in tokens and ALICE not in tokens, tokens
        mcp = await agent_said(gw, BOB, sid, "/mcp")
        assert "tracker (http; Authorization = [secret])" in mcp, mcp  # it did print the header
        events = orjson.dumps(await bob.call("task.session.events", {"session_id": sid})).decode()
        history = orjson.dumps(await bob.call("task.session.history", {"session_id": sid})).decode()
        views = orjson.dumps([await bob.call("task.session.status", {"session_id": sid}),
                              await bob.call("task.session.list", {})]).decode()
        _, metrics = await metrics_text(gw.port, BOB)
        await bob.close()
    recordings = "".join(p.read_text() for p in (tmp_path / "rec").rglob("*.jsonl"))
    assert recordings  # recorded
    for where, text in (("events", events), ("history", history), ("log", "".join(gw.stderr_lines)),
                        ("recordings", recordings), ("views", views), ("metrics", metrics)):
        assert KEY not in text and URL_KEY not in text and "dummy-mcp-header" not in text and ALICE not in text, where
