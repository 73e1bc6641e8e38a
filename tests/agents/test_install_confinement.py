"""A registry install's package manager runs confined (`agents add`, `agents update`): an install script — the
package author's code — writes only in the install's tree, sees neither the gateway's state nor the caller's
secrets nor this machine's loopback services, and a link it plants never makes the gateway read elsewhere."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from agents.registry import installer
from gateway.runtime.install_sandbox import ConfinedRunner

SCRIPT = r"""
touch "$OUTSIDE/escaped" 2>/dev/null && echo WROTE-OUTSIDE
cat "$STATE/config.toml" 2>/dev/null && echo READ-STATE
env | grep -q DUMMY-CALLER-SECRET && echo SAW-SECRET
cat "$HOME/.npmrc" 2>/dev/null
touch ./installed && echo wrote-tree
python3 -c "
import socket, sys
try:
    socket.create_connection(('127.0.0.1', int(sys.argv[1])), 3); print('REACHED-LOOPBACK')
except OSError:
    print('no-loopback')
" "$PORT"
"""


@pytest.fixture(autouse=True)
def tools() -> None:
    assert shutil.which("bwrap") and shutil.which("slirp4netns"), "make test installs bubblewrap and slirp4netns"


@pytest.mark.parametrize("network", ["outbound", "host"])
async def test_an_install_script_writes_only_its_tree_and_sees_no_secret(tmp_path: Path, network: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    state, tree, outside, caller = tmp_path / "state", tmp_path / "state" / "tree", tmp_path / "out", tmp_path / "me"
    for directory in (tree, outside, caller):
        directory.mkdir(parents=True)
    (state / "config.toml").write_text('token = "dummy-gateway-token"\n')
    (caller / ".npmrc").write_text("registry=https://registry.example/\n")
    monkeypatch.setenv("HOME", str(caller))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "DUMMY-CALLER-SECRET")
    monkeypatch.setenv("npm_config_loglevel", "error")  # the package managers' own settings pass
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)  # a database, the gateway's port
    port = server.sockets[0].getsockname()[1]
    command = ["sh", "-c", f"OUTSIDE={outside} STATE={state} PORT={port}; {SCRIPT}"]
    try:
        done = await asyncio.to_thread(ConfinedRunner(state, network), command, tree, tree, 120)
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    said = done.stdout
    assert "wrote-tree" in said and (tree / "installed").exists(), said  # the tree is its to fill
    assert "registry=https://registry.example/" in said, said  # the caller's npm settings came along
    assert "WROTE-OUTSIDE" not in said and not (outside / "escaped").exists(), said
    assert "READ-STATE" not in said and "SAW-SECRET" not in said, said
    assert ("no-loopback" if network == "outbound" else "REACHED-LOOPBACK") in said, said


def test_a_link_an_install_planted_never_makes_the_gateway_read_elsewhere(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"version": "1.0.0", "bin": "x"}')
    tree = tmp_path / "tree"
    (tree / "node_modules" / "pkg").mkdir(parents=True)
    (tree / "node_modules" / "pkg" / "package.json").symlink_to(secret)
    (tree / "node_modules" / "other").symlink_to(tmp_path)
    (tree / "node_modules" / "fine").mkdir()
    (tree / "node_modules" / "fine" / "package.json").write_text("{}")
    for planted in ("node_modules/pkg/package.json", "node_modules/other/secret.json"):
        with pytest.raises(installer.InstallError, match="leads out of it"):
            installer._inside(tree, planted)
    assert installer._inside(tree, "node_modules/fine/package.json").read_text() == "{}"


def test_the_cli_runs_installs_confined_where_a_sandbox_starts(tmp_path: Path) -> None:
    """What `agents add` and `agents update` install with here (a sandbox starts on this machine)."""
    import argparse

    from gateway.cli.agents import _runner

    runner = _runner(argparse.Namespace(install_network=None), tmp_path)
    assert isinstance(runner, ConfinedRunner) and runner.network == "outbound"
