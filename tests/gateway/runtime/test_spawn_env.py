"""What each process the gateway spawns for an agent starts with (gateway/runtime/spawn_env.py), by table: which
variable from whom passes, confined or not; the wrappers' fixed environment; bwrap's arguments for the program's."""

from __future__ import annotations

import os

import pytest

from gateway.runtime.spawn_env import (
    WRAPPER_ENV,
    Source,
    Verdict,
    args_fd,
    bwrap_env_args,
    decide,
    refusal,
    wrapper_env,
)

A, S, OP = Source.AGENT, Source.SIGN_IN, Source.OPERATOR

DECISIONS = [
    # (name, value, source, confined) -> (rule, verdict)
    ("LD_PRELOAD", "/w/x.so", A, True, "ENV-2", Verdict.PASS),  # inside the sandbox only: it may
    ("PYTHONPATH", "/w", S, True, "ENV-2", Verdict.PASS),
    ("PATH", "/w/bin:/usr/bin", A, True, "ENV-2", Verdict.PASS),
    ("LD_PRELOAD", "/w/x.so", A, False, "ENV-3", Verdict.REFUSED),  # no inside: it would reach the wrappers
    ("LD_LIBRARY_PATH", "/w", S, False, "ENV-3", Verdict.REFUSED),
    ("GLIBC_TUNABLES", "glibc.malloc.x=1", A, False, "ENV-3", Verdict.REFUSED),
    ("PYTHONSTARTUP", "/w/s.py", A, False, "ENV-3", Verdict.REFUSED),
    ("NODE_OPTIONS", "--require /w/x.js", S, False, "ENV-3", Verdict.REFUSED),
    ("BASH_ENV", "/w/e.sh", A, False, "ENV-3", Verdict.REFUSED),
    ("BASH_FUNC_ls%%", "() { :; }", A, False, "ENV-3", Verdict.REFUSED),
    ("LD_PRELOAD", "/opt/tracer.so", OP, False, "ENV-4", Verdict.PASS),  # the operator's own choice
    ("PATH", "/w/bin:/usr/bin", A, False, "ENV-4", Verdict.PASS),  # steers only the agent's own program
    ("GIT_PAGER", "cat", A, False, "ENV-4", Verdict.PASS),
    ("ANTHROPIC_API_KEY", "k", S, False, "ENV-4", Verdict.PASS),
    ("", "x", A, True, "ENV-5", Verdict.REFUSED),
    ("A=B", "x", OP, True, "ENV-5", Verdict.REFUSED),
    ("A", "x\0y", A, True, "ENV-5", Verdict.REFUSED),
]


@pytest.mark.parametrize(("name", "value", "source", "confined", "rule", "verdict"), DECISIONS)
def test_which_variable_passes(name: str, value: str, source: Source, confined: bool, rule: str,
                               verdict: Verdict) -> None:
    assert decide(name, value, source, confined) == (rule, verdict)


def test_a_refusal_says_what_to_do() -> None:
    said = refusal([("GREETING", "hi"), ("LD_PRELOAD", "/w/x.so")], Source.AGENT, confined=False)
    assert said is not None and said.startswith("LD_PRELOAD changes how programs load") and "ENV-3" in said
    assert 'sandbox = "bwrap"' in said
    assert refusal([("GREETING", "hi")], Source.AGENT, confined=False) is None
    assert refusal([("LD_PRELOAD", "/w/x.so")], Source.AGENT, confined=True) is None


def test_a_wrapper_gets_the_fixed_environment_and_the_markers_only() -> None:
    env = wrapper_env({"ACP_GATEWAY_EXECUTION": "x-1"})
    assert env == {**WRAPPER_ENV, "ACP_GATEWAY_EXECUTION": "x-1"}
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_the_programs_environment_is_given_to_bwrap_through_a_descriptor() -> None:
    data = bwrap_env_args({"KEY": "a value with spaces", "LD_PRELOAD": "/w/x.so"})
    assert data.split(b"\0") == [b"--clearenv", b"--setenv", b"KEY", b"a value with spaces", b"--setenv",
                                 b"LD_PRELOAD", b"/w/x.so", b""]
    fd = args_fd(data)
    try:
        assert os.read(fd, len(data) + 1) == data  # from its start, all of it
    finally:
        os.close(fd)
