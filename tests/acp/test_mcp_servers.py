"""MCP servers given to a session: their shapes and bounds refused clearly (acp.mcp, by table), the owner's policy for
stdio servers, the agent's transports; passed to the agent on new and again on every load and resume; and their
secrets written only: never in a view, an event, a log line, the metrics or an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from acp import mcp
from gateway.clients.client import RpcCallError
from tests.acp_wire import AcpWire
from tests.gateway_harness import (
    ALICE,
    BOB,
    EventLog,
    agent_log,
    metrics_text,
    reference_profile,
    two_owner_gateway,
)

HEADER_SECRET = "Bearer dummy-mcp-header-secret-7f3a"
ENV_SECRET = "dummy-mcp-env-secret-9c1e"
PROFILE_SECRET = "dummy-profile-env-secret-4d2b"
SECRETS = (HEADER_SECRET, ENV_SECRET, PROFILE_SECRET)


def http(name: str = "docs", **extra: Any) -> dict[str, Any]:
    return {"type": "http", "name": name, "url": "https://mcp.example.com/v1?key=abc",
            "headers": [{"name": "Authorization", "value": HEADER_SECRET}], **extra}


def stdio(name: str = "files", **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": "/usr/bin/env", "args": ["mcp-files"],
            "env": [{"name": "FILES_TOKEN", "value": ENV_SECRET}], **extra}


BAD: list[tuple[str, Any, str, str]] = [
    # name, servers, the field named, a word of the message
    ("not a list", {"name": "x"}, "mcp_servers", "list"),
    ("too many", [http(f"s{i}") for i in range(17)], "mcp_servers", "at most 16"),
    ("no name", [{"type": "http", "url": "https://x.example", "headers": []}], "mcp_servers.0.name", "required"),
    ("an unknown type", [{"type": "ftp", "name": "x", "url": "ftp://x"}], "mcp_servers.0", "tag"),
    ("a relative command", [stdio(command="mcp-files")], "mcp_servers.0.command", "absolute"),
    ("a URL that is not http(s)", [http(url="file:///etc/passwd")], "mcp_servers.0.url", "http"),
    ("a URL without a host", [http(url="https://")], "mcp_servers.0.url", "host"),
    ("CR/LF in a header value", [http(headers=[{"name": "X-A", "value": "a\r\nX-Injected: 1"}])],
     "mcp_servers.0.headers.0.value", "CR, LF"),
    ("a header name that is no token", [http(headers=[{"name": "Bad Name", "value": "v"}])],
     "mcp_servers.0.headers.0.name", "pattern"),
    ("NUL in an env value", [stdio(env=[{"name": "A", "value": "x\x00y"}])], "mcp_servers.0.env.0.value", "NUL"),
    ("an env name that is no name", [stdio(env=[{"name": "A=B", "value": "v"}])], "mcp_servers.0.env.0.name",
     "pattern"),
    ("a huge value", [http(headers=[{"name": "X", "value": "v" * 20_000}])], "mcp_servers.0.headers.0.value",
     "at most"),
    ("too large in all", [http(f"s{i}", headers=[{"name": f"H{j}", "value": "v" * 15_000} for j in range(5)])
                          for i in range(2)], "mcp_servers", "KiB"),
    ("two of one name", [http("a"), http("a")], "mcp_servers", "named"),
    ("an unknown field", [http(colour="red")], "mcp_servers.0.colour", "Extra"),
]


@pytest.mark.parametrize(("name", "servers", "field", "word"), BAD, ids=[b[0] for b in BAD])
def test_bad_shapes_are_refused_naming_the_field_never_the_value(name: str, servers: Any, field: str,
                                                                 word: str) -> None:
    with pytest.raises(mcp.McpRefusal) as refused:
        mcp.parse(servers)
    assert refused.value.field == field and word in refused.value.message
    for secret in (*SECRETS, "X-Injected", "x\x00y"):
        assert secret not in refused.value.message


def test_policy_and_transports() -> None:
    servers = mcp.parse([stdio(), http(), {**http("events"), "type": "sse"}])
    mcp.check_servers(servers, stdio_allowed=True, transports=None, agent="a")
    with pytest.raises(mcp.McpRefusal) as no_stdio:
        mcp.check_servers(servers, stdio_allowed=False, transports=None, agent="a")
    assert no_stdio.value.field == "mcp_servers.0" and "allow_stdio_mcp_servers" in no_stdio.value.message
    with pytest.raises(mcp.McpRefusal) as no_sse:
        mcp.check_servers(servers, stdio_allowed=True, transports={"stdio", "http"}, agent="a")
    assert no_sse.value.field == "mcp_servers.2.type" and "mcpCapabilities.sse" in no_sse.value.message


def test_what_is_shown_and_what_is_sent() -> None:
    web, local = mcp.parse([http(url="https://user:pw@mcp.example.com:8443/v1?key=abc#x"), stdio()])
    assert mcp.shown(web) == {"name": "docs", "type": "http", "url": "https://mcp.example.com:8443/v1?…",
                              "headers": ["Authorization"]}
    assert mcp.shown(local) == {"name": "files", "type": "stdio", "command": "/usr/bin/env", "args": ["mcp-files"],
                                "env": ["FILES_TOKEN"]}
    assert mcp.wire(local) == {"name": "files", "command": "/usr/bin/env", "args": ["mcp-files"],
                               "env": [{"name": "FILES_TOKEN", "value": ENV_SECRET}]}  # ACP's stdio: no `type`
    assert mcp.wire(web)["headers"] == [{"name": "Authorization", "value": HEADER_SECRET}]
    assert mcp.scrub(f"agent said: {HEADER_SECRET} is bad", mcp.secrets([web])) == "agent said: [secret] is bad"


async def test_servers_reach_the_agent_on_every_set_up_and_their_secrets_nowhere_else(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, bob="allow_stdio_mcp_servers = true\n")
    agents, log_file = tmp_path / "agents", tmp_path / "agent.log"
    # An agent that repeats what it was given (`/mcp` says the values too): what it says shows `[secret]` instead.
    reference_profile(agents, tmp_path / "agent-state", "ref", "--leaky-mcp", log=log_file,  # a profile may give
                      extra=f'[[mcp_servers]]\nname = "tracker"\ncommand = "/usr/bin/env"\nargs = []\n'  # stdio
                            f'env = [{{ name = "TRACKER_KEY", value = "{PROFILE_SECRET}" }}]\n')  # servers
    reference_profile(agents, tmp_path / "agent-state", "no-http", "--no-mcp-http", log=log_file)
    reference_profile(agents, tmp_path / "agent-state", "ref-load", "--no-resume", log=log_file)  # restored by load
    work = str(tmp_path / "work")
    await gw.start()
    seen: list[str] = []
    try:
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        watch = EventLog(alice)
        await alice.call("task.session.subscribe", {})
        # alice may not give a stdio server (a command on the gateway's host); bob's configuration allows it.
        with pytest.raises(RpcCallError) as refused:
            await alice.call("task.session.start", {"agent": "ref", "cwd": work, "mcp_servers": [stdio()]})
        assert refused.value.code == -32602 and refused.value.data == {"field": "mcp_servers.0"}
        seen.append(refused.value.message)
        with pytest.raises(RpcCallError) as no_http:  # the agent does not take http servers: said before it starts
            await alice.call("task.session.start", {"agent": "no-http", "cwd": work, "mcp_servers": [http()]})
        assert no_http.value.code == -32602 and "mcpCapabilities.http" in no_http.value.message
        seen.append(no_http.value.message)
        with pytest.raises(RpcCallError) as crlf:
            await alice.call("task.session.start", {"agent": "ref", "cwd": work, "mcp_servers": [
                http(headers=[{"name": "A", "value": f"{HEADER_SECRET}\r\nX: 1"}])]})
        assert crlf.value.code == -32602
        seen.append(crlf.value.message)
        assert (await alice.call("task.session.list", {}))["sessions"] == []  # refusals made nothing

        view = await alice.call("task.session.start", {"agent": "ref", "cwd": work, "wait_ready": True,
                                                       "mcp_servers": [http()]})
        sid = view["session_id"]
        assert view["config"]["mcp_servers"] == [
            {"name": "tracker", "type": "stdio", "command": "/usr/bin/env", "args": [], "env": ["TRACKER_KEY"]},
            {"name": "docs", "type": "http", "url": "https://mcp.example.com/v1?…", "headers": ["Authorization"]}]
        assert await alice.call("task.session.prompt", {"session_id": sid, "prompt": "/mcp"}) == {
            "stop_reason": "end_turn"}
        said = await watch.wait(lambda e: e["type"] == "session_update" and "mcp: " in str(e["data"]["update"]))
        assert said["data"]["update"]["content"]["text"] == ("mcp: tracker (stdio; TRACKER_KEY = [secret]), "
                                                              "docs (http; Authorization = [secret])")
        history = await alice.call("task.session.history", {"session_id": sid})
        assert history["entries"][-1]["content"] == said["data"]["update"]["content"]["text"]
        bobs = await bob.call("task.session.start", {"agent": "ref-load", "cwd": work, "wait_ready": True,
                                                     "mcp_servers": [stdio()]})
        seen += [orjson.dumps(v).decode() for v in (view, bobs)]
        await gw.kill9()
        await gw.start()
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        seen.append(orjson.dumps(await alice.call("task.session.resume", {"session_id": sid})).decode())
        seen.append(orjson.dumps(await bob.call("task.session.resume", {"session_id": bobs["session_id"]})).decode())
        seen.append(orjson.dumps(await bob.call("task.session.status", {"session_id": bobs["session_id"]})).decode())
        seen.append(orjson.dumps(await alice.call("task.session.list", {})).decode())
        replay = EventLog(alice)
        await alice.call("task.session.subscribe", {"since": 0})
        await replay.wait(lambda e: e["type"] == "caught_up")
        seen += [orjson.dumps(e).decode() for e in [*watch.events, *replay.events]]
        seen.append("".join(await metrics_text(gw.port, ALICE)))
        # The agent got them, secrets included, on session/new and again on session/resume.
        got = [(m["method"], m["params"]["mcpServers"]) for m in agent_log(log_file)
               if m["method"] in ("session/new", "session/resume", "session/load")]
        alice_sets = [servers for _, servers in got if any(s["name"] == "docs" for s in servers)]
        assert [method for method, servers in got if servers in alice_sets] == ["session/new", "session/resume"]
        assert len(alice_sets) == 2 and all(
            {"type": "http", "name": "docs", "url": "https://mcp.example.com/v1?key=abc",
             "headers": [{"name": "Authorization", "value": HEADER_SECRET}]} in servers
            and any(e["value"] == PROFILE_SECRET for s in servers for e in s.get("env", [])) for servers in alice_sets)
        bob_sets = [method for method, servers in got if any(e["value"] == ENV_SECRET for s in servers
                                                             for e in s.get("env", []))]
        assert bob_sets == ["session/new", "session/load"]  # bob's stdio server, again with the load
        for c in (alice, bob):
            await c.close()
    finally:
        await gw.stop()
    seen.append("".join(gw.stderr_lines))  # the gateway's whole log
    for text in seen:
        for secret in SECRETS:
            assert secret not in text


async def test_acp_clients_servers_go_under_the_same_policy(tmp_path: Path) -> None:
    gw = two_owner_gateway(tmp_path, config='default_agent = "ref"\n')
    log_file = tmp_path / "agent.log"
    reference_profile(tmp_path / "agents", tmp_path / "agent-state", "ref", log=log_file)
    await gw.start()
    try:
        wire = await AcpWire.connect(gw.port, ALICE)
        init = wire.frames[0]["result"]
        assert init["agentCapabilities"]["mcpCapabilities"] == {"http": True, "sse": True}  # the default agent's
        answer = await wire.call("session/new", {"cwd": str(tmp_path / "work"), "mcpServers": [http(), stdio()]})
        ignored = answer["_meta"]["acpGateway"]["ignoredMcpServers"]
        assert [i["name"] for i in ignored] == ["files"]  # stdio: not run on the host for this owner
        sent = next(m["params"]["mcpServers"] for m in agent_log(log_file) if m["method"] == "session/new")
        assert [s["name"] for s in sent] == ["docs"] and sent[0]["headers"][0]["value"] == HEADER_SECRET
        with pytest.raises(Exception) as bad:
            await wire.call("session/new", {"cwd": str(tmp_path / "work"), "mcpServers": [http(url="gopher://x")]})
        assert getattr(bad.value, "code", None) == -32602 and getattr(bad.value, "data", None) == {
            "field": "mcpServers.0.url"}
        await wire.close()
    finally:
        await gw.stop()
    assert HEADER_SECRET not in "".join(gw.stderr_lines)


async def test_a_server_the_agent_no_longer_takes_is_left_out_of_a_restore_and_said(tmp_path: Path) -> None:
    """After an upgrade (here: a restart) the agent no longer advertises http MCP servers: the session's http server
    is not sent with the resume (a strict agent would refuse the whole call), the restore succeeds, and the view and
    a message say which server was left out and why."""
    gw = two_owner_gateway(tmp_path)
    log_file = tmp_path / "agent.log"
    reference_profile(tmp_path / "agents", tmp_path / "agent-state", "ref", log=log_file)
    await gw.start()
    try:
        alice = await gw.client(ALICE)
        sid = (await alice.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "work"),
                                                       "wait_ready": True, "mcp_servers": [http()]}))["session_id"]
        await gw.kill9()
        reference_profile(tmp_path / "agents", tmp_path / "agent-state", "ref", "--no-mcp-http", log=log_file)
        await gw.start()
        alice = await gw.client(ALICE)
        view = await alice.call("task.session.resume", {"session_id": sid})
        assert view["is_agent_running"]
        assert [(u["kind"], u["id"], u["reason"]) for u in view["config"]["unapplied"]] == [
            ("mcp_server", "docs", "not_advertised")]
        resumed = [m for m in agent_log(log_file) if m["method"] == "session/resume"]
        assert resumed[-1]["params"]["mcpServers"] == []
        assert view["config"]["mcp_servers"][0]["name"] == "docs"  # still the session's: given again if taken again
        await alice.close()
    finally:
        await gw.stop()
