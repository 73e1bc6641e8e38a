"""Running the conformance checks: one shared agent process, fresh processes only where a check needs them.

The shared process is started and initialized once (that first initialize is the discovery every check's
capability gate reads, and what ACP-STARTUP-001 times); the checks that need no fresh process run one after
another on it, each seeing only what was said since it began. A check that FAILs or loses the process retires it,
so its leftovers cannot mislead the next one. The checks that need their own processes (a new initialize, stdin
closed, a session that must survive a restart) run beside that sequence. Every way a check can end maps to one
verdict in `_judge`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import AcpError, RpcError
from . import all_checks
from .core import SCHEMA_CHECK, STARTUP_CHECK, startup_verdict
from .framework import (
    CHECKS,
    Check,
    CheckBlocked,
    CheckContext,
    CheckFailed,
    CheckInconclusive,
    CheckResult,
    CheckSkipped,
    Probe,
    Result,
    Tier,
    TurnGate,
    blocked_by_error,
    launch_probe,
)
from .kit import ENVELOPE_CHECK, ERROR_CHECK, UTF8_CHECK
from .options import CheckOptions, ClientOffer
from .schema import Violation


class SharedAgent:
    """The agent process the checks share, restarted when a check retires it."""

    def __init__(self, argv: Sequence[str], workdir: str, env: dict[str, str] | None, options: CheckOptions,
                 violations: list[Violation], turns: TurnGate) -> None:
        self.argv, self.workdir, self.env, self.options = list(argv), workdir, env, options
        self.turns = turns
        self.violations = violations  # the run's: what no check was looking at still counts for ACP-SCHEMA-001
        self.probe: Probe | None = None
        self.unusable: str | None = None  # why it could not be started: every later check is blocked by it
        self.first_init_seconds: float | None = None
        self.init_transcript: list[dict[str, Any]] = []  # the first initialize, said and answered
        self.last_stderr = ""
        self.launched: list[Probe] = []  # every process of the run: what the run-wide checks judge

    async def start(self) -> dict[str, Any]:
        """Start and initialize it: what the agent advertised (empty when it could not be initialized)."""
        try:
            probe = await self._launch()
        except (CheckBlocked, CheckFailed, AcpError) as exc:
            said = str(exc) + self.last_stderr
            self.unusable = f"the agent could not be started and initialized here: {said}" + (
                "" if "ACP-INIT-001" in said else "; see ACP-INIT-001")
            return {}
        self.first_init_seconds = probe.init_seconds
        self.init_transcript = list(probe.transcript)
        return probe.init or {}

    async def acquire(self, offer: ClientOffer | None = None) -> Probe:
        """The process for the check that begins now (it offers the default: a check with an offer of its own is a
        fresh one)."""
        assert offer is None, "a check that makes its own offer runs in its own process (fresh=True)"
        if self.unusable is not None:
            raise CheckBlocked(self.unusable)
        if self.probe is None or not self.probe.alive:
            await self.retire()
            await self._launch()
        assert self.probe is not None
        self.violations.extend(self.probe.violations)  # said between two checks
        self.probe.begin()
        return self.probe

    async def retire(self) -> None:
        probe, self.probe = self.probe, None
        if probe is not None:
            self.violations.extend(probe.violations)
            with contextlib.suppress(Exception):
                await probe.client.stop()

    async def _launch(self) -> Probe:
        probe = await launch_probe(self.argv, self.workdir, self.env, self.options, self.turns)
        self.launched.append(probe)
        try:
            await probe.initialize()
        except BaseException:
            self.violations.extend(probe.violations)
            with contextlib.suppress(Exception):
                await probe.client.stop()
            self.last_stderr = await _stderr_said([probe])
            raise
        self.violations.extend(probe.violations)
        probe.violations = []
        self.probe = probe
        return probe


async def run_checks(argv: Sequence[str], *, only: Sequence[str] = (), env: dict[str, str] | None = None,
                     options: CheckOptions | None = None, on_start: Callable[[Check], None] | None = None,
                     on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Every selected check, in registration order; `on_start`/`on_result` hear of each as it begins and ends."""
    options = options or CheckOptions()
    workdir = options.scratch_dir or tempfile.mkdtemp(prefix="acp-check-")
    try:
        return await _run(argv, workdir, only, env, options, on_start, on_result)
    finally:
        if options.scratch_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


async def _run(argv: Sequence[str], workdir: str, only: Sequence[str], env: dict[str, str] | None,
               options: CheckOptions, on_start: Callable[[Check], None] | None,
               on_result: Callable[[CheckResult], None] | None) -> list[CheckResult]:
    violations: list[Violation] = []
    shared_dir = os.path.join(workdir, "shared")
    os.makedirs(shared_dir)
    turns = TurnGate()  # whether a turn can run here: decided once, by the run's first turn
    shared = SharedAgent(argv, shared_dir, env, options, violations, turns)
    selected = [c for c in CHECKS if not only or c.id in only]
    results: dict[str, CheckResult] = {}

    def ended(result: CheckResult) -> None:
        results[result.check.id] = result
        if on_result is not None:
            on_result(result)

    try:
        caps = await shared.start()

        async def shared_sequence() -> None:
            for c in (c for c in selected if not c.fresh):
                ctx = CheckContext(_check_dir(workdir, c), caps, options, shared.acquire, owns_probes=False,
                                   init_transcript=shared.init_transcript, check_id=c.id)
                result, found = await _judge(c, ctx, options, on_start, shared.unusable, turns)
                if result.result is Result.FAIL or any(not p.alive for p in ctx.probes):
                    await shared.retire()
                violations.extend(found)
                ended(result)

        gate = asyncio.Semaphore(options.concurrency)

        async def fresh(c: Check) -> None:
            async with gate:
                check_dir = _check_dir(workdir, c)
                async def launch(offer: ClientOffer | None) -> Probe:
                    probe = await launch_probe(argv, check_dir, env, options, turns, offer)
                    shared.launched.append(probe)
                    return probe

                ctx = CheckContext(check_dir, caps, options, launch, init_transcript=shared.init_transcript,
                                   check_id=c.id)
                result, found = await _judge(c, ctx, options, on_start, shared.unusable, turns)
            violations.extend(found)
            ended(result)

        await asyncio.gather(shared_sequence(), *(fresh(c) for c in selected if c.fresh))
    finally:
        await shared.retire()
    if not only or STARTUP_CHECK.id in only:
        ended(CheckResult(STARTUP_CHECK, *startup_verdict(shared.first_init_seconds, options, shared.unusable)))
    for check_, findings in run_wide_findings(shared.launched).items():
        if not only or check_.id in only:
            ended(CheckResult(check_, Result.FAIL, f"{len(findings)} finding(s); first: {findings[0]}",
                              violations=findings[:50]) if findings
                  else CheckResult(check_, Result.PASS, RUN_WIDE_PASS[check_.id]))
    if not only or SCHEMA_CHECK.id in only:
        ended(CheckResult(SCHEMA_CHECK, Result.FAIL, f"{len(violations)} violation(s); first: {violations[0]}",
                          violations=[str(v) for v in violations[:50]]) if violations
              else CheckResult(SCHEMA_CHECK, Result.PASS, "every agent message matched the schema"))
    return [results[c.id] for c in all_checks() if c.id in results]


RUN_WIDE_PASS = {ENVELOPE_CHECK.id: "every response had one of result and error, every error a code and a message",
                 ERROR_CHECK.id: "every error message was one non-empty line",
                 UTF8_CHECK.id: "every line on stdout was UTF-8"}


def run_wide_findings(probes: Sequence[Probe]) -> dict[Check, list[str]]:
    """What every process of the run showed, for the checks judged across the whole run."""
    return {ENVELOPE_CHECK: [f for p in probes for f in p.envelope],
            ERROR_CHECK: [f for p in probes for f in p.error_shapes],
            UTF8_CHECK: [f"{p.client.conn.stats.invalid_utf8} line(s) of stdout were not UTF-8 (each also counts as "
                         "noise, ACP-STDOUT-001)" for p in probes if p.client.conn.stats.invalid_utf8]}


async def _stderr_said(probes: Sequence[Probe]) -> str:
    """What an agent that exited said on stderr last: usually why (a missing module, a bad flag)."""
    for probe in probes:
        if not probe.alive:
            tail = await probe.client.process.stderr_tail()
            if tail:
                return f"; its stderr: {tail[-300:]}"
    return ""


def _take_violations(probe: Probe) -> list[Violation]:
    """A check is over: its processes' violations, taken from them (a shared process must not count them again for
    the next check)."""
    found, probe.violations = probe.violations, []
    return found


def _check_dir(workdir: str, c: Check) -> str:
    path = os.path.join(workdir, c.id.lower())
    os.makedirs(path, exist_ok=True)
    return path


async def _judge(c: Check, ctx: CheckContext, options: CheckOptions, on_start: Callable[[Check], None] | None,
                 undiscovered: str | None, turns: TurnGate) -> tuple[CheckResult, list[Violation]]:
    """Run one check to its verdict: every way it can end is one of PASS, FAIL, BLOCKED, INCONCLUSIVE, SKIP."""
    if c.needs and undiscovered is not None:  # nothing is known of what it advertises
        return CheckResult(c, Result.BLOCKED, undiscovered), []
    if c.needs and not ctx.advertised(c.needs):
        return CheckResult(c, Result.SKIP, f"the agent does not advertise {ctx.advertised_as(c.needs)}"), []
    if c.turn and turns.blocked is not None:  # decided already: no session is set up for it
        return CheckResult(c, Result.BLOCKED, f"{turns.blocked} (decided once for the run by its first turn)"), []
    if on_start is not None:
        on_start(c)
    started = time.monotonic()
    try:
        evidence = await asyncio.wait_for(c.fn(ctx), options.check_timeout)
        result = Result.INFO if c.tier is Tier.INFORMATIONAL else Result.PASS
    except CheckFailed as exc:
        result, evidence = Result.FAIL, str(exc)
    except CheckSkipped as exc:
        result, evidence = Result.SKIP, str(exc)
    except CheckBlocked as exc:
        result, evidence = Result.BLOCKED, str(exc)
    except CheckInconclusive as exc:
        result, evidence = Result.INCONCLUSIVE, str(exc)
    except TimeoutError:
        result, evidence = Result.FAIL, (f"no verdict within {options.check_timeout:g} s (the agent stopped "
                                         "answering; raise --setup-timeout / --turn-timeout if it is only slow)")
    except RpcError as err:
        blocked = blocked_by_error(err, "a session method")
        result, evidence = ((Result.BLOCKED, str(blocked)) if blocked is not None
                            else (Result.FAIL, f"unexpected error answer {err.code} {err.message}"))
    except AcpError as exc:
        result, evidence = Result.FAIL, f"transport: {exc}{await _stderr_said(ctx.probes)}"
    finally:
        await ctx.close()
    found = [v for p in ctx.probes for v in _take_violations(p)]
    transcript = [dict(frame, process=i) for i, p in enumerate(ctx.probes) for frame in p.transcript]
    transcript.sort(key=lambda f: f["t"])
    if c.from_init and not transcript:
        transcript = [dict(frame, process=0) for frame in ctx.init_transcript]
    return CheckResult(c, result, evidence, transcript, [str(v) for v in found], time.monotonic() - started), found
