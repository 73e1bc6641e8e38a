"""Running a registry install's package manager confined (`agents add`, `agents update`): npm's install scripts and
a Python source package's build are their authors' code, and run here in a bubblewrap sandbox that shows
them the system, the package manager's and Python's own directories read-only, the install's tree read-write and
a scratch HOME — not the gateway's state, configuration, workspaces or the caller's home.

Its network is `outbound` (the registries; not the host's loopback services: the gateway, its database) where
slirp4netns is installed, else the host's; its environment is fixed (ENV-1, ENV-2): PATH, a locale, the scratch HOME,
and the package managers' own settings of the caller's environment (`UV_*`, `npm_config_*`, proxies, CA bundles;
not those naming the caller's own directories, which the sandbox does not show), with the caller's `~/.npmrc` and
uv configuration copied into the scratch HOME (a private registry's token in
`.npmrc` is then the install's to use, as it would be unconfined).
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from . import sandbox
from .spawn_env import WRAPPER_ENV, WRAPPER_PATH, args_fd, bwrap_env_args

BWRAP, UNSHARE, SLIRP4NETNS = shutil.which("bwrap"), shutil.which("unshare"), shutil.which("slirp4netns")
PASSED = ("UV_*", "npm_config_*", "NPM_CONFIG_*", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy",
          "https_proxy", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
          "LANG", "LC_*", "TZ")
CONFIG_FILES = (".npmrc", ".config/uv/uv.toml")  # copied from the caller's home
# uv settings that name the caller's own directories: the sandbox shows none of them, so they are left out
UV_OWN_DIRS = ("UV_CACHE_DIR", "UV_TOOL_DIR", "UV_TOOL_BIN_DIR", "UV_PYTHON_INSTALL_DIR", "UV_PYTHON_BIN_DIR",
               "UV_PROJECT_ENVIRONMENT")


def install_env(caller: Mapping[str, str], home: str, path: str) -> dict[str, str]:
    """What the package manager runs with: the passed settings of `caller`, and PATH and HOME of its own."""
    env = {name: value for name, value in caller.items()
           if any(fnmatch.fnmatchcase(name, p) for p in PASSED) and name not in UV_OWN_DIRS}
    env.update({"PATH": path, "HOME": home, "TMPDIR": "/tmp"})
    env.setdefault("LANG", "C.UTF-8")
    return env


def prefix_of(program: str | None) -> list[str]:
    """The directory a program is installed under (its bin's parent), where it keeps what it runs on."""
    if program is None:
        return []
    return [str(Path(os.path.realpath(program)).parent.parent)]


class ConfinedRunner:
    """`agents.registry.installer.Runner`, in bubblewrap. `network`: `outbound` or `host` (None: outbound where
    slirp4netns is installed)."""

    def __init__(self, state_dir: Path, network: str | None = None) -> None:
        self.state_dir = state_dir
        self.network = network or ("outbound" if UNSHARE and SLIRP4NETNS else "host")

    def __call__(self, argv: list[str], cwd: Path | None, writable: Path | None,
                 timeout: float) -> subprocess.CompletedProcess[str]:
        assert BWRAP is not None
        node, npm = shutil.which("node"), shutil.which("npm")
        path = ":".join(dict.fromkeys([*(os.path.dirname(p) for p in (node, npm) if p), WRAPPER_PATH]))
        program = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=path)
        if program is None:
            raise FileNotFoundError(argv[0])
        reads = [*prefix_of(program), *prefix_of(node), *prefix_of(npm), sys.prefix, sys.base_prefix]
        with tempfile.TemporaryDirectory(prefix="acp-gateway-install-") as home:
            caller_home = Path(os.environ.get("HOME", "/nonexistent"))
            for relative in CONFIG_FILES:
                source = caller_home / relative
                if source.is_file():
                    (Path(home) / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source, Path(home) / relative)
            work = str(writable) if writable is not None else home
            plan = sandbox.SandboxPlan(
                command=[program, *argv[1:]], cwd=str(cwd or work), writable=[work] if writable else [],
                home=home, readable=list(dict.fromkeys(reads)), system=sandbox.system_directories(),
                masked_dirs=[str(self.state_dir)], network=self.network,  # type: ignore[arg-type]
                uid=sandbox.FIRST_OWNER_UID)
            fd = args_fd(bwrap_env_args(install_env(os.environ, home, path)))
            try:
                wrapped = sandbox.bwrap_argv(plan, BWRAP, fd)
                if self.network == "outbound":
                    wrapped = [sys.executable, "-I", "-m", "gateway.runtime.outbound", "--unshare", UNSHARE or "",
                               "--slirp4netns", SLIRP4NETNS or "", "--pass-fd", str(fd), "--", *wrapped]
                return subprocess.run(wrapped, cwd="/", env=dict(WRAPPER_ENV), pass_fds=(fd,), capture_output=True,
                                      text=True, timeout=timeout, check=False)
            finally:
                os.close(fd)
