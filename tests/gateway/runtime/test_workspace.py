"""gateway.runtime.workspace: where a session may run, by table; and against a real gateway, as a hostile owner
would try it — every refusal says which rule, and the gateway's own files stay unreadable from any workspace."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from acp import fs
from acp.errors import RpcError
from gateway.clients.client import RpcCallError
from gateway.runtime.settings import Settings
from gateway.runtime.workspace import Unfit, WorkspaceRefusal, refusal, unfit
from tests.gateway_harness import ALICE, BOB, GatewayProcess, two_owner_gateway

R = WorkspaceRefusal
ROOTS = [Path("/home/alice"), Path("/srv/work")]
PROTECTED = [Path("/home/alice/.local/state/acp-gateway"), Path("/etc/acp/gateway.toml")]
ROWS = [
    ("/home/alice/project", None),
    ("/srv/work/x/y", None),
    ("/srv/work", None),  # a root itself
    ("/home/alice", R.CONTAINS_GATEWAY_FILES),  # holds the state directory
    ("/home/alice/.local", R.CONTAINS_GATEWAY_FILES),
    ("/home/alice/.local/state/acp-gateway", R.INSIDE_GATEWAY_FILES),
    ("/home/alice/.local/state/acp-gateway/reference-agent", R.INSIDE_GATEWAY_FILES),
    ("/", R.CONTAINS_GATEWAY_FILES),
    ("/etc", R.CONTAINS_GATEWAY_FILES),  # holds the configuration file
    ("/home/bob", R.OUTSIDE_WORKSPACE_ROOTS),
    ("/srv/workshop", R.OUTSIDE_WORKSPACE_ROOTS),  # a prefix of a root's name is not inside it
    ("/proc/self", R.SYSTEM_DIRECTORY),
    ("/sys", R.SYSTEM_DIRECTORY),
    ("/dev/shm", R.SYSTEM_DIRECTORY),
]


@pytest.mark.parametrize(("cwd", "expected"), ROWS)
def test_refusal(cwd: str, expected: WorkspaceRefusal | None) -> None:
    assert refusal(Path(cwd), ROOTS, PROTECTED) == expected


@pytest.mark.unit
def test_the_one_check_of_a_directory_an_agent_is_given(tmp_path: Path) -> None:
    """`unfit`, for a session's cwd and an additional directory alike: missing, refused by a rule, or fit."""
    state, work, bob = tmp_path / "work" / "state", tmp_path / "work" / "project", tmp_path / "bob"
    for directory in (state, work, bob):
        directory.mkdir(parents=True)
    settings = Settings(state_dir=state, workspace_roots=(tmp_path / "work",), protected_paths=(state,),
                        owner_workspace_roots={"bob": (bob,)})
    assert unfit(settings, "alice", str(work)) is None
    assert unfit(settings, "alice", str(work / "gone")) == Unfit(None, "it no longer exists")
    assert unfit(settings, "alice", str(state)) == Unfit(
        R.INSIDE_GATEWAY_FILES, f"workspace {state} lies inside the gateway's own files: choose a project directory "
        "elsewhere")
    refused = unfit(settings, "alice", str(bob))  # another owner's root: not alice's
    assert refused is not None and refused.rule is R.OUTSIDE_WORKSPACE_ROOTS
    assert unfit(settings, "bob", str(bob)) is None


@pytest.mark.unit
def test_a_refusal_of_a_directory_holding_the_gateways_files_says_what_works(tmp_path: Path) -> None:
    """Issue 45, item 8: /tmp holding a state directory, but in no workspace root, was told "choose a project
    directory inside it", and every directory inside it was then refused (outside the roots): it names the roots."""
    scratch, home = tmp_path / "tmp", tmp_path / "home"
    state = scratch / "gw-state"
    for directory in (state, scratch / "project", home / "project"):
        directory.mkdir(parents=True)
    settings = Settings(state_dir=state, workspace_roots=(home,), protected_paths=(state,))
    refused = unfit(settings, "alice", str(scratch))
    assert refused is not None and refused.rule is R.CONTAINS_GATEWAY_FILES
    assert refused.message.endswith(f"choose a project directory inside your workspace roots ({home}) that does not "
                                    "hold them")
    inside = unfit(settings, "alice", str(scratch / "project"))  # what it no longer suggests: refused indeed
    assert inside is not None and inside.rule is R.OUTSIDE_WORKSPACE_ROOTS
    # A root that holds them: a directory inside it is what works, and it is accepted.
    settings = Settings(state_dir=state, workspace_roots=(scratch,), protected_paths=(state,))
    refused = unfit(settings, "alice", str(scratch))
    assert refused is not None and refused.message.endswith("choose a project directory inside it that does not "
                                                            "hold them")
    assert unfit(settings, "alice", str(scratch / "project")) is None


def test_fs_never_serves_protected_or_system_paths(tmp_path: Path) -> None:
    secret = tmp_path / "state"
    secret.mkdir()
    (secret / "token").write_text("s3cret")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(secret / "token")
    with pytest.raises(RpcError, match="outside the session directory"):
        fs.read_text_file(str(work), "link", never_serve=(str(secret),))
    # Even a root that holds them (the gateway refuses such a cwd, the fs methods hold on their own):
    with pytest.raises(RpcError, match="not the session's"):
        fs.read_text_file(str(tmp_path), "state/token", never_serve=(str(secret),))
    with pytest.raises(RpcError, match="not the session's"):
        fs.write_text_file(str(tmp_path), "state/token", "x", never_serve=(str(secret),))
    assert (secret / "token").read_text() == "s3cret"
    with pytest.raises(RpcError, match="not the session's"):
        fs.read_text_file("/", "/proc/self/environ")




@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    gw = two_owner_gateway(tmp_path, bob=f'workspace_roots = ["{tmp_path / "bob-work"}"]\n')
    for name in ("bob-work", "work/project"):
        (tmp_path / name).mkdir()
    await gw.start()
    yield gw
    await gw.stop()


async def test_a_hostile_owner_cannot_root_a_session_where_the_secrets_are(gateway: GatewayProcess,
                                                                           tmp_path: Path) -> None:
    alice, bob = await gateway.client(ALICE), await gateway.client(BOB)
    state = tmp_path / "state"
    cases = [
        (alice, "/", "contains_gateway_files"),
        (alice, str(tmp_path), "contains_gateway_files"),  # the state directory's parent
        (alice, str(state), "inside_gateway_files"),
        (alice, "/proc/self", "system_directory"),
        (alice, "/root", "outside_workspace_roots"),
        (bob, str(tmp_path / "work"), "outside_workspace_roots"),  # bob's own roots replace the gateway's
    ]
    for client, cwd, rule in cases:
        with pytest.raises(RpcCallError) as info:
            await client.call("task.session.start", {"agent": "ref", "cwd": cwd})
        assert (info.value.code, info.value.data["rule"]) == (-32011, rule), (cwd, info.value)
        assert cwd in info.value.message
    assert (await bob.call("task.session.start", {"agent": "ref", "cwd": str(tmp_path / "bob-work"),
                                                  "wait_ready": True}))["is_agent_running"]
    # From an accepted workspace, a link to the token or the database is not followed out.
    work = tmp_path / "work" / "project"
    os.symlink(state / "gateway.db", work / "db")
    os.symlink(state, work / "state")
    view = await alice.call("task.session.start", {"agent": "ref", "cwd": str(work), "wait_ready": True})
    for path in ("db", "state/gateway.db", str(state / "gateway.db"), "/proc/self/environ"):
        await alice.call("task.session.prompt", {"session_id": view["session_id"], "prompt": f"/read {path}"})
        said = (await alice.call("task.session.history", {"session_id": view["session_id"]}))["entries"][-1]
        assert "refused" in said["content"] and "SQLite" not in said["content"], (path, said)
    for c in (alice, bob):
        await c.close()
