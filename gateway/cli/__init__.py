"""The `acp-gateway` command line: `main` parses and dispatches; `frontend` holds the wire-only verbs (a client of
the API like any other; an agent's questions are asked in `questions`, their answers checked by `form_rules`),
`agents` the registry verbs, `doctor` the set-up report, `run` a local agent without a gateway."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """`acp-gateway`'s entry point; the parser is imported only when the command line runs, so importing one verb's
    module (the wire-only `frontend`) does not import every other."""
    from .main import main as run

    return run(argv)
