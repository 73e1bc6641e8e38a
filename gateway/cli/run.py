"""`acp-gateway run`: a one-shot headless ACP client — launch, initialize, negotiate, prompt, report.

Exit status: 0 restored / new / fallback_new, 1 the prompt turn failed, 2 usage or launch error,
3 the restore failed and the saved identity was preserved.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any, TextIO

import orjson

from acp.client import AcpClient
from acp.errors import AUTH_REQUIRED, AcpError, RpcError
from acp.models import text_block
from acp.restore import FailureClass, Outcome
from acp.session_setup import establish_session
from agents.profiles import AgentProfile
from agents.registry.credentials import required_vars

from ..clients.chat_text import ChatPrinter

EXIT_OK, EXIT_TURN_FAILED, EXIT_USAGE, EXIT_PRESERVED = 0, 1, 2, 3


@dataclass
class RunOptions:
    profile: AgentProfile
    cwd: str
    env: dict[str, str]  # the agent's environment (main.local_agent_env: the caller's, for a command line)
    resume_token: str | None = None
    prompt: str | None = None
    json: bool = False
    from_profile: bool = True  # `--agent ID`; False for a command line after `--` (the caller's environment)

    @property
    def who(self) -> str:
        """The agent as the person named it: its profile id, or the command line they typed."""
        return f"agent {self.profile.id}" if self.from_profile else f"agent `{shlex.join(self.profile.command)}`"


def sign_in_hint(opts: RunOptions) -> str:
    """What a person does about an agent that asks to be signed in (-32000): the variables known to sign it in (its
    profile's `sign_in_vars`, its upstream's) and how `run` gives them — a command line keeps the caller's whole
    environment, a profile passes only the allowlist and its own [env]."""
    names = required_vars(opts.profile)
    what = (f"set {' or '.join(names)}" if names
            else "give it the variable its documentation names (the gateway knows none for it)")
    name = names[0] if names else "VAR"
    if opts.from_profile:
        how = (f"the profile {opts.profile.id} passes only its own [env] (e.g. {name} = {{ env = \"{name}\" }}) "
               f"and an allowlist; or run its command with your environment: {name}=… acp-gateway run -- "
               f"{shlex.join(opts.profile.command)}")
    else:
        how = f"{name}=… acp-gateway run -- … (a command line keeps your environment)"
    return f"the agent needs a sign-in: {what}; {how}"


async def run_once(opts: RunOptions, out: TextIO, err: TextIO) -> int:
    summary: dict[str, Any] = {
        "agent": opts.profile.id,
        "protocol_version": None,
        "session_id": None,
        "stop_reason": None,
        "updates": 0,
        "restore": None,
    }

    chat = ChatPrinter(out)
    finished = False  # the summary is out: it stays the last line (an agent may still speak while it stops)

    def on_update(params: dict[str, Any], replay: bool) -> None:
        if finished:
            return
        summary["updates"] += 1
        raw = params.get("update")
        update: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if opts.json:
            out.write(orjson.dumps({"update": update, "replay": replay}).decode() + "\n")
        else:
            chat.update(update, replay)

    def finish(code: int) -> int:
        nonlocal finished
        finished = True
        if opts.json:
            out.write(orjson.dumps(summary).decode() + "\n")
        else:
            chat.end()
        out.flush()
        return code

    if not os.path.isdir(opts.cwd):
        err.write(f"acp-gateway run: working directory {opts.cwd!r} does not exist\n")
        return finish(EXIT_USAGE)
    env = opts.env
    try:
        client = await AcpClient.launch(
            opts.profile.argv(opts.resume_token), cwd=opts.cwd, env=env, on_update=on_update
        )
    except AcpError as exc:
        err.write(f"acp-gateway run: cannot launch {opts.who}: {exc}\n")
        return finish(EXIT_USAGE)
    try:
        try:
            init = await client.initialize()
        except AcpError as exc:
            tail = " | ".join(client.process.stderr.tail_lines(3))
            err.write(f"acp-gateway run: {opts.who} failed to initialize: {exc}"
                      + (f" (stderr: {tail})" if tail else "") + "\n")
            return finish(EXIT_USAGE)
        summary["protocol_version"] = init.protocolVersion
        result = await establish_session(
            client,
            native_session_resume=opts.profile.native_session_resume,
            resume_token=opts.resume_token,
            cwd=os.path.realpath(opts.cwd),
            auth_method=opts.profile.auth_method,
            environ=env,
        )
        summary["restore"] = result.to_json()
        summary["session_id"] = result.session_id
        if result.outcome is Outcome.PRESERVED:
            err.write(f"acp-gateway run: could not restore session {opts.resume_token} on "
                      f"{opts.who} ({result.failure_class}: {result.describe_failure()}); the saved "
                      "session id is kept — retry later or start fresh without --resume-token\n")
            return finish(EXIT_PRESERVED)
        if result.outcome is Outcome.FAILED or result.session_id is None:
            asks = result.failure_class is FailureClass.AUTHENTICATION
            err.write(f"acp-gateway run: {opts.who} could not create a session: {result.describe_failure()}"
                      + (f"; {sign_in_hint(opts)}" if asks else "") + "\n")
            return finish(EXIT_USAGE)
        # The id that --resume-token takes next time (in --json, the summary's session_id).
        err.write(f"session: {result.session_id} (continue it with --resume-token {result.session_id})\n")
        if result.outcome is Outcome.FALLBACK_NEW:
            err.write(f"acp-gateway run: the agent no longer knew session {opts.resume_token} "
                      f"({result.failure_class}); started fresh session {result.session_id}\n")
        if opts.prompt is not None:
            try:
                response = await client.prompt(result.session_id, [text_block(opts.prompt)])
            except RpcError as exc:
                asks = exc.code == AUTH_REQUIRED  # some agents make a session without a key, then refuse turns
                err.write(f"acp-gateway run: the prompt turn failed: {exc.message} (code {exc.code})"
                          + (f"; {sign_in_hint(opts)}" if asks else "") + "\n")
                return finish(EXIT_TURN_FAILED)
            except AcpError as exc:
                err.write(f"acp-gateway run: the agent went away during the prompt: {exc}\n")
                return finish(EXIT_TURN_FAILED)
            summary["stop_reason"] = response.stopReason
            if not opts.json:
                chat.note(f"stop reason: {response.stopReason}")
        return finish(EXIT_OK)
    finally:
        stats = client.conn.stats
        if stats.non_json or stats.non_jsonrpc or stats.oversized:
            err.write(f"acp-gateway run: agent wrote {stats.non_json} non-JSON, {stats.non_jsonrpc} non-JSON-RPC "
                      f"and {stats.oversized} over-long lines on stdout (ignored)\n")
        await client.stop()


def run_command(opts: RunOptions) -> int:
    return asyncio.run(run_once(opts, sys.stdout, sys.stderr))
