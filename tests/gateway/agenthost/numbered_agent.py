"""A small agent for the agent host's tests: every line it writes starts with its own ordinal (1, 2, ...), so a
reader can tell which line is which offset. `flood N` writes N lines; `echo X` answers `<n> echo X`; `err X` writes
X to stderr; `env` answers with the names in its environment; `exit C` exits with C; any other line answers
`<n> got <line>`."""

from __future__ import annotations

import os
import sys


def main() -> None:
    out = sys.stdout.buffer
    written = 0

    def say(text: bytes) -> None:
        nonlocal written
        written += 1
        out.write(b"%d %s\n" % (written, text))

    for raw in sys.stdin.buffer:
        line = raw.rstrip(b"\n")
        word, _, rest = line.partition(b" ")
        if word == b"flood":
            for i in range(int(rest)):
                say(b"flood line %d of %s" % (i + 1, rest))
        elif word == b"echo":
            say(b"echo " + rest)
        elif word == b"err":
            sys.stderr.buffer.write(rest + b"\n")
            sys.stderr.flush()
            say(b"err written")
        elif word == b"env":
            say(b"env " + b",".join(sorted(name.encode() for name in os.environ)))
        elif word == b"exit":
            out.flush()
            sys.exit(int(rest))
        else:
            say(b"got " + line)
        out.flush()


if __name__ == "__main__":
    main()
