"""`python -I -m gateway.runtime.outbound --unshare PATH --slirp4netns PATH [--pass-fd N] -- CMD…`: CMD (the agent's
bubblewrap command line) in a network namespace of its own whose only way out is slirp4netns — outbound connections
work, the host's loopback services (the gateway's port, its database) do not (`--disable-host-loopback`), nor
anything listening on the host's other addresses through loopback.

The namespace is made by `unshare --net` (in the gateway's user namespace, so slirp4netns can attach to it); once
the shell inside says it runs, slirp4netns attaches; the command waits on a pipe until slirp4netns says the network
is up, then runs; this process keeps the agent's stdin and stdout where they were, stops slirp4netns when the
command ends, and exits as it did. It dies with the gateway (a parent-death signal) and the command with it
(bubblewrap's `--die-with-parent`).

It runs as the gateway's user, outside the sandbox, so it takes nothing from the agent (docs/security.md, ENV-1):
the launcher starts it isolated (`-I`), in /, with a fixed environment, and names its tools by absolute path;
`--pass-fd` is the descriptor bwrap reads the agent's environment from, handed on to it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile

PR_SET_PDEATHSIG = 1


USAGE = "usage: python -I -m gateway.runtime.outbound --unshare PATH --slirp4netns PATH [--pass-fd N] -- CMD ARGS..."


def main(argv: list[str]) -> int:
    options: dict[str, str] = {}
    while argv and argv[0] in ("--unshare", "--slirp4netns", "--pass-fd") and len(argv) >= 2:
        options[argv[0]] = argv[1]
        argv = argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    command = argv[1:]
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    unshare, slirp = options.get("--unshare", ""), options.get("--slirp4netns", "")
    passed = (int(options["--pass-fd"]),) if "--pass-fd" in options else ()
    if not (os.path.isabs(unshare) and os.access(unshare, os.X_OK)
            and os.path.isabs(slirp) and os.access(slirp, os.X_OK)):
        print("outbound network needs unshare (util-linux) and slirp4netns (Debian: apt-get install slirp4netns)",
              file=sys.stderr)
        return 126
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    inside_r, inside_w = os.pipe()
    # The shell says it runs (so the namespace exists) before slirp4netns attaches to it: attached any earlier, it
    # would find the process still in the gateway's namespace and set up nothing where the agent runs (seen under
    # load: no route out).
    script = f'echo in >&{inside_w}; exec {inside_w}>&-; read _ <&{go_r}; exec {go_r}<&-; exec "$@"'
    child = subprocess.Popen([unshare, "--net", "--", "/bin/sh", "-c", script, "sh", *command],
                             pass_fds=(go_r, inside_w, *passed))
    os.close(go_r)
    os.close(inside_w)
    inside = os.read(inside_r, 8)
    os.close(inside_r)
    if not inside:  # unshare failed (its reason is on stderr already)
        return child.wait() or 126
    said = tempfile.TemporaryFile()  # what slirp4netns says: read only if it fails (a pipe could fill and stall it)
    network = subprocess.Popen([slirp, "--configure", "--mtu=65520", "--disable-host-loopback",
                                f"--ready-fd={ready_w}", str(child.pid), "tap0"], pass_fds=(ready_w,),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=said)
    os.close(ready_w)
    ready = os.read(ready_r, 1)
    os.close(ready_r)
    if not ready:  # slirp4netns could not attach: the agent never runs without the network it was promised
        network.wait()
        said.seek(0)
        why = said.read(2000).decode(errors="replace").strip()
        print(f"outbound network could not be set up: {why or 'slirp4netns exited'}", file=sys.stderr)
        child.kill()
        child.wait()
        return 126
    os.write(go_w, b"go\n")
    os.close(go_w)
    status = child.wait()
    network.terminate()
    network.wait()
    return 128 - status if status < 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
