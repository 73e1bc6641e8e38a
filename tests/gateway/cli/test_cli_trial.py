"""What a new user met in the terminal frontend, against a real gateway: a terminal sign-in's output shown while it
runs, refusals that name the flag and the command that answers, values in plain words."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from tests.gateway_harness import GatewayProcess, reference_profile


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[GatewayProcess]:
    (tmp_path / "agents").mkdir()
    (tmp_path / "work").mkdir()
    reference_profile(tmp_path / "agents", tmp_path / "agent-state", "reference")
    reference_profile(tmp_path / "agents", tmp_path / "tui-state", "tui", "--require-auth", "--auth-terminal")
    gw = GatewayProcess(tmp_path / "state", tmp_path / "agents")
    await gw.start()
    yield gw
    await gw.stop()


async def cli(gw: GatewayProcess, *args: str, cwd: Path | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway", *args, "--url", gw.url, "--token", gw.token or "", cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def listed(gw: GatewayProcess, verb: str, session_id: str, start: str) -> str:
    """What `verb session_id` lists once it lists something (the agent asked: until then, nothing), within 60 s."""
    async def poll() -> str:
        while True:
            _, out, _ = await cli(gw, verb, session_id)
            if out.startswith(start):
                return out
    return await asyncio.wait_for(poll(), 60)


async def test_a_terminal_sign_in_shows_the_login_programs_output_and_its_end(gateway: GatewayProcess,
                                                                              tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", "--agent", "tui", cwd=tmp_path / "work")
    assert rc == 1 and "reference-tui" in out, out
    sid = out.split()[0]
    rc, out, err = await cli(gateway, "sign-in", sid, "reference-tui")
    assert rc == 0, err
    lines = out.splitlines()
    code = next(i for i, line in enumerate(lines) if "enter the code REF-1234" in line)
    ended = lines.index("the sign-in program ended")
    assert code < ended < next(i for i, line in enumerate(lines) if "agent running: yes" in line), out
    assert "[terminal] exit code 0" in out


async def test_refusals_name_the_flag_and_the_command_that_answers(gateway: GatewayProcess, tmp_path: Path) -> None:
    rc, out, _ = await cli(gateway, "start", cwd=tmp_path / "work")
    sid = out.split()[0]
    # `--state` in any case; a state there is not is refused naming the flag (was pydantic's `states.0: Input …`).
    rc, out, err = await cli(gateway, "sessions", "--state", "waiting_for_input")
    assert rc == 0 and sid in out, err
    rc, _, err = await cli(gateway, "sessions", "--state", "sleeping")
    assert rc == 2 and "argument --state: no state 'sleeping': give one of CREATED, STARTING" in err, err
    rc, _, err = await cli(gateway, "history", sid, "--limit", "0")
    assert rc == 2 and "argument --limit: give a number from 1 to 1000, not 0" in err, err
    # Nothing to cancel: said in --json too.
    rc, out, _ = await cli(gateway, "cancel-turn", sid, "--json")
    assert rc == 0 and orjson.loads(out)["cancelled"] is False
    # A permission request listed with the command that answers it; a bad option refused in words, not Python's.
    prompt = asyncio.ensure_future(cli(gateway, "prompt", sid, "/permission"))
    out = await listed(gateway, "permission", sid, "permission request ")
    request_id = out.split()[2].rstrip(":")
    assert f"answer: acp-gateway permission {sid} {request_id} OPTION_ID  (or --cancel)" in out, out
    rc, _, err = await cli(gateway, "permission", sid, request_id, "bogus")
    assert rc == 1 and 'option_id "bogus" is not one of: allow-once, ' in err and "['" not in err, err
    rc, _, err = await cli(gateway, "permission", sid, request_id, "allow-once")
    assert rc == 0, err
    assert (await prompt)[0] == 0
    # --decline without a question's id: refused when none (or several) wait, the only one declined otherwise.
    rc, _, err = await cli(gateway, "answer", sid, "--decline")
    assert rc == 2 and "--decline needs the REQUEST_ID" in err and "no question of the agent is waiting" in err, err
    asking = asyncio.ensure_future(cli(gateway, "prompt", sid, "/elicit form"))
    await listed(gateway, "answer", sid, "the agent asks")
    rc, out, err = await cli(gateway, "answer", sid, "--decline")
    assert rc == 0 and "(the only one waiting)" in out and "answered: decline" in out, (out, err)
    rc, out, _ = await asking
    assert rc == 0 and ": decline (by user)" in out, out
