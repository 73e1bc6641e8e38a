"""What an owner's agent reaches beyond the API: its environment (an allowlist), its HOME (the owner's own agent
home), and files through ACP fs calls that links cannot fool (a hard link, a directory swapped for a symlink, a
store kept outside the state directory)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agents.profiles import AGENT_ENV_NAMES, AgentProfile, agent_environment
from gateway.clients.client import GatewayClient, RpcCallError
from gateway.runtime.homes import home_of, owner_dir_name
from tests.gateway_harness import (
    ALICE,
    BOB,
    GatewayProcess,
    agent_said,
    reference_profile,
    running,
    two_owner_gateway,
)

PG_SECRET, AWS_SECRET = "dummy-pg-password-4711", "dummy-aws-secret-0815"


# the gateway's environment -> what an agent gets of it
ENVIRONMENTS: list[tuple[dict[str, str], Path | None, dict[str, str]]] = [
    ({"PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "PGPASSWORD": "x", "AWS_SECRET_ACCESS_KEY": "y",
      "ACP_GATEWAY_TOKEN": "t", "HOME": "/root", "OTEL_EXPORTER_OTLP_HEADERS": "k"}, Path("/s/homes/a"),
     {"PATH": "/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "HOME": "/s/homes/a", "XDG_CONFIG_HOME": "/s/homes/a/.config",
      "XDG_DATA_HOME": "/s/homes/a/.local/share", "XDG_STATE_HOME": "/s/homes/a/.local/state",
      "XDG_CACHE_HOME": "/s/homes/a/.cache"}),
    ({"PATH": "/bin", "HOME": "/home/me", "XDG_CONFIG_HOME": "/home/me/.config", "DATABASE_URL": "pg://…"}, None,
     {"PATH": "/bin", "HOME": "/home/me"}),  # a local run or check: the user's own HOME, still nothing else
]


@pytest.mark.parametrize(("base", "home", "expected"), ENVIRONMENTS)
def test_an_agent_gets_only_the_allowlisted_environment(base: dict[str, str], home: Path | None,
                                                        expected: dict[str, str]) -> None:
    assert agent_environment(base, home) == expected
    assert "PGPASSWORD" not in AGENT_ENV_NAMES


def test_a_profile_names_its_secrets_by_reference(tmp_path: Path) -> None:
    """`{ env = "NAME" }` reads the gateway's own variable for this agent only; `{ file = "…" }` a file; either one
    that cannot be read leaves the variable unset."""
    key_file = tmp_path / "key"
    key_file.write_text("from-a-file-0123456789\n")
    profile = AgentProfile.model_validate({"id": "a", "command": ["a"], "env": {
        "PLAIN": "1", "FROM_ENV": {"env": "OPERATOR_KEY"}, "FROM_FILE": {"file": str(key_file)},
        "MISSING_ENV": {"env": "NOT_SET_ANYWHERE"}, "MISSING_FILE": {"file": str(tmp_path / "nope")}}})
    base = {"PATH": "/bin", "OPERATOR_KEY": "from-the-environment-0123"}
    env = profile.launch_env(base)
    assert (env["PLAIN"], env["FROM_ENV"], env["FROM_FILE"]) == ("1", "from-the-environment-0123",
                                                                 "from-a-file-0123456789")
    assert "MISSING_ENV" not in env and "MISSING_FILE" not in env and "OPERATOR_KEY" not in env
    with pytest.raises(ValidationError):
        AgentProfile.model_validate({"id": "a", "command": ["a"], "env": {"X": {"env": "A", "file": "/b"}}})


def test_homes_are_per_owner_and_per_profile_when_asked(tmp_path: Path) -> None:
    shared = AgentProfile(id="a", command=["a"])
    own = AgentProfile(id="b", command=["b"], home="profile")
    assert home_of(tmp_path, "alice", shared) == home_of(tmp_path, "alice", AgentProfile(id="c", command=["c"]))
    assert home_of(tmp_path, "alice", shared) != home_of(tmp_path, "bob", shared)
    assert home_of(tmp_path, "alice", own) == home_of(tmp_path, "alice", shared) / "b"
    assert owner_dir_name("a/b") != owner_dir_name("a_b")  # distinct owners, distinct directories
    assert "/" not in owner_dir_name("../../etc") and not owner_dir_name("..").startswith(".")


async def said(gw: GatewayProcess, token: str | None, sid: str, prompt: str) -> str:
    return await agent_said(gw, token, sid, prompt, 10)


async def shell(gw: GatewayProcess, token: str | None, sid: str, command: str) -> str:
    """What the agent's own shell printed (`/sh`, streamed back as message chunks)."""
    return await said(gw, token, sid, f"/sh {command}")


async def start(client: GatewayClient, cwd: Path) -> dict[str, Any]:
    view: dict[str, Any] = await client.call("task.session.start", {"agent": "ref", "cwd": str(cwd),
                                                                    "wait_ready": True})
    return view


async def test_agents_get_their_owners_home_and_none_of_the_gateways_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", PG_SECRET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    async with running(two_owner_gateway(tmp_path)) as gw:
        alice, bob = await gw.client(ALICE), await gw.client(BOB)
        a = await start(alice, tmp_path / "work")
        b = await start(bob, tmp_path / "work")
        env_a = await shell(gw, ALICE, a["session_id"], "env")
        assert PG_SECRET not in env_a and AWS_SECRET not in env_a and "ACP_GATEWAY" not in env_a
        homes = gw.state_dir / "homes"
        home_a = await shell(gw, ALICE, a["session_id"], 'echo "$HOME"; echo "$XDG_STATE_HOME"')
        home_b = await shell(gw, BOB, b["session_id"], 'echo "$HOME"')
        assert home_a.splitlines()[0] == str(homes / owner_dir_name("alice"))
        assert home_a.splitlines()[1] == str(homes / owner_dir_name("alice") / ".local" / "state")
        assert home_b.strip() == str(homes / owner_dir_name("bob"))
        assert oct(os.stat(homes / owner_dir_name("alice")).st_mode & 0o777) == "0o700"
        await alice.close()
        await bob.close()


async def test_a_hard_link_is_refused_for_reading_and_writing(tmp_path: Path) -> None:
    async with running(two_owner_gateway(tmp_path)) as gw:
        alice = await gw.client(ALICE)
        outside = tmp_path / "outside.txt"
        outside.write_text("every owner's token\n")
        os.link(outside, tmp_path / "work" / "hl")
        view = await start(alice, tmp_path / "work")
        read = await said(gw, ALICE, view["session_id"], "/read hl")
        assert "error -32602" in read and "rule hard_link" in read and "token" not in read
        written = await said(gw, ALICE, view["session_id"], "/write hl overwritten")
        assert "error -32602" in written and "hard_link" in written
        assert outside.read_text() == "every owner's token\n"
        assert "ok" in await said(gw, ALICE, view["session_id"], "/write fresh.txt mine")  # one link: fine
        await alice.close()


async def test_a_workspace_swapped_for_a_link_moves_nothing(tmp_path: Path) -> None:
    async with running(two_owner_gateway(tmp_path)) as gw:
        alice = await gw.client(ALICE)
        project, other = tmp_path / "work" / "alice" / "proj", tmp_path / "work" / "bob"
        project.mkdir(parents=True)
        other.mkdir()
        (other / "secret.txt").write_text("bob's secret\n")
        (project / "mine.txt").write_text("alice's\n")
        view = await start(alice, project)
        assert "alice's" in await said(gw, ALICE, view["session_id"], "/read mine.txt")
        project.rename(project.with_name("proj_real"))  # the directory swapped for a link to another's
        project.symlink_to(Path("..") / ".." / "bob")
        for path in ("secret.txt", str(project / "secret.txt")):
            answer = await said(gw, ALICE, view["session_id"], f"/read {path}")
            assert "error" in answer and "bob's secret" not in answer, answer
        await alice.close()


async def test_a_store_outside_the_state_directory_is_the_gateways_own(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "ref")
    data = tmp_path / "data"
    data.mkdir()
    gw = GatewayProcess(tmp_path / "state", agents, "--store", str(data / "gw.db"), "--default-agent", "ref")
    async with running(gw):
        client = await gw.client()
        with pytest.raises(RpcCallError) as refused:
            await start(client, data)
        assert refused.value.code == -32011 and refused.value.data["rule"] == "contains_gateway_files"
        work = tmp_path / "work"
        work.mkdir()
        (work / "db").symlink_to(data / "gw.db")
        view = await start(client, work)
        answer = await said(gw, None, view["session_id"], "/read db")
        assert "error" in answer and "SQLite" not in answer, answer
        await client.close()


@pytest.mark.unit
def test_a_new_home_is_seeded_and_never_from_another_home(tmp_path: Path) -> None:
    from gateway.runtime.homes import ensure_home

    template = tmp_path / "template.json"
    template.write_text('{"theme": "dark"}')
    profile = AgentProfile(id="a", command=["a"], home_seed={".config/agent/settings.json": str(template)})
    home = ensure_home(tmp_path / "state", "alice", profile)
    seeded = home / ".config" / "agent" / "settings.json"
    assert seeded.read_text() == '{"theme": "dark"}' and oct(seeded.stat().st_mode & 0o777) == "0o600"
    seeded.write_text("changed by the agent")
    ensure_home(tmp_path / "state", "alice", profile)  # a seed never overwrites what the home has
    assert seeded.read_text() == "changed by the agent"
    stolen = AgentProfile(id="b", command=["b"], home_seed={"loot": str(seeded)})  # another owner's file
    with pytest.raises(ValueError, match="comes from an agent home"):
        ensure_home(tmp_path / "state", "bob", stolen)
    with pytest.raises(ValueError):
        AgentProfile(id="c", command=["c"], home_seed={"../escape": str(template)})


@pytest.mark.unit
def test_a_symlink_an_agent_plants_in_its_home_never_makes_the_gateway_write_elsewhere(tmp_path: Path) -> None:
    """An owner's agent writes in its home: a dangling link where a seed goes, a link where a seed's directory goes
    and a link where a profile's own home goes must not carry the gateway's writes (or the sandbox's binds) out."""
    from gateway.runtime.homes import HomeRefused, ensure_home, home_of

    template = tmp_path / "template.json"
    template.write_text("SEED")
    elsewhere = tmp_path / "elsewhere"  # another owner's home, the gateway's configuration: anything outside
    elsewhere.mkdir()
    state = tmp_path / "state"
    plain = AgentProfile(id="plain", command=["a"])
    home = ensure_home(state, "bob", plain)
    (home / "dangling").symlink_to(elsewhere / "written-through-a-link")
    (home / ".config").symlink_to(elsewhere)
    seeds = {"dangling": str(template), ".config/agent/settings.json": str(template), "fine/ok.json": str(template)}
    ensure_home(state, "bob", AgentProfile(id="seeded", command=["a"], home_seed=seeds))
    assert not (elsewhere / "written-through-a-link").exists() and not (elsewhere / "agent").exists()
    assert list(elsewhere.iterdir()) == [] and (home / "fine" / "ok.json").read_text() == "SEED"  # seeding went on
    own = AgentProfile(id="own", command=["a"], home="profile")
    home_of(state, "bob", own).symlink_to(elsewhere)  # bound as the agent's home, it would show `elsewhere`
    with pytest.raises(HomeRefused, match=r"not a directory .*symlink.*remove it"):
        ensure_home(state, "bob", own)
    assert list(elsewhere.iterdir()) == []
