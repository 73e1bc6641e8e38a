"""An agent host on another machine through OpenSSH (gateway/agenthost/ssh.py), against a real sshd on loopback
logging in another Unix user (tests/support/sshd.py): the host application is sent over the link once, started as
that user (it outlives the link), its socket forwarded to a local one; `kill -9` of the forwarding ssh mid-flood,
a new forward, and the gateway's reattach gets every remaining line once and in order. The first transport step of
remote hosts (issue 47); sessions do not run on remote hosts yet."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

import pytest

from gateway.agenthost.client import HostConnection, HostError, new_secret
from gateway.agenthost.spec import HostSpec
from gateway.agenthost.ssh import Forward, SshOptions, SshTarget, remote_home, run_remote, ship_host, start_remote_host
from tests.support.sshd import REMOTE_USER, sshd

from .support import AGENT, gone, numbered, read_lines


def test_targets_are_parsed_strictly() -> None:
    assert SshTarget.parse("ssh://dev@build.example:2222") == SshTarget("dev", "build.example", 2222)
    assert SshTarget.parse("ssh://dev@[::1]") == SshTarget("dev", "[::1]", 22)
    for bad in ("ssh://-oProxyCommand=x@h", "ssh://dev@h:0", "ssh://dev@h:99999", "http://dev@h", "ssh://h",
                "ssh://dev@h;rm", "ssh://dev@-oProxyCommand=x"):
        with pytest.raises(ValueError):
            SshTarget.parse(bad)
    argv = SshTarget("dev", "h", 22).argv(SshOptions("/k", "/kh"), "true")
    assert argv[-2:] == ["dev@h", "true"] and "BatchMode=yes" in argv and "StrictHostKeyChecking=yes" in argv


async def test_a_host_over_ssh_survives_a_killed_link(tmp_path: Path) -> None:
    async with sshd(tmp_path / "sshd") as server:
        target, options = server.target, server.options
        home = await remote_home(target, options)
        assert home == server.home
        application = await ship_host(target, options, home)
        assert application == await ship_host(target, options, home)  # sent once per version
        agent = f"{home}/numbered_agent.py"
        await run_remote(target, options, f"cat > {agent}", Path(AGENT).read_bytes())
        secret, hashed = new_secret()
        base = f"{home}/.acp-gateway/hosts/test-{secrets.token_hex(6)}"  # this run's own
        spec = HostSpec(argv=["/usr/bin/python3", agent], cwd=home,
                        env={"PATH": "/usr/bin:/bin", "ACP_AGENT_EXECUTION": f"ssh-test-{tmp_path.name}"},
                        spool_dir=f"{base}/spool", socket_path=f"{base}/host.sock", secret_hash=hashed,
                        spool_max_bytes=1 << 20, linger=60.0, tree_marker="ACP_AGENT_EXECUTION",
                        log_path=f"{base}/host.log")
        handle = await start_remote_host(target, options, application, spec, python="/usr/bin/python3")
        forward = Forward(target, options, tmp_path / "forwarded.sock", spec.socket_path)
        try:
            owner = Path(f"/proc/{handle.host_pid}").stat().st_uid
            assert owner == os.stat(home).st_uid != os.geteuid()  # the remote user's, not the gateway's
            await forward.start()
            first = await HostConnection.attach(str(forward.local), secret, 1, 0)
            first.send(b"flood 3000")
            seen = await read_lines(first, 1000)
            first.ack(800)
            assert forward.proc is not None
            os.kill(forward.proc.pid, signal.SIGKILL)  # the link drops mid-flood
            await forward.proc.wait()
            with contextlib.suppress(HostError, ConnectionError):
                while await first.next_line() is not None:
                    pass
            await forward.start()  # a new link
            second = await HostConnection.attach(str(forward.local), secret, 2, 800)
            rest = await read_lines(second, 2200)
            assert [offset for offset, _ in rest] == list(range(801, 3001)) and numbered(seen[:800] + rest)
            status = await second.status()
            assert status["head"] == 3000
            second.stop()
            await gone(handle.agent_pid)
        finally:
            await forward.stop()
            for pid in (handle.host_pid, handle.agent_pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await run_remote(target, options, f"rm -rf {base} {agent}")
        assert target.user == REMOTE_USER


async def test_a_remote_hosts_pid_is_never_taken_for_a_local_host(tmp_path: Path) -> None:
    from gateway.runtime.hosting import HostRecord, _is_host

    from .support import start_numbered

    local = await start_numbered(tmp_path)  # a local host, whose pid a remote one may happen to carry
    try:
        pid = local.handle.host_pid
        assert _is_host(HostRecord("/s", "/sp", "k", pid, pid, [], 0.0))
        assert not _is_host(HostRecord("/s", "/sp", "k", pid, pid, [], 0.0, "lab", "/r/socket", "/home/dev"))
    finally:
        local.kill()
