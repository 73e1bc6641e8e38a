"""The remote-host rules (gateway/runtime/remote_hosts.py, RH-1…4), by table: which configured host a session may
use, which directories there, what a remote session cannot have, and its command and environment there."""

from __future__ import annotations

import pytest

from gateway.agenthost.ssh import SshTarget
from gateway.config import ConfigError, load_config
from gateway.runtime import remote_hosts
from gateway.runtime.remote_hosts import RemoteHost, RemoteRule

pytestmark = pytest.mark.unit

LAB = RemoteHost("lab", SshTarget("dev", "lab.example", 2222), workspace_roots=("/srv/work", "/home/dev/src"))
MINE = RemoteHost("mine", SshTarget("dev", "mine.example"), workspace_roots=("/w",), owners=("alice",))
HOSTS = {"lab": LAB, "mine": MINE}


@pytest.mark.parametrize(("owner", "asked", "found"), [
    ("bob", "lab", "lab"),
    ("bob", "ssh://dev@lab.example:2222", "lab"),  # its exact URL names it too
    ("alice", "ssh://dev@mine.example", "mine"),
    ("alice", "ssh://dev@mine.example:22", "mine"),
    ("bob", "ssh://dev@lab.example", RemoteRule.NOT_CONFIGURED),  # another port: another host
    ("bob", "ssh://root@lab.example:2222", RemoteRule.NOT_CONFIGURED),  # an owner never picks the user
    ("bob", "elsewhere", RemoteRule.NOT_CONFIGURED),
    ("bob", "mine", RemoteRule.NOT_THE_OWNERS),
])
def test_a_session_uses_only_a_host_the_operator_configured_for_its_owner(owner: str, asked: str,
                                                                         found: str | RemoteRule) -> None:
    chosen = remote_hosts.choose(HOSTS, owner, asked)
    if isinstance(found, RemoteRule):
        assert isinstance(chosen, remote_hosts.Refusal) and chosen.rule is found
    else:
        assert isinstance(chosen, RemoteHost) and chosen.name == found


@pytest.mark.parametrize(("cwd", "allowed"), [
    ("/srv/work", True),
    ("/srv/work/project", True),
    ("/home/dev/src/a/b", True),
    ("/srv/work/", True),
    ("/srv/workshop", False),  # a prefix of a root's name is not inside it
    ("/srv", False),
    ("/etc", False),
    ("srv/work", False),  # relative
    ("/srv/work/../../etc", False),
    ("/srv/work/./x", False),
    ("/srv//work/x", False),
    ("/srv/work/x\n", False),
    ("/proc/self", False),
])
def test_a_remote_directory_lies_inside_one_of_the_hosts_roots(cwd: str, allowed: bool) -> None:
    refused = remote_hosts.cwd_refusal(LAB, cwd)
    assert (refused is None) is allowed
    if refused is not None:
        assert refused.rule is RemoteRule.OUTSIDE_ROOTS and "lab" in refused.message


def test_a_system_directory_is_refused_even_under_a_root_of_slash() -> None:
    anywhere = RemoteHost("any", SshTarget("dev", "h"), workspace_roots=("/",))
    assert remote_hosts.cwd_refusal(anywhere, "/home/dev") is None
    assert remote_hosts.cwd_refusal(anywhere, "/proc/1") is not None


@pytest.mark.parametrize(("worktree", "directories", "brokered", "why"), [
    (False, [], False, None),
    (True, [], False, "worktree"),
    (False, ["/srv/work/other"], False, "additional directories"),
    (False, [], True, "key proxy"),
])
def test_what_a_remote_session_cannot_have(worktree: bool, directories: list[str], brokered: bool,
                                           why: str | None) -> None:
    refused = remote_hosts.unsupported(worktree, directories, brokered, LAB)
    if why is None:
        assert refused is None
    else:
        assert refused is not None and refused.rule is RemoteRule.NOT_REMOTE and why in refused.message


def test_the_agents_environment_there_names_no_path_of_the_gateways_machine() -> None:
    env = remote_hosts.agent_env(LAB, "/home/dev/.acp-gateway/homes/o/ref",
                                 {"HOME": "/var/gw/homes/o", "XDG_CONFIG_HOME": "/var/gw/homes/o/.config",
                                  "PATH": "/opt/gw/venv/bin:/usr/bin", "API_KEY": "k", "ACP_AGENT_EXECUTION": "x-1"},
                                 "/var/gw/homes/o")
    assert env == {"HOME": "/home/dev/.acp-gateway/homes/o/ref",
                   "XDG_CONFIG_HOME": "/home/dev/.acp-gateway/homes/o/ref/.config",
                   "PATH": LAB.path, "API_KEY": "k", "ACP_AGENT_EXECUTION": "x-1"}


def test_the_command_there_is_bare_or_under_bubblewrap_showing_only_its_own() -> None:
    assert remote_hosts.agent_command(LAB, ["agent", "--acp"], "/srv/work/p", "/h/ah", "/h") == ["agent", "--acp"]
    confined = RemoteHost("c", LAB.target, workspace_roots=LAB.workspace_roots, sandbox="bwrap")
    argv = remote_hosts.agent_command(confined, ["agent"], "/srv/work/p", "/h/.acp-gateway/homes/o/r", "/h")
    # the host's Python pins the two directories (opened without following a link), then execs bubblewrap
    assert argv[:4] == ["python3", "-I", "-c", remote_hosts.PIN]
    assert argv[4:7] == ["/h/.acp-gateway/homes/o/r", "/srv/work/p", "--"]
    bwrap = argv[7:]
    assert bwrap[0] == "bwrap" and bwrap[-2:] == ["--", "agent"] and "--bind" not in bwrap
    assert ["--tmpfs", "/h"] == bwrap[bwrap.index("/h") - 1:bwrap.index("/h") + 1]  # the remote user's home masked


def test_the_pinning_binds_directories_as_opened_and_refuses_a_link(tmp_path: object) -> None:
    import subprocess
    import sys
    from pathlib import Path

    base = Path(str(tmp_path))
    (base / "real").mkdir()
    (base / "link").symlink_to(base / "real")
    echo = [sys.executable, "-I", "-c", remote_hosts.PIN]
    shown = subprocess.run([*echo, str(base / "real"), "--", "echo", "bwrap", "--chdir", "x", "--", "a"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert shown[:2] == ["bwrap", "--bind-fd"] and shown[3:] == [str(base / "real"), "--chdir", "x", "--", "a"]
    refused = subprocess.run([*echo, str(base / "link" / "."), "--", "echo"], capture_output=True, text=True)
    assert refused.returncode != 0 and "not a directory reached without symbolic links" in refused.stderr
    refused = subprocess.run([*echo, str(base / "link"), "--", "echo"], capture_output=True, text=True)
    assert refused.returncode != 0 and "not bound" in refused.stderr


def test_the_prepare_command_quotes_what_it_is_given() -> None:
    command = remote_hosts.prepare_command("s-" + "0" * 32, "/srv/work/it's $(here)", "o-1", "ref")
    assert "'/srv/work/it'\"'\"'s $(here)'" in command and "pwd -P" in command


@pytest.mark.parametrize(("toml", "said"), [
    ('[remote_hosts.lab]\nurl = "ssh://dev@h"\nworkspace_roots = ["/w"]\n', None),
    ('[remote_hosts.lab]\nurl = "ssh://-oProxyCommand=x@h"\nworkspace_roots = ["/w"]\n', "remote_hosts.lab.url"),
    ('[remote_hosts.lab]\nurl = "ssh://dev@h"\nworkspace_roots = []\n', "workspace_roots"),
    ('[remote_hosts.lab]\nurl = "ssh://dev@h"\nworkspace_roots = ["w"]\n', "not an absolute"),
    ('[remote_hosts.lab]\nurl = "ssh://dev@h"\nworkspace_roots = ["/w/../etc"]\n', "not an absolute"),
    ('[remote_hosts."a b"]\nurl = "ssh://dev@h"\nworkspace_roots = ["/w"]\n', "name"),
    ('[remote_hosts.lab]\nurl = "ssh://dev@h"\nworkspace_roots = ["/w"]\npassword = "x"\n', "password"),
])
def test_remote_hosts_in_the_configuration_are_checked(tmp_path: object, toml: str, said: str | None) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "gateway.toml"
    path.write_text(toml)
    if said is None:
        assert load_config(path, {}).remote_hosts["lab"].workspace_roots == ["/w"]
    else:
        with pytest.raises(ConfigError, match=said.replace(".", r"\.")):
            load_config(path, {})


@pytest.mark.parametrize(("host", "allowed"), [
    ('sandbox = "none"\n', False),  # two owners, one SSH user, no sandbox
    ('sandbox = "bwrap"\n', True),
    ('sandbox = "none"\nowners = ["alice"]\n', True),
    ('sandbox = "none"\nowners = ["alice", "bob"]\n', False),
])
def test_several_owners_unconfined_on_one_remote_user_is_refused_unless_accepted(tmp_path: object, host: str,
                                                                                 allowed: bool) -> None:
    from pathlib import Path

    from gateway.runtime import confinement

    path = Path(str(tmp_path)) / "gateway.toml"
    tokens = ('[[auth.tokens]]\ntoken = "alice-token-0123456789"\nowner = "alice"\n'
              '[[auth.tokens]]\ntoken = "bob-token-0123456789ab"\nowner = "bob"\n')
    path.write_text(f'[remote_hosts.lab]\nurl = "ssh://dev@h"\nworkspace_roots = ["/w"]\n{host}{tokens}')
    said = confinement.refusal(load_config(path, {}), {})
    assert (said is None) is allowed
    if said is not None:
        assert "remote host 'lab'" in said and "bwrap" in said
        path.write_text(f'allow_unconfined_agents = true\n{path.read_text()}')
        assert confinement.refusal(load_config(path, {}), {}) is None


@pytest.mark.parametrize(("cwd", "refused"), [
    ("/home/dev/src/p", False),
    ("/home/dev", True),  # holds the hosts' spools and .ssh
    ("/home/dev/.acp-gateway/hosts/s-1", True),
    ("/home/dev/.ssh", True),
    ("/home/dev/.sshkeys", False),
    ("/", True),
])
def test_a_remote_cwd_never_holds_what_the_gateway_keeps_there(cwd: str, refused: bool) -> None:
    assert (remote_hosts.holds_remote_state("/home/dev", cwd) is not None) is refused


def test_entries_sharing_one_ssh_user_share_its_owners(tmp_path: object) -> None:
    from pathlib import Path

    from gateway.runtime import confinement

    path = Path(str(tmp_path)) / "gateway.toml"
    path.write_text('[remote_hosts.open]\nurl = "ssh://dev@h"\nworkspace_roots = ["/w"]\nowners = ["alice"]\n'
                    '[remote_hosts.lab]\nurl = "ssh://dev@h:22"\nworkspace_roots = ["/w"]\nsandbox = "bwrap"\n'
                    'owners = ["alice", "bob"]\n')
    said = confinement.refusal(load_config(path, {}), {})
    assert said is not None and "'open'" in said and "ssh://dev@h" in said


def test_a_hosts_file_root_is_pinned_only_without_links(tmp_path: object) -> None:
    import os
    from pathlib import Path

    from acp import fs

    base = Path(os.path.realpath(str(tmp_path)))
    (base / "real" / "in").mkdir(parents=True)
    (base / "link").symlink_to(base / "real")
    pinned = fs.PinnedRoot.open_without_links(str(base / "real" / "in"))
    os.close(pinned.fd)
    for path in (base / "link" / "in", base / "link", base / "real" / ".." / "real"):
        with pytest.raises(OSError):
            fs.PinnedRoot.open_without_links(str(path))
