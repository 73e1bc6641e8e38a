"""The session runtime against a real third-party ACP agent, Auggie 0.36.0 (npm; `make interop` installs it):
a turn cancelled from another connection, a turn cut by a gateway kill -9 closed as interrupted, no agent
process left behind, and exactly one after the resume (which restores by `session/load`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from gateway.clients.client import GatewayClient
from tests.conftest import process_alive, wait_until
from tests.gateway_harness import EventLog, GatewayProcess
from tests.support.paths import REPO

ROOT = REPO
NODE = ROOT / ".interop" / "node_modules" / ".bin" / "node"
AUGGIE = ROOT / ".interop" / "node_modules" / "@augmentcode" / "auggie" / "augment.mjs"
# Offline, Auggie starts with a dummy session token; its prompts then wait on the network until cancelled.
AUTH = '{"accessToken":"dummy","tenantURL":"https://d1.api.augmentcode.com/","scopes":["read","write"]}'


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    if not (NODE.exists() and AUGGIE.exists()):
        pytest.fail("Auggie is not installed: `make interop` (part of `make test`) installs it into .interop/")
    agents, home = tmp_path / "agents", tmp_path / "home"
    agents.mkdir()
    home.mkdir()
    (tmp_path / "work").mkdir()
    env = {"HOME": str(home), "AUGMENT_SESSION_AUTH": AUTH}
    (agents / "auggie.toml").write_text(
        f'id = "auggie"\ncommand = {orjson.dumps([str(NODE), str(AUGGIE), "--acp"]).decode()}\n'
        f"native_session_resume = true\nenv = {{ HOME = {orjson.dumps(env['HOME']).decode()}, "
        f"AUGMENT_SESSION_AUTH = '{AUTH}' }}\n")
    conf = tmp_path / "gw.toml"
    # Offline, Auggie honours a cancel between its attempts to reach its server: 5.7 s measured alone, but once more
    # than 20 s under the parallel suite's load; the gateway then stopped it (cancel_grace), the turn ended
    # `cancelled` without it, and it never saved its session for the restore below. A grace it never reaches here.
    conf.write_text("cancel_grace = 75.0\n")
    gw = GatewayProcess(tmp_path / "state", agents, config=conf)
    await gw.start()
    yield gw
    await gw.stop()


def auggies(home: Path) -> list[int]:
    """Live Auggie processes of this test (their environment names its HOME)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"augment.mjs" in (entry / "cmdline").read_bytes() and \
                    f"HOME={home}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in found if process_alive(pid)]


async def test_auggie_turns_belong_to_the_session(gateway: GatewayProcess, tmp_path: Path) -> None:
    home = tmp_path / "home"
    watcher = await gateway.client()
    log = EventLog(watcher)
    await watcher.call("task.session.subscribe", {})
    prompter = await gateway.client()
    view = await prompter.call("task.session.start", {"agent": "auggie", "cwd": str(tmp_path / "work"),
                                                      "wait_ready": True})
    sid = view["session_id"]
    assert len(auggies(home)) == 1

    # cancel_turn from another connection ends the first connection's turn with the agent's `cancelled`.
    turn = asyncio.ensure_future(prompter.call("task.session.prompt", {"session_id": sid, "prompt": "hello"}))
    await log.wait(lambda e: e["session_id"] == sid and e["type"] == "turn_started", 30)
    await watcher.call("task.session.cancel_turn", {"session_id": sid})
    assert await asyncio.wait_for(turn, 90) == {"stop_reason": "cancelled"}
    assert len(auggies(home)) == 1  # Auggie answered the cancel itself: the gateway did not have to stop it

    # kill -9 mid-turn: no Auggie is left, and the turn is closed as interrupted by the next start. Auggie writes
    # its session to its home on its own time: a kill before that (a loaded machine) leaves it nothing to load,
    # and the restore would rightly be a fresh start (R3) — so the kill waits for the file.
    saved = home / ".augment" / "sessions" / f"{view['acp_session_id']}.json"
    await wait_until(saved.exists, 90, "Auggie saved its session")
    turn = asyncio.ensure_future(prompter.call("task.session.prompt", {"session_id": sid, "prompt": "again"}))
    started = await log.wait(lambda e: e["session_id"] == sid and e["type"] == "turn_started"
                             and e["data"]["prompt"][0]["text"] == "again", 30)
    await gateway.kill9()
    with pytest.raises(ConnectionError):
        await turn
    await gateway.start()
    assert auggies(home) == []
    client: GatewayClient = await gateway.client()
    replay = EventLog(client)
    await client.call("task.session.subscribe", {"since": started["id"], "session_id": sid})
    ended = await replay.wait(lambda e: e["type"] == "turn_ended", 30)
    assert ended["data"]["stop_reason"] == "interrupted"
    resumed = await asyncio.gather(*(client.call("task.session.resume", {"session_id": sid}) for _ in range(3)))
    assert all(r["is_agent_running"] for r in resumed) and len(auggies(home)) == 1
    assert resumed[0]["acp_session_id"] == view["acp_session_id"], resumed[0]["how"]  # restored by session/load
    for c in (watcher, prompter, client):
        await c.close()
