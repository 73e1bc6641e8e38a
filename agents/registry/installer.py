"""Installing a registry agent, pinned: the exact version resolved once, installed into its own directory with the
package manager's own integrity checks, its files recorded, and a profile written that launches exactly that.

- npm (`npx` entries): `npm install --save-exact` into a private prefix; the lockfile it writes holds every
  package's `integrity` hash, is kept beside the install, and a reinstall of the same version runs `npm ci` from it,
  which refuses a tarball that does not match.
- PyPI (`uvx` entries): installed as uvx installs them, by uv itself (a dependency of the gateway): a venv of the
  gateway's own Python; `uv pip compile --generate-hashes` resolves the package once into a requirements file with
  the SHA-256 of every distribution of each pinned version, and `uv pip install --require-hashes --no-deps` installs
  from it: nothing is installed that the file does not name and hash. Where two of the install's packages declare
  the console script that is the agent's command (a wrapper package and the package it wraps), which file stays in
  `bin/` depends on the order they were unpacked in; the command is made the one whose module the install holds.
- binary entries: the registry gives no checksum, so the archive's SHA-256 is one the user supplies (`--sha256`)
  or, only when asked (`--trust-on-first-use`), the one of what is downloaded now, recorded: a reinstall must match.

Never `@latest` at launch, never a package runner: the profile's command is a file of the install.
A package's own install scripts are its author's code: the gateway's CLI runs the package managers confined
(`Runner`), writing only in the install's `tree`; what the gateway writes beside it (the lockfile copy, the record,
the profile) is out of their reach, and what it reads of the tree is refused where a link leads out (`_inside`).
"""

from __future__ import annotations

import configparser
import contextlib
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from agents.profiles import SHIPPED_DIR, load_profile

from . import installs, manifest
from .index import VERSION_FORM, RegistryEntry, npm_spec, pypi_spec

INSTALL_TIMEOUT = 900.0  # seconds: a large agent (a 700 MB venv) installs in about a minute here
MAX_ARCHIVE_BYTES = 1 << 30
# Registry ids whose agent the gateway ships a profile for: what that profile knows of restoring it carries over.
KNOWN_PROFILES = {"claude-acp": "claude", "codex-acp": "codex", "gemini": "gemini", "auggie": "auggie",
                  "github-copilot": "copilot", "opencode": "opencode", "amp-acp": "amp"}
KNOWLEDGE = ("native_session_resume", "history_context_injection", "resume_args", "sign_in_vars", "auto_resume")
# A console script's target (`module.sub:object.attr`, optionally `[extras]`): what the gateway writes a launcher
# for; anything else is not one it can vouch for.
ENTRY_POINT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*:\s*"
                         r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*(?:\[[^\]]*\])?\s*$")
SCRIPT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class InstallError(RuntimeError):
    """One paragraph: what failed, what the package manager said last, what to do next. Nothing was changed."""


@dataclass(frozen=True)
class Plan:
    """What `add` will install: pure, from the entry and the version asked for."""

    entry: RegistryEntry
    kind: str  # npx | uvx | binary
    package: str  # npm or PyPI name (with extras), or the archive URL
    version: str
    args: list[str]
    env: dict[str, str]
    cmd: str | None = None  # a binary's command inside its archive
    archive_sha256: str | None = None


def platform_key() -> str:
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine().lower())
    return f"{sys.platform.replace('win32', 'windows')}-{machine}"


def plan(entry: RegistryEntry, version: str | None = None, kind: str | None = None) -> Plan:
    """The install of `entry` at `version` (default: the version its package names, else the entry's)."""
    if version is not None and not VERSION_FORM.match(version):
        raise InstallError(f"{entry.id}@{version[:40]}: {version[:40]!r} is not a version")
    kinds = entry.kinds()
    if kind is not None and kind not in kinds:
        raise InstallError(f"agent {entry.id} has no {kind} distribution (it has: {', '.join(kinds) or 'none'})")
    chosen = kind or next((k for k in kinds if k != "binary" or platform_key() in (entry.distribution.binary or {})),
                          None)
    if chosen is None:
        raise InstallError(f"agent {entry.id} has nothing this gateway installs on {platform_key()} "
                           f"(its distributions: {', '.join(kinds) or 'none of npx, uvx, binary'})")
    d = entry.distribution
    if chosen == "npx" and d.npx is not None:
        name, pinned = npm_spec(d.npx.package)
        return Plan(entry, "npx", name, version or pinned or entry.version, list(d.npx.args), dict(d.npx.env))
    if chosen == "uvx" and d.uvx is not None:
        name, pinned = pypi_spec(d.uvx.package)
        return Plan(entry, "uvx", name, version or pinned or entry.version, list(d.uvx.args), dict(d.uvx.env))
    target = (d.binary or {}).get(platform_key())  # type: ignore[call-overload]
    if target is None:
        raise InstallError(f"agent {entry.id} has no archive for {platform_key()} (it has: "
                           f"{', '.join(sorted(d.binary or {}))})")
    if version is not None and version != entry.version:
        raise InstallError(f"agent {entry.id} is a binary distribution: the registry names one archive, of version "
                           f"{entry.version}; another version cannot be resolved from it")
    return Plan(entry, "binary", target.archive, entry.version, list(target.args), dict(target.env), target.cmd,
                target.sha256)


class Runner(Protocol):
    """How an install runs its package manager: `argv` in `cwd`, writing only in `writable` (the install's own
    directory), within `timeout`. The gateway's CLI confines it (`gateway.runtime.install_sandbox`): a package's
    install scripts are the package author's code."""

    def __call__(self, argv: list[str], cwd: Path | None, writable: Path | None,
                 timeout: float) -> subprocess.CompletedProcess[str]: ...


def run_here(argv: list[str], cwd: Path | None, writable: Path | None,
             timeout: float) -> subprocess.CompletedProcess[str]:
    """Unconfined: as the caller's user, in its environment (where no sandbox can run)."""
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)


def _run(runner: Runner, argv: list[str], what: str, cwd: Path | None = None, writable: Path | None = None,
         timeout: float = INSTALL_TIMEOUT) -> str:
    try:
        done = runner(argv, cwd, writable, timeout)
    except FileNotFoundError:
        raise InstallError(f"{what}: {argv[0]} is not installed here") from None
    except subprocess.TimeoutExpired:
        raise InstallError(f"{what}: gave up after {timeout:.0f} s") from None
    if done.returncode != 0:
        output = done.stderr or done.stdout
        wanted = re.search(r"does\s+not\s+satisfy\s+Python\s*(\S+?),?\s+and\s", output)  # uv wraps its lines
        if wanted:
            raise InstallError(f"{what} failed: it needs Python {wanted.group(1).strip()}, and this gateway runs "
                               f"Python {platform.python_version()} (a uvx agent is installed with the gateway's "
                               "own Python)")
        said = [line.strip()[:300] for line in output.splitlines()
                if line.strip() and not line.lstrip().lower().startswith("warning:")]
        tail = "\n  ".join(said[-6:]) or f"exit status {done.returncode}"
        raise InstallError(f"{what} failed:\n  {tail}")
    return done.stdout


def _inside(tree: Path, relative: str) -> Path:
    """`tree`/`relative`, refused when a link (an install script's) leads it out of the tree: the gateway reads
    only what the install wrote."""
    path = tree / relative
    real, root = os.path.realpath(path), os.path.realpath(tree)
    if real != root and not real.startswith(root + os.sep):
        raise InstallError(f"{relative} in the install leads out of it (a symbolic link): refused")
    return path


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise InstallError("npm is not installed here: an npx agent needs npm (and Node.js) to install and to run")
    return npm


def _npm_versions(runner: Runner, name: str) -> list[str]:
    try:
        out = _run(runner, [_npm(), "view", name, "versions", "--json"], f"npm view {name}", timeout=120)
        found = orjson.loads(out or b"[]")
    except (InstallError, orjson.JSONDecodeError):
        return []
    return [str(v) for v in (found if isinstance(found, list) else [found])]


def _install_npm(runner: Runner, p: Plan, tree: Path, directory: Path,
                 reuse_lock: Path | None) -> tuple[list[str], str]:
    npm = _npm()
    tree.mkdir(parents=True)
    (tree / "package.json").write_bytes(orjson.dumps({"name": f"acp-gateway-agent-{p.entry.id}", "private": True,
                                                      "dependencies": {p.package: p.version}}))
    quiet = ["--no-audit", "--no-fund", "--loglevel=error"]
    if reuse_lock is not None:
        shutil.copyfile(reuse_lock, tree / "package-lock.json")
        _run(runner, [npm, "ci", *quiet], f"npm ci (from the recorded lockfile) of {p.package}@{p.version}",
             cwd=tree, writable=tree)
    else:
        if p.version not in _npm_versions(runner, p.package):
            known = _npm_versions(runner, p.package)
            raise InstallError(f"npm has no {p.package}@{p.version}" + (
                f"; versions it has: {', '.join(known[-8:])} (add {p.entry.id}@VERSION installs one)" if known
                else " (is the package name right, and the npm registry reachable?)"))
        _run(runner, [npm, "install", "--save-exact", *quiet, f"{p.package}@{p.version}"],
             f"npm install {p.package}@{p.version}", cwd=tree, writable=tree)
    shutil.copyfile(_inside(tree, "package-lock.json"), directory / "package-lock.json")
    package_json = orjson.loads(_inside(tree, f"node_modules/{p.package}/package.json").read_bytes())
    installed = str(package_json.get("version"))
    if installed != p.version:
        raise InstallError(f"npm installed {p.package}@{installed}, not {p.version}")
    bins = package_json.get("bin")
    unscoped = p.package.rsplit("/", 1)[-1]
    if isinstance(bins, str):
        name = unscoped
    elif isinstance(bins, dict) and bins:
        name = unscoped if unscoped in bins else next(iter(bins)) if len(bins) == 1 else ""
        if not name:
            raise InstallError(f"{p.package} has several commands ({', '.join(bins)}) and none named {unscoped}")
    else:
        raise InstallError(f"{p.package}@{p.version} has no command to run (no `bin` in its package.json)")
    return [f"node_modules/.bin/{name}"], "package-lock.json"


def _uv() -> str:
    """The uv of the gateway's own environment (the `uv` package installs it beside the gateway's Python)."""
    found = None
    with contextlib.suppress(ImportError, FileNotFoundError):
        from uv import find_uv_bin

        found = find_uv_bin()
    found = found or shutil.which("uv")
    if found is None:
        raise InstallError("uv is not installed here: a uvx agent is installed with uv (`pip install uv` into the "
                           "gateway's environment; it is one of the gateway's dependencies)")
    return found


def _install_pypi(runner: Runner, p: Plan, tree: Path, directory: Path,
                  reuse_lock: Path | None) -> tuple[list[str], str]:
    uv = _uv()
    tree.mkdir(parents=True)  # the only place the install writes: made here, filled there
    _run(runner, [uv, "venv", "--quiet", "--no-project", "--python", sys.executable, str(tree)],
         "creating the agent's venv", writable=tree)
    python = tree / "bin" / "python"
    requirements = directory / "requirements.txt"
    if reuse_lock is None:
        request, resolution = tree / ".acp-gateway-request.txt", tree / ".acp-gateway-resolution.txt"
        for path in (request, resolution):
            path.unlink(missing_ok=True)  # a link planted there would be written through
        request.write_text(f"{p.package}=={p.version}\n")
        _run(runner, [uv, "pip", "compile", "--quiet", "--no-header", "--generate-hashes", "--python", str(python),
                      "--output-file", str(resolution), str(request)],
             f"resolving {p.package}=={p.version} with uv", cwd=tree, writable=tree)
        text = _inside(tree, resolution.name).read_text()
        for path in (request, resolution):
            path.unlink()
        for name, (version, hashes) in requirement_pins(text).items():
            if not hashes:
                raise InstallError(f"uv gave no SHA-256 for {name} {version}: it cannot be installed with "
                                   "--require-hashes")
        requirements.write_text(text)
    else:
        shutil.copyfile(reuse_lock, requirements)
    given = tree / ".acp-gateway-requirements.txt"  # where the confined uv can read it
    given.unlink(missing_ok=True)  # a link planted there would be written through
    shutil.copyfile(requirements, given)
    # --compile-bytecode: the tree is read-only once installed, so what is not compiled now is compiled at every start
    _run(runner, [uv, "pip", "install", "--quiet", "--require-hashes", "--no-deps", "--compile-bytecode",
                  "--python", str(python), "-r", str(given)],
         f"uv pip install --require-hashes of {p.package}=={p.version}", cwd=tree, writable=tree)
    given.unlink(missing_ok=True)
    return [f"bin/{_command_script(tree, p.package.split('[', 1)[0])}"], "requirements.txt"


def requirement_pins(text: str) -> dict[str, tuple[str, list[str]]]:
    """A requirements file with hashes (as `uv pip compile --generate-hashes` writes it, or one requirement a
    line) -> {normalized name: (version, [sha256 hex...])}."""
    joined = re.sub(r"\\\n", " ", text)
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):  # an option line (`--index-url`…), not a requirement
            continue
        spec, *options = line.split()
        name, _, version = spec.partition("==")
        hashes = [o.removeprefix("--hash=sha256:") for o in options if o.startswith("--hash=sha256:")]
        pins[_normalized(name)] = (version, hashes)
    return pins


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _site_packages(tree: Path) -> list[Path]:
    return sorted(tree.glob("lib/python*/site-packages"))


def _console_scripts(tree: Path) -> dict[str, list[tuple[str, str]]]:
    """Every console script the install's distributions declare: name -> [(distribution, target)...], in the
    distributions' order by name."""
    found: dict[str, list[tuple[str, str]]] = {}
    for site in _site_packages(tree):
        for info in sorted(site.glob("*.dist-info")):
            if not (info / "entry_points.txt").is_file():
                continue
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            parser.optionxform = str  # type: ignore[assignment,method-assign]  # script names keep their case
            try:
                parser.read_string(_inside(tree, str((info / "entry_points.txt").relative_to(tree))).read_text())
            except configparser.Error:
                continue
            if parser.has_section("console_scripts"):
                distribution = _normalized(info.name.split("-", 1)[0])
                for name, target in parser.items("console_scripts"):
                    found.setdefault(name, []).append((distribution, target))
    return found


def _module_installed(tree: Path, module: str) -> bool:
    """Whether the install holds `module` (a file or package of its site-packages, or the standard library's):
    read from the files, never imported (importing runs the package's code)."""
    if module.split(".")[0] in sys.stdlib_module_names:
        return True
    parts = module.split(".")
    for site in _site_packages(tree):
        relative = site.relative_to(tree).joinpath(*parts)
        folder = relative.parent
        candidates = [relative / "__init__.py", relative.with_name(parts[-1] + ".py")]
        if (tree / folder).is_dir():
            candidates += [folder / f.name for f in (tree / folder).iterdir()
                           if f.name.startswith(parts[-1] + ".") and f.name.endswith((".so", ".pyc"))]
        if any(_inside(tree, str(c)).is_file() for c in candidates) or _inside(tree, str(relative)).is_dir():
            return True
    return False


def _command_script(tree: Path, package: str) -> str:
    """The script of `bin/` that is the package's command: the one named as the package, else its only console
    script. Where several installed distributions declare that script, which one's file stayed depends on the
    order they were unpacked in: the file is written for the package's own target when the install holds its
    module, else for the first other distribution's whose module it holds. A command whose module the install
    does not hold fails the install here, not at the agent's first start."""
    scripts = _console_scripts(tree)
    own = _normalized(package)
    if (tree / "bin" / package).is_file() or package in scripts:
        name = package
    else:
        declared = sorted(n for n, targets in scripts.items() if any(d == own for d, _ in targets))
        if len(declared) != 1:
            raise InstallError(f"{package} has no command named {package}" + (
                f" and several others ({', '.join(declared)})" if declared else " and no other"))
        name = declared[0]
    if not SCRIPT_NAME.match(name):  # a name of the package's choosing, made a path of the tree below
        raise InstallError(f"{package}'s command {name[:60]!r} is not a file name: refused")
    targets = scripts.get(name, [])
    if not targets:
        return name  # a script file the package ships as it is (not an entry point)
    runnable = sorted(((d, t) for d, t in targets if (m := ENTRY_POINT.match(t)) and _module_installed(tree, m[1])),
                      key=lambda pair: pair[0] != own)
    if not runnable:
        shown = "; ".join(f"{d}: {t.strip()}" for d, t in targets)
        raise InstallError(f"{package}'s command {name} runs code the install does not hold ({shown}): it cannot "
                           "start. Another version may be packaged right: add ID@VERSION installs one")
    if len(targets) > 1:
        _write_launcher(tree, name, *runnable[0])
    return name


def _write_launcher(tree: Path, name: str, distribution: str, target: str) -> None:
    """`bin/NAME` as an installer writes a console script, for `distribution`'s target."""
    match = ENTRY_POINT.match(target)
    if match is None or not SCRIPT_NAME.match(name):
        raise InstallError(f"the console script {name[:60]!r} ({target[:80]!r}) is not one the gateway can write")
    module, attribute = match[1], match[2]
    script = _inside(tree, f"bin/{name}")
    script.unlink(missing_ok=True)  # a link planted there would be written through
    script.write_text(
        f"#!{tree / 'bin' / 'python'}\n"
        f"# {name}: {distribution}'s console script ({module}:{attribute}), written by acp-gateway: another\n"
        "# distribution of this install declares a script of the same name, whose module it does not hold.\n"
        "import sys\n"
        f"from {module} import {attribute.split('.', 1)[0]}\n"
        "if __name__ == '__main__':\n"
        f"    sys.exit({attribute}())\n")
    script.chmod(0o755)


def _download(url: str, to: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as answer, to.open("wb") as out:  # https only: the index says so
        total = 0
        while chunk := answer.read(1 << 20):
            total += len(chunk)
            if total > MAX_ARCHIVE_BYTES:
                raise InstallError(f"{url}: larger than {MAX_ARCHIVE_BYTES} bytes; refused")
            out.write(chunk)


def _unpack(archive: Path, tree: Path) -> None:
    tree.mkdir(parents=True)
    name = archive.name.lower()
    if name.endswith(".zip"):
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                if member.startswith("/") or ".." in Path(member).parts:
                    raise InstallError(f"the archive holds a path outside itself: {member!r}; refused")
            z.extractall(tree)
        return
    try:
        with tarfile.open(archive) as t:
            t.extractall(tree, filter="data")  # no absolute paths, no '..', no links out, no devices
    except (tarfile.TarError, OSError) as exc:
        raise InstallError(f"the archive could not be unpacked safely: {exc}") from None


def _install_binary(p: Plan, tree: Path, directory: Path, archive: Path | None, sha256: str | None,
                    trust_first_use: bool, recorded: str | None) -> tuple[list[str], str | None, str]:
    expected = sha256 or recorded or p.archive_sha256
    trust = "supplied" if sha256 else "first-use" if recorded else "registry" if p.archive_sha256 else None
    if expected is None and not trust_first_use:
        raise InstallError(
            f"the registry gives no checksum for {p.entry.id}'s archive ({p.package}), so nothing says the file "
            "downloaded is the one its publisher built. Give --sha256 HEX (from the publisher's release page), or "
            "--trust-on-first-use to record the SHA-256 of what is downloaded now (every reinstall must then match)")
    with tempfile.TemporaryDirectory() as scratch:
        local = archive or Path(scratch) / Path(p.package).name
        if archive is None:
            _download(p.package, local)
        digest = manifest.sha256_file(local)
        if expected is not None and digest != expected:
            raise InstallError(f"{p.entry.id}'s archive has SHA-256 {digest}, not {expected}: refused (a changed "
                               "or corrupted download)")
        _unpack(local, tree)
    command = (tree / p.cmd).resolve() if p.cmd else None
    if command is None or not command.is_file() or tree.resolve() not in command.parents:
        raise InstallError(f"the archive has no file {p.cmd!r} to run")
    command.chmod(command.stat().st_mode | 0o111)
    return [command.relative_to(tree.resolve()).as_posix()], digest, trust or "first-use"


def _profile_toml(record: installs.InstallRecord, directory: Path, args: list[str]) -> str:
    """The profile that launches exactly this install: its command a file of the tree, its version and install
    recorded, and what the gateway's own profile of the same agent knows of restoring it."""
    known: dict[str, Any] = {}
    shipped = KNOWN_PROFILES.get(record.id)
    if shipped is not None and (SHIPPED_DIR / f"{shipped}.toml").is_file():
        base = load_profile(SHIPPED_DIR / f"{shipped}.toml")
        known = {k: getattr(base, k) for k in KNOWLEDGE}
    tree = directory / "tree"
    lines = [
        "# Written by `acp-gateway agents add`: launches exactly this install. Reinstall rather than edit it.",
        f"id = {_toml(record.id)}",
        f"name = {_toml(record.name or record.id)}",
        f"version = {_toml(record.version)}",
        f"install = {_toml(str(directory))}",
        f"command = {_toml([str(tree / record.command[0]), *record.command[1:], *args])}",
        f"native_session_resume = {_toml(known.get('native_session_resume', True))}",
        f"history_context_injection = {_toml(known.get('history_context_injection', False))}",
        f"sandbox_read = {_toml([str(tree)])}",
    ]
    for key in ("resume_args", "sign_in_vars"):
        if known.get(key):
            lines.append(f"{key} = {_toml(known[key])}")
    if known.get("auto_resume") is False:
        lines.append("auto_resume = false")
    env = dict(record.env)
    if record.kind == "uvx":  # its .pyc files were compiled at install: none is written into the tree later
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if env:
        lines.append("[env]")
        lines += [f"{_toml(k)} = {_toml(v)}" for k, v in sorted(env.items())]
    return "\n".join(lines) + "\n"


def _toml(value: Any) -> str:
    """A TOML value of a string, boolean or list of strings (JSON's string escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return orjson.dumps(str(value)).decode()


def install(state_dir: Path, p: Plan, *, force: bool = False, archive: Path | None = None,
            sha256: str | None = None, trust_first_use: bool = False,
            say: Callable[[str], None] = lambda _: None, runner: Runner = run_here) -> installs.InstallRecord:
    """Install the plan into the state directory (beside any other version of the agent) and make it the agent's
    current version. An install already there is kept unless `force`; a failed one leaves nothing behind."""
    directory = installs.install_dir(state_dir, p.entry.id, p.version)
    if (directory / "profile.toml").is_file() and not force:
        installs.set_current(state_dir, p.entry.id, p.version)
        return installs.read_record(directory)
    previous = installs.read_record(directory) if (directory / "install.json").is_file() else None
    with tempfile.TemporaryDirectory() as scratch:
        # A reinstall of the same version installs what was recorded: npm ci from the lockfile, uv from the hashes.
        reuse = None
        if previous is not None and previous.lock and (directory / previous.lock).is_file():
            reuse = Path(scratch) / previous.lock
            shutil.copyfile(directory / previous.lock, reuse)
        # Built where it stays (a venv's scripts name their own path), and listed only once profile.toml is written;
        # the install it replaces waits aside, and comes back if the new one fails.
        aside = directory.with_name(f".{p.version}.replaced")
        if aside.exists():
            installs.remove_tree(aside)
        if directory.exists():
            directory.rename(aside)
        directory.mkdir(parents=True)
        try:
            record = _build(runner, directory, p, reuse, archive, sha256, trust_first_use,
                            previous.archive_sha256 if previous else None, say)
        except BaseException:
            installs.remove_tree(directory)
            if aside.exists():
                aside.rename(directory)
            elif not any(directory.parent.iterdir()):  # the agent's first install failed: nothing of it stays
                directory.parent.rmdir()
            raise
        if aside.exists():
            installs.remove_tree(aside)
    installs.set_current(state_dir, p.entry.id, p.version)
    return record


def _build(runner: Runner, directory: Path, p: Plan, reuse: Path | None, archive: Path | None, sha256: str | None,
           trust_first_use: bool, recorded: str | None, say: Callable[[str], None]) -> installs.InstallRecord:
    tree = directory / "tree"
    digest, trust, lock = None, None, None
    say(f"installing {p.entry.id} {p.version} ({p.kind}: {p.package}) into {directory}")
    if p.kind == "npx":
        command, lock = _install_npm(runner, p, tree, directory, reuse)
    elif p.kind == "uvx":
        command, lock = _install_pypi(runner, p, tree, directory, reuse)
    else:
        command, digest, trust = _install_binary(p, tree, directory, archive, sha256, trust_first_use, recorded)
    record = installs.InstallRecord(
        id=p.entry.id, name=p.entry.name, version=p.version, kind=p.kind,  # type: ignore[arg-type]
        package=p.package, registry_version=p.entry.version, command=command, env=p.env, lock=lock,
        lock_sha256=manifest.sha256_file(directory / lock) if lock else None, archive_sha256=digest,
        archive_trust=trust, installed_at=time.time())  # type: ignore[arg-type]
    installs.write_json(directory / "install.json", record.model_dump())
    installs.write_json(directory / "manifest.json", manifest.take(tree))
    manifest.make_read_only(tree)
    (directory / "profile.toml").write_text(_profile_toml(record, directory, p.args))
    return record


def remove(state_dir: Path, agent_id: str, version: str | None = None) -> list[str]:
    """Remove one installed version (default: every version) of an agent; the versions removed. The current
    version moves to the newest one left."""
    removed = []
    for installed in installs.versions(state_dir, agent_id):
        if version is None or installed == version:
            installs.remove_tree(installs.install_dir(state_dir, agent_id, installed))
            removed.append(installed)
    left = installs.versions(state_dir, agent_id)
    if installs.current_version(state_dir, agent_id) not in left:
        installs.set_current(state_dir, agent_id, left[-1] if left else None)
    if not left:
        root = installs.installs_root(state_dir) / agent_id
        if root.is_dir() and not any(root.iterdir()):
            root.rmdir()
    return removed


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
