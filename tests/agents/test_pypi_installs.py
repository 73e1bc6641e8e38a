"""A PyPI (`uvx`) registry agent installed by the gateway's installer with uv, from wheels built here and served
from a local find-links directory (no network): a wrapper package whose console script names a module it does not
ship, beside the dependency that ships a working script of the same name (fast-agent-acp 0.10.1 and
fast-agent-mcp), installs a command that runs; a package whose command no installed package can run is refused at
install, not at the agent's first start."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from pathlib import Path

import orjson
import pytest

from agents.registry import installer, installs
from agents.registry.index import RegistryEntry


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(into: Path, name: str, version: str, files: dict[str, str], scripts: dict[str, str],
                requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of `files` declaring `scripts` (console script -> `module:function`), written by hand as
    PEP 427 lays it out: no build backend, no index."""
    stem = f"{name.replace('-', '_')}-{version}"  # a wheel's file and folder names escape '-'
    info = f"{stem}.dist-info"
    content = {path: text.encode() for path, text in files.items()}
    content[f"{info}/METADATA"] = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                                           *(f"Requires-Dist: {r}\n" for r in requires)]).encode()
    content[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: acp-gateway-tests\nRoot-Is-Purelib: true\n"
                                b"Tag: py3-none-any\n")
    content[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
        f"{script} = {target}\n" for script, target in scripts.items())).encode()
    record = [_record_line(path, data) for path, data in content.items()] + [f"{info}/RECORD,,"]
    content[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = into / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in content.items():
            archive.writestr(path, data)
    return wheel


def uvx_entry(package: str) -> RegistryEntry:
    return RegistryEntry.model_validate({"id": package, "name": package, "version": "1.0",
                                         "distribution": {"uvx": {"package": f"{package}==1.0"}}})


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A find-links directory that is uv's only index for the test (and its own cache)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("UV_FIND_LINKS", str(wheels))
    monkeypatch.setenv("UV_NO_INDEX", "1")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    return wheels


# The dependency's name sorts before the wrapper's and after it: a package manager unpacks them in an order of its
# own (pip's --no-deps install reversed the requirements' order, so `fast-agent-acp` came last and its script won).
@pytest.mark.parametrize("helper", ["helper", "tool-helper"])
def test_a_wrapper_whose_script_names_a_module_it_does_not_ship_installs_the_dependencys_working_command(
        tmp_path: Path, local_index: Path, helper: str) -> None:
    module = helper.replace("-", "_")
    build_wheel(local_index, "named", "1.0", {}, {"tool-acp": "named_acp.cli:main"}, requires=(f"{helper}==1.0",))
    build_wheel(local_index, helper, "1.0",
                {f"{module}/__init__.py": "", f"{module}/cli.py": "import sys\n\ndef main() -> int:\n"
                                                                 "    print('helper ran', sys.argv[1:])\n"
                                                                 "    return 0\n"},
                {"tool-acp": f"{module}.cli:main"})
    state = tmp_path / "state"
    record = installer.install(state, installer.plan(uvx_entry("named")), runner=installer.run_here)

    assert record.command == ["bin/tool-acp"]
    profile = installs.profile_at(state, "named", "1.0")
    assert profile is not None
    ran = subprocess.run([*profile.command, "--flag"], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "helper ran ['--flag']"
    assert installs.changes(profile, full=True) == []  # the command's file is the install's as recorded
    directory = installs.install_dir(state, "named", "1.0")
    pins = installer.requirement_pins((directory / "requirements.txt").read_text())
    assert set(pins) == {"named", helper} and all(version == "1.0" and hashes for version, hashes in pins.values())
    assert orjson.loads((directory / "install.json").read_bytes())["lock"] == "requirements.txt"


def test_a_command_no_installed_package_can_run_is_refused_at_install(tmp_path: Path, local_index: Path) -> None:
    build_wheel(local_index, "hollow", "1.0", {}, {"hollow": "hollow_acp.cli:main"})
    state = tmp_path / "state"
    with pytest.raises(installer.InstallError, match=r"hollow's command hollow runs code the install does not hold"):
        installer.install(state, installer.plan(uvx_entry("hollow")), runner=installer.run_here)
    assert installs.versions(state, "hollow") == []  # a failed install leaves nothing behind


@pytest.mark.unit
@pytest.mark.parametrize("unpacked_last", ["named", "helper"])
def test_the_command_is_the_script_whose_module_the_install_holds_whichever_was_unpacked_last(
        tmp_path: Path, unpacked_last: str) -> None:
    """The installer's choice on a tree as a package manager leaves it, `bin/tool-acp` being the file of whichever
    distribution it happened to unpack last."""
    tree = tmp_path / "tree"
    site = tree / "lib" / "python3.99" / "site-packages"
    targets = {"named": "named_acp.cli:main", "helper": "helper.cli:main"}
    for name, target in targets.items():
        (site / f"{name}-1.0.dist-info").mkdir(parents=True)
        (site / f"{name}-1.0.dist-info" / "entry_points.txt").write_text(f"[console_scripts]\ntool-acp = {target}\n")
    (site / "helper").mkdir()
    (site / "helper" / "cli.py").write_text("def main() -> int:\n    return 0\n")
    (tree / "bin").mkdir()
    module, function = targets[unpacked_last].split(":")
    (tree / "bin" / "tool-acp").write_text(f"#!{tree}/bin/python\nimport sys\nfrom {module} import {function}\n")

    assert installer._command_script(tree, "named") == "tool-acp"
    script = (tree / "bin" / "tool-acp").read_text()
    assert "from helper.cli import main" in script and "named_acp" not in script
    assert script.startswith(f"#!{tree}/bin/python\n")
