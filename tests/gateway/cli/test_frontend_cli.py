"""The terminal frontend (`acp-gateway sessions|start|…`) against a real gateway, as a user types it."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from gateway import __version__
from tests.gateway_harness import GatewayProcess, reference_profile

SECRET = "dummy-ref-key-0123456789"  # a profile's env value: never shown, even when the agent repeats it


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    (tmp_path / "agents").mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(tmp_path / "agents", tmp_path / "agent-state", "reference")
    reference_profile(tmp_path / "agents", tmp_path / "agent-state", "no-key", "--fault", "session/new=internal",
                      "--fault-reason", "reference agent: REF_API_KEY is not set")
    reference_profile(tmp_path / "agents", tmp_path / "agent-state", "leaky", "--fault", "session/new=internal",
                      "--fault-reason", f"reference agent: key {SECRET} was refused",
                      extra=f'[env]\nREF_API_KEY = "{SECRET}"\n')
    offline = tmp_path / "bin" / "npx"  # a package runner that cannot reach its registry, as npx offline says it
    offline.parent.mkdir()
    offline.write_text("#!/bin/sh\necho 'npm error code ENOTFOUND' >&2\n"
                       "echo 'npm error network request to https://registry.npmjs.org/@scope%2fagent failed' >&2\n"
                       "exit 1\n")
    offline.chmod(0o755)
    (tmp_path / "agents" / "offline.toml").write_text(
        f'id = "offline"\ncommand = ["{offline}", "-y", "@scope/agent"]\n')
    reference_profile(tmp_path / "agents", tmp_path / "agent-state", "grumpy",
                      "--fault-reason", "reference agent: the model at api.example.invalid does not answer")
    gw = GatewayProcess(tmp_path / "state", tmp_path / "agents")
    await gw.start()
    yield gw
    await gw.stop()


async def cli(gw: GatewayProcess | None, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    connection = ["--url", gw.url, "--token", gw.token or ""] if gw is not None else []
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, *connection, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_a_session_from_start_to_cancel(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--title", "from the terminal", cwd=tmp_path / "work")
    assert rc == 0 and "WAITING_FOR_INPUT; agent running: yes" in out
    sid = out.split()[0]
    rc, out, _ = await cli(gateway, "sessions")
    assert rc == 0 and sid in out and "from the terminal" in out
    rc, out, _ = await cli(gateway, "prompt", sid, "hello cli")
    # a chat, not a log: the answer's text as it streams, no per-chunk prefixes
    assert rc == 0 and out.splitlines() == ["echo: hello cli", "stop reason: end_turn"], out
    rc, out, _ = await cli(gateway, "prompt", sid, "/tool ls README.md")
    assert rc == 0 and out.splitlines()[:2] == ["[tool] ls (pending)", "[tool] ls (completed)"], out
    rc, out, _ = await cli(gateway, "history", sid)
    assert rc == 0 and "[user_message] hello cli" in out and "[agent_message] echo: hello cli" in out
    assert "[tool_call ls]\n[tool_result ls] README.md" in out
    rc, out, _ = await cli(gateway, "status", sid)
    assert rc == 0 and out.strip() == "WAITING_FOR_INPUT (task REVIEW); agent running: yes; needs a resume: no", out
    rc, out, _ = await cli(gateway, "resume", sid)
    assert rc == 0 and "agent running: yes" in out
    rc, out, _ = await cli(gateway, "cancel-turn", sid)  # no turn: said, not silent
    assert rc == 0 and out.strip() == f"session {sid} has no turn running (WAITING_FOR_INPUT); nothing to cancel"
    rc, out, _ = await cli(gateway, "cancel", sid)
    assert rc == 0 and out.strip() == "CANCELLED"
    rc, out, _ = await cli(gateway, "cancel", sid)  # already terminal: still success
    assert rc == 0 and out.strip() == "CANCELLED"
    rc, _, err = await cli(gateway, "status", "s-nope")
    assert rc == 1 and "not found (code -32002)" in err


async def test_options_chosen_at_start_listed_set_and_the_commands(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--mode", "plan", "--config", "verbose=true", "--config", "colour=blue",
                           cwd=tmp_path / "work")
    assert rc == 0 and "not applied: the agent offers no option \"colour\"" in out  # said, not an error
    sid = out.split()[0]
    rc, out, _ = await cli(gateway, "config", sid)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "mode: plan (chosen by user)    [ask | code | plan]  Mode"
    assert lines[1] == "model: ref-small    [ref-small | ref-large]  Model"
    assert lines[3] == "verbose: true (chosen by user)    [true | false]  Verbose"
    rc, out, _ = await cli(gateway, "config", sid, "model", "ref-large")
    assert rc == 0 and out.strip() == "model: ref-large (chosen by user)    [ref-small | ref-large]  Model"
    rc, out, _ = await cli(gateway, "config", sid, "verbose", "false")
    assert rc == 0 and out.startswith("verbose: false (chosen by user)")
    rc, _, err = await cli(gateway, "config", sid, "model", "ref-huge")
    assert rc == 1 and "its values: ref-small, ref-large" in err and "(code -32017)" in err
    rc, _, err = await cli(gateway, "config", sid, "verbose", "maybe")
    assert rc == 2 and "give true or false" in err
    rc, out, _ = await cli(gateway, "prompt", sid, "/config")
    assert rc == 0 and out.splitlines()[0] == "config: mode=plan model=ref-large effort=medium verbose=false"
    rc, out, _ = await cli(gateway, "config", sid)
    assert "usage: " in out and " of 200000 tokens, " in out
    rc, out, _ = await cli(gateway, "commands", sid)
    assert rc == 0 and "/read PATH [LINE [LIMIT]]    Read a file through the client (fs/read_text_file)" in out
    assert "/config    Say the session's current mode, model, effort and verbosity" in out
    rc, out, _ = await cli(gateway, "config", sid, "--json")
    assert rc == 0 and orjson.loads(out)["chosen"]["model"] == {"value": "ref-large", "by": "user"}
    rc, out, _ = await cli(gateway, "config", sid, "colour", "--unset")
    assert rc == 0 and out.strip() == "colour: no longer chosen"
    rc, out, _ = await cli(gateway, "config", sid)
    assert "not applied" not in out


async def test_a_permission_answered_by_the_permission_command(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--cwd", str(tmp_path / "work"))
    assert rc == 0
    sid = out.split()[0]
    prompt = asyncio.ensure_future(cli(gateway, "prompt", sid, "/permission"))

    async def pending() -> str:
        while True:  # the request exists once the agent asked: until then, the list is empty
            rc, out, _ = await cli(gateway, "permission", sid)
            assert rc == 0
            if out.startswith("permission request "):
                return out
    listed = await asyncio.wait_for(pending(), 60)
    request_id = listed.split()[2].rstrip(":")
    assert "allow-once (Allow once)" in listed
    rc, out, _ = await cli(gateway, "permission", sid, request_id, "allow-once")
    assert rc == 0 and out.strip() == "answered"
    rc, out, _ = await prompt
    assert rc == 0 and "answer with: acp-gateway permission" in out  # not a terminal: it says how
    assert 'permission: {"outcome":"selected","optionId":"allow-once"}' in out  # what the agent got
    assert out.rstrip().endswith("stop reason: end_turn")
    rc, _, err = await cli(gateway, "permission", sid, request_id, "allow-once")  # answered already
    assert rc == 0 and "-32009" in err and "already" in err  # the API says: treat it as success


async def test_a_permission_answered_interactively_on_a_terminal(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--cwd", str(tmp_path / "work"))
    assert rc == 0
    sid = out.split()[0]
    primary, secondary = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "prompt", sid, "/permission", "--url", gateway.url,
        "--token", gateway.token or "", stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    seen = b""

    async def read_until(marker: bytes) -> None:
        nonlocal seen
        while marker not in seen:
            seen += await asyncio.get_running_loop().run_in_executor(None, os.read, primary, 4096)

    try:
        await asyncio.wait_for(read_until(b"choose a number"), 60)
        assert b"1) Allow once [allow_once]" in seen
        os.write(primary, b"2\n")  # Reject
        await asyncio.wait_for(read_until(b"stop reason:"), 60)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        os.close(primary)
    text = seen.decode()
    assert '"optionId":"reject-once"' in text and "(by user)" in text


async def test_usage_version_and_run_print_what_a_user_needs(tmp_path: Path) -> None:
    rc, out, _ = await cli(None, "--version")
    assert rc == 0 and out.strip() == f"acp-gateway {__version__}"
    rc, _, err = await cli(None, "status", "--colour", "s-1")
    assert rc == 2 and err.startswith("usage: acp-gateway status") and "--colour" in err  # its own usage
    rc, out, err = await cli(None, "run", "--agent", "reference", "--prompt", "hi", "--cwd", str(tmp_path))
    assert rc == 0 and out.splitlines() == ["echo: hi", "stop reason: end_turn"]
    assert "session: ref-" in err and "--resume-token ref-" in err  # the id the next run continues with


async def test_watch_prints_events_as_they_happen(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--cwd", str(tmp_path / "work"), "--title", "watched")
    assert rc == 0
    sid = out.split()[0]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "watch", "--since", "0", "--json", "--url", gateway.url,
        "--token", gateway.token or "", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        first = orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 30))  # replayed from the journal
        assert first["type"] == "session_created" and first["session_id"] == sid and first["id"] == 1
        await cli(gateway, "prompt", sid, "watch this")
        while True:  # then live, as they happen
            event = orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
            if event["type"] == "turn_ended":
                break
        assert event["data"]["stop_reason"] == "end_turn"
    finally:
        proc.kill()
        await proc.wait()


async def test_watch_goes_on_across_a_gateway_restart(gateway: GatewayProcess, tmp_path: Path) -> None:
    """A gateway `kill -9` and restart (on another port: found again through the state directory): `watch` says so,
    resubscribes from its cursor, and prints every event once — the owner's ids have no gap and no repeat."""
    rc, out, _ = await cli(gateway, "start", "--cwd", str(tmp_path / "work"))
    assert rc == 0
    sid = out.split()[0]
    env = {k: v for k, v in os.environ.items() if k != "ACP_GATEWAY_URL"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", "--json", "watch", "--since", "0", "--state-dir", str(gateway.state_dir),
        "--token", gateway.token or "", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    seen: list[dict[str, object]] = []

    async def until_turn_ended(count: int) -> None:
        while sum(1 for e in seen if e["type"] == "turn_ended") < count:
            seen.append(orjson.loads(await asyncio.wait_for(proc.stdout.readline(), 60)))  # type: ignore[union-attr]
    try:
        assert (await cli(gateway, "prompt", sid, "before"))[0] == 0
        await until_turn_ended(1)
        port_before = gateway.port
        await gateway.kill9()
        await gateway.start()
        assert (await cli(gateway, "prompt", sid, "after"))[0] == 0  # the lazy resume, then the turn
        await until_turn_ended(2)
    finally:
        proc.kill()
        _, err = await proc.communicate()
    ids = [e["id"] for e in seen]
    assert ids == list(range(1, len(ids) + 1)), ids  # none lost, none repeated
    said = err.decode()
    assert "connection to ws://127.0.0.1:" in said and "lost; reconnecting" in said
    assert f"reconnected to ws://127.0.0.1:{gateway.port}/rpc" in said, (port_before, said)


async def test_named_sessions_and_the_directory_session(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--name", "fix-bug", "--cwd", str(tmp_path / "work"))
    assert rc == 0 and "name: fix-bug" in out
    sid = out.split()[0]
    rc, out, _ = await cli(gateway, "prompt", "fix-bug", "by name")
    assert rc == 0 and "echo: by name" in out
    rc, out, _ = await cli(gateway, "--json", "status", "fix-bug")  # a global flag before the command
    assert rc == 0 and orjson.loads(out)["session_id"] == sid
    rc, _, err = await cli(gateway, "start", "--name", "fix-bug", "--cwd", str(tmp_path / "work"))
    assert rc == 1 and f"taken by session {sid}" in err
    rc, out, _ = await cli(gateway, "fork", "fix-bug", "--name", "fix-bug-2")  # goes on from "by name"
    assert rc == 0 and "name: fix-bug-2" in out and f"forked from {sid}" in out, out
    rc, out, _ = await cli(gateway, "prompt", "fix-bug-2", "/recall")
    assert rc == 0 and "recall: 2 prompts: by name | /recall" in out, out
    await gateway.kill9()
    await gateway.start()
    rc, out, _ = await cli(gateway, "sessions")
    line = next(line for line in out.splitlines() if line.startswith(sid))
    assert rc == 0 and "fix-bug" in line and "needs resume: the agent is not running" in line, out
    rc, out, _ = await cli(gateway, "resume", "fix-bug")
    assert rc == 0 and "restored by session/resume" in out, out  # how it came back
    rc, out, _ = await cli(gateway, "cancel", "fix-bug")
    assert rc == 0 and out.strip() == "CANCELLED"
    # acpx's default: a prompt without a session uses this directory's, started on first use
    here = tmp_path / "work" / "project"
    here.mkdir()
    rc, out, err = await cli(gateway, "prompt", "first", cwd=here)
    assert rc == 0 and "echo: first" in out and "started session s-" in err and str(here) in err
    started = err.split("started session ")[1].split()[0]
    rc, out, err = await cli(gateway, "prompt", "second", cwd=here)
    assert rc == 0 and "echo: second" in out and f"session {started} of {here}" in err
    rc, out, _ = await cli(gateway, "delete", "fix-bug")
    assert rc == 0
    rc, out, _ = await cli(gateway, "start", "--name", "fix-bug", "--cwd", str(tmp_path / "work"))
    assert rc == 0  # the name is free again


async def test_a_session_whose_agent_cannot_start_is_failed_with_the_agents_words(gateway: GatewayProcess,
                                                                                    tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--agent", "no-key", "--cwd", str(tmp_path / "work"))
    assert rc == 1 and "FAILED" in out and "REF_API_KEY is not set" in out
    sid = out.split()[0]
    rc, out, _ = await cli(gateway, "status", sid)
    assert out.startswith("FAILED") and "could not create a session" in out and "REF_API_KEY is not set" in out
    c = await gateway.client()
    view = await c.call("task.session.get", {"session_id": sid})
    assert view["state"] == "FAILED"
    assert "agent stderr: reference agent: REF_API_KEY is not set" in view["error_message"]
    await c.close()


async def test_the_agents_stderr_says_why_and_keeps_secrets(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--agent", "offline", "--cwd", str(tmp_path / "work"))
    assert rc == 1 and "FAILED" in out and "could not download @scope/agent" in out and "ENOTFOUND" in out
    rc, out, _ = await cli(gateway, "start", "--agent", "leaky", "--cwd", str(tmp_path / "work"))
    assert rc == 1 and "key [secret] was refused" in out and SECRET not in out
    rc, out, _ = await cli(gateway, "start", "--agent", "grumpy", "--cwd", str(tmp_path / "work"))
    sid = out.split()[0]
    rc, _, err = await cli(gateway, "prompt", sid, "/fail")  # a failed turn: the agent's words from its stderr
    assert rc == 1 and "failed this turn" in err and "api.example.invalid does not answer" in err
    c = await gateway.client()
    events = (await c.call("task.session.events", {"session_id": sid}))["events"]
    ended = [e for e in events if e["type"] == "turn_ended"][-1]
    assert ended["data"]["stop_reason"] is None and "api.example.invalid" in ended["data"]["message"]
    await c.close()
    assert SECRET not in "".join(gateway.stderr_lines)  # nor in the gateway's log


def test_a_reader_that_stops_early_is_no_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`acp-gateway agents | head -1`: the pipe closes under the command, which ends quietly (no traceback)."""
    from gateway.cli import main

    class ClosedPipe:
        def __init__(self) -> None:
            self.file = open(tmp_path / "out", "w")

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return self.file.fileno()

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["agents"]) == 0


async def test_prompt_shows_the_agents_terminal_as_it_runs(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", cwd=tmp_path / "work")
    sid = out.split()[0]
    rc, out, err = await cli(gateway, "prompt", sid, "/term printf 'one\\033[31mtwo\\033[0m\\033]0;title\\007\\n'")
    assert rc == 0, err
    assert "[terminal] $ sh -c 'printf" in out and f"(in {tmp_path / 'work'})" in out
    assert "onetwo\n" in out  # not a terminal: colours and every other escape dropped
    assert "[terminal] exit code 0" in out
    assert "\x1b" not in out


@pytest.mark.parametrize(("text", "colour", "shown"), [
    ("plain\n", True, "plain\n"),
    ("\x1b[1;31mred\x1b[0m", True, "\x1b[1;31mred\x1b[0m"),
    ("\x1b[1;31mred\x1b[0m", False, "red"),
    ("a\x1b]0;new title\x07b", True, "ab"),  # retitling the reader's terminal
    ("a\x1b[2J\x1b[Hb", True, "ab"),  # clearing it, moving the cursor
    ("a\rb\x08c\x00", True, "abc"),
    ("tab\tnewline\n", False, "tab\tnewline\n"),
])
def test_terminal_text_keeps_colours_only(text: str, colour: bool, shown: str) -> None:
    from gateway.clients.chat_text import terminal_text

    assert terminal_text(text, colour) == shown


async def test_an_agents_question_is_printed_and_answered_with_answer(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", cwd=tmp_path / "work")
    sid = out.split()[0]
    prompt = asyncio.ensure_future(cli(gateway, "prompt", sid, "/elicit form"))
    client = await gateway.client()
    await client.call("task.session.subscribe", {"session_id": sid})
    while True:  # the question, as the prompt's terminal also got it
        event = (await client.next_notification(20))["params"]
        if event["type"] == "elicitation_requested":
            break
    rid = event["data"]["request_id"]
    rc, out, _ = await cli(gateway, "status", sid)  # the question waits: status says how to answer it
    assert rc == 0 and f"acp-gateway answer {sid}" in out, out
    rc, out, _ = await cli(gateway, "answer", sid)  # the questions waiting, each with its command
    assert rc == 0 and f"the agent asks ({rid}): Who is asking?" in out
    assert f"answer: acp-gateway answer {sid} {rid} FIELD=VALUE …  (or --decline)" in out
    rc, out, err = await cli(gateway, "answer", sid, rid, "name=Ada", "age=abc")  # checked before it is sent
    assert rc == 2 and "age: 'abc' is not a whole number; nothing was sent: the question stays open" in err, err
    rc, out, err = await cli(gateway, "answer", sid, rid, "name=Ada", "age=-1")
    assert rc == 2 and "age: -1 is too small: give a number at least 0" in err and "stays open" in err
    rc, out, err = await cli(gateway, "answer", sid, rid, "name=Ada", "age=36", "subscribe=yes")
    assert rc == 0 and "answered: accept" in out, err
    rc, out, err = await prompt
    assert f"the agent asks ({rid}): Who is asking?" in out
    assert "fields: name* (string)  age (integer)  colour (string: red|green)  subscribe (boolean)" in out
    assert f"answer with: acp-gateway answer {sid} {rid} FIELD=VALUE" in out
    assert '"content":{"name":"Ada","age":36,"subscribe":true}' in out
    assert f"question {rid}: accept (by user)" in out
    await client.close()


class Terminal:
    """`acp-gateway prompt` on a pseudo-terminal, as a person runs it: what it printed so far, and keys typed."""

    def __init__(self, proc: asyncio.subprocess.Process, primary: int) -> None:
        self.proc, self.primary, self.seen = proc, primary, b""

    @classmethod
    async def prompt(cls, gw: GatewayProcess, session_id: str, text: str) -> Terminal:
        primary, secondary = pty.openpty()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway", "prompt", session_id, text, "--url", gw.url, "--token", gw.token or "",
            stdin=secondary, stdout=secondary, stderr=secondary)
        os.close(secondary)
        return cls(proc, primary)

    async def until(self, marker: str, after: int = 0) -> str:
        """What was printed once `marker` shows after the first `after` characters (waited for, up to 60 s)."""
        async def read() -> None:
            while marker.encode() not in self.seen[after:]:
                self.seen += await asyncio.get_running_loop().run_in_executor(None, os.read, self.primary, 4096)
        await asyncio.wait_for(read(), 60)
        return self.seen.decode()

    def type(self, keys: bytes) -> int:
        """Type `keys`; the length of what was printed before them (to wait for what follows)."""
        os.write(self.primary, keys)
        return len(self.seen)

    async def rest(self) -> str:
        """All it printed, once it closed its terminal (exited)."""
        def read() -> bytes:
            try:
                return os.read(self.primary, 4096)
            except OSError:  # EIO: the other side is closed
                return b""
        while chunk := await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, read), 60):
            self.seen += chunk
        return self.seen.decode()

    async def close(self) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), 30)
        finally:
            os.close(self.primary)


async def test_a_question_asked_on_a_terminal_is_checked_as_it_is_typed(gateway: GatewayProcess,
                                                                          tmp_path: Path) -> None:
    """Issue 45: `abc` was taken for an integer, `36` for a choice, `2` for a boolean. Each is refused with the
    reason, and the field asked again."""
    rc, out, _ = await cli(gateway, "start", cwd=tmp_path / "work")
    assert rc == 0
    sid = out.split()[0]
    term = await Terminal.prompt(gateway, sid, "/elicit form")
    try:
        await term.until("Your name (text, at least 1 character(s); - to decline)")
        at = term.type(b"\n")  # required: asked again
        await term.until("name is required", at)
        term.type(b"Ada\n")
        await term.until("age (whole number, at least 0, empty to skip")
        at = term.type(b"abc\n")
        await term.until("'abc' is not a whole number", at)
        at = term.type(b"36\n")
        await term.until("colour (one of: 1) red, 2) green", at)
        at = term.type(b"36\n")
        await term.until("'36' is not one of the choices: 1) red, 2) green", at)
        at = term.type(b"2\n")
        await term.until("subscribe (y or n", at)
        at = term.type(b"2\n")
        await term.until("'2' is not a yes or no: answer y or n", at)
        term.type(b"y\n")
        said = await term.until("stop reason:")
    finally:
        assert await term.close() == 0
    assert '"content":{"name":"Ada","age":36,"colour":"green","subscribe":true}' in said, said
    assert "True" not in said and "None" not in said


async def test_end_of_input_declines_the_question_and_the_turn_goes_on(gateway: GatewayProcess,
                                                                       tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", cwd=tmp_path / "work")
    sid = out.split()[0]
    term = await Terminal.prompt(gateway, sid, "/elicit form")
    try:
        await term.until("Your name")
        term.type(b"\x04")  # Ctrl-D
        said = await term.until("stop reason: end_turn")
    finally:
        assert await term.close() == 0
    assert "declined: the agent goes on without an answer" in said and 'elicitation: {"action":"decline"}' in said
    rc, out, _ = await cli(gateway, "status", sid)
    assert rc == 0 and out.startswith("WAITING_FOR_INPUT") and "question" not in out  # not stuck with it open


async def test_ctrl_c_cancels_the_question_being_asked(gateway: GatewayProcess, tmp_path: Path) -> None:
    """Issue 45: the CLI went away leaving the session RUNNING with the question open. Ctrl-C cancels it."""
    rc, out, _ = await cli(gateway, "start", cwd=tmp_path / "work")
    assert rc == 0
    sid = out.split()[0]
    client = await gateway.client()
    await client.call("task.session.subscribe", {"session_id": sid})
    term = await Terminal.prompt(gateway, sid, "/elicit form")
    try:
        await term.until("Your name")
        term.proc.send_signal(signal.SIGINT)  # as Ctrl-C on its terminal sends it
        said = await term.until("cancelled: the agent goes on without an answer")
        said = await term.rest()
    finally:
        rc = await term.close()
    # Interrupted: the shell's 130, and no traceback of the prompt's call left behind (it was "Task exception was
    # never retrieved … ConnectionError").
    assert rc == 130 and "Traceback" not in said and "never retrieved" not in said, said
    while True:  # the agent got `cancel`, and the turn ended
        event = (await client.next_notification(30))["params"]
        if event["type"] == "turn_ended":
            break
    assert event["data"]["stop_reason"] == "cancelled", (event, said)
    status = await client.call("task.session.status", {"session_id": sid})
    assert status["state"] == "WAITING_FOR_INPUT" and not status["pending_elicitations"]
    await client.close()


async def test_a_refusal_from_the_gateway_is_said_and_its_field_asked_again(gateway: GatewayProcess,
                                                                             tmp_path: Path) -> None:
    """What the terminal's own check lets through (here: its copy of the form lost the minimum) the gateway still
    refuses: the form says why and asks that field again, rather than giving up with the question open."""
    import io

    from gateway.cli.questions import StdinLines, ask_question
    from gateway.clients.chat_text import ChatPrinter

    rc, out, _ = await cli(gateway, "start", cwd=tmp_path / "work")
    assert rc == 0
    sid = out.split()[0]
    client = await gateway.client()
    await client.call("task.session.subscribe", {"session_id": sid})
    turn = asyncio.ensure_future(client.call("task.session.prompt", {"session_id": sid, "prompt": "/elicit form"}))
    while True:
        event = (await client.next_notification(30))["params"]
        if event["type"] == "elicitation_requested":
            break
    question = event["data"]
    del question["requested_schema"]["properties"]["age"]["minimum"]
    typed, typing = os.pipe()
    os.write(typing, b"Ada\n-1\n\n\n36\n")  # name, age (refused by the gateway), colour, subscribe; age again
    printed = io.StringIO()
    try:
        assert await asyncio.wait_for(ask_question(client, sid, question, ChatPrinter(printed), StdinLines(typed)),
                                      60)
        assert (await asyncio.wait_for(turn, 60))["stop_reason"] == "end_turn"
    finally:
        os.close(typed)
        os.close(typing)
    lines = printed.getvalue().splitlines()
    refused = next(i for i, line in enumerate(lines) if line.startswith("  not taken: "))
    assert "content.age" in lines[refused] and "the question stays open" in lines[refused]
    assert [line.split(" (")[0] for line in lines[refused + 1:]] == ["  age"]  # that field, not the whole form
    history = (await client.call("task.session.history", {"session_id": sid}))["entries"]
    assert any('"content":{"name":"Ada","age":36}' in e["content"] for e in history)
    await client.close()


async def test_a_refused_token_says_which_token_to_set_and_is_not_taken_for_a_gateway_down(
        gateway: GatewayProcess) -> None:
    """The gateway answered 401: the CLI says the token was refused and how to give the right one — not "is
    `acp-gateway serve` running?", which sends a person looking for a problem that is not there."""
    wrong = "not-the-token-0123456789"
    for verb in (["sessions"], ["watch"]):
        code, out, err = await cli(None, *verb, "--url", gateway.url, "--token", wrong)
        assert code == 2, (verb, out, err)
        assert "HTTP 401" in err and "ACP_GATEWAY_TOKEN" in err, err
        assert "serve` running" not in err and wrong not in err + out
