"""The reports of `acp-gateway check`: the verdict, the table, JSON, JUnit XML, and the progress lines on stderr.

The verdict is one of three (`verdict`): "conformant" only when every mandatory and advertised-capability check
was decided and none failed; "NOT conformant" when one of them failed (the exit status); "not shown" when none
failed but some could not be decided here (BLOCKED, INCONCLUSIVE) — then the summary says what was shown and what
is still unknown. Each check names the ACP TCK requirement ids it overlaps, so a report can be read beside the
kit's.
"""

from __future__ import annotations

import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, TextIO

from .framework import UNDECIDED, Check, CheckResult, Result, Tier

# The tiers whose checks decide conformance: a FAIL of one is "not conformant", an undecided one leaves it unknown.
DECIDING = (Tier.MANDATORY, Tier.CAPABILITY)


class Verdict(StrEnum):
    CONFORMANT = "conformant"  # every deciding check decided, none failed
    NOT_CONFORMANT = "not_conformant"  # a deciding check failed (exit status 1)
    NOT_SHOWN = "not_shown"  # none failed, but some could not be decided here


def verdict(results: Sequence[CheckResult]) -> Verdict:
    if any(r.fatal for r in results):
        return Verdict.NOT_CONFORMANT
    if any(r.result in UNDECIDED and r.check.tier in DECIDING for r in results):
        return Verdict.NOT_SHOWN
    return Verdict.CONFORMANT


def _named(results: Sequence[CheckResult]) -> str:
    """`mandatory ACP-A, ACP-B; capability ACP-C`: findings named with their tier, deciding tiers first."""
    by_tier: dict[Tier, list[str]] = {}
    for r in results:
        by_tier.setdefault(r.check.tier, []).append(r.check.id)
    return "; ".join(f"{tier.value} {', '.join(by_tier[tier])}" for tier in Tier if tier in by_tier)


def summary(results: Sequence[CheckResult], seconds: float | None = None) -> str:
    """The last line of the table: the counts, the verdict with the tier of each finding, the time."""
    counts = {res: sum(1 for r in results if r.result is res) for res in Result}
    failed = [r for r in results if r.result is Result.FAIL]
    undecided = [r for r in results if r.result in UNDECIDED]
    outcome = verdict(results)
    if outcome is Verdict.CONFORMANT:
        said = "conformant"
    elif outcome is Verdict.NOT_CONFORMANT:
        said = f"NOT conformant (failed: {_named([r for r in failed if r.fatal])})"
    else:
        shown = sum(1 for r in results if r.check.tier in DECIDING and r.result in (Result.PASS, Result.SKIP))
        said = (f"conformance not shown: {shown} mandatory or capability check(s) passed or do not apply and none "
                f"failed; still unknown: {_named([r for r in undecided if r.check.tier in DECIDING])}")
    advisory = [r for r in failed if not r.fatal]
    return (f"{counts[Result.PASS]} passed, {counts[Result.FAIL]} failed, {counts[Result.BLOCKED]} blocked, "
            f"{counts[Result.INCONCLUSIVE]} inconclusive, {counts[Result.SKIP]} skipped, "
            f"{counts[Result.INFO]} informational; {said}"
            + (f"; advisory findings: {', '.join(r.check.id for r in advisory)}" if advisory else "")
            + (f"; could not be checked here: {_named(undecided)}"
               if undecided and outcome is not Verdict.NOT_SHOWN else "")
            + (f"; {seconds:.1f} s" if seconds is not None else ""))


def render_table(results: Sequence[CheckResult], seconds: float | None = None) -> str:
    width = max((len(r.check.id) for r in results), default=10)
    lines = [f"{'check':{width}}  {'tier':13}  {'result':12}  evidence"]
    for r in results:
        lines.append(f"{r.check.id:{width}}  {r.check.tier.value:13}  {r.result.value.upper():12}  {r.evidence}")
    lines.append("")
    lines.append(summary(results, seconds))
    return "\n".join(lines)


def check_json(r: CheckResult, with_transcript: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"id": r.check.id, "tier": r.check.tier.value, "title": r.check.title,
                           "result": r.result.value, "evidence": r.evidence, "citation": r.check.citation,
                           "tck": list(r.check.tck), "seconds": round(r.seconds, 3)}
    if r.violations:
        out["schema_violations"] = r.violations
    if with_transcript:
        out["transcript"] = r.transcript
    return out


def report_json(argv: Sequence[str], results: Sequence[CheckResult], seconds: float | None = None) -> dict[str, Any]:
    return {
        "agent": list(argv),
        "schema": "ACP v1 (acp/schema/v1/schema.json)",
        "verdict": verdict(results).value,
        "conformant": verdict(results) is Verdict.CONFORMANT,
        "could_not_check": [r.check.id for r in results if r.result in UNDECIDED],
        "seconds": None if seconds is None else round(seconds, 3),
        "checks": [check_json(r, with_transcript=r.result is Result.FAIL) for r in results],
    }


EVIDENCE_WIDTH = 100  # of a progress line's evidence: the table at the end has all of it


def clipped(text: str, width: int) -> str:
    """`text` in at most `width` characters: whole, or cut at the last word that fits, with an ellipsis (a word
    longer than the width, a path say, is cut where the width ends)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:max(width, 0)]
    head = text[:width - 1]
    if not (head[-1].isspace() or text[width - 1].isspace()):  # the cut falls inside a word: drop its start
        space = head.rfind(" ")
        head = head[:space] if space > 0 else head
    return head.rstrip(" ,;:") + "…"


def progress_line(result: CheckResult, done: int, total: int) -> str:
    """One line per check as it ends (stderr): an agent author sees where a slow run is."""
    return (f"[{done:>{len(str(total))}}/{total}] {result.result.value.upper():7} {result.check.id} "
            f"({result.seconds:.1f} s) {clipped(result.evidence, EVIDENCE_WIDTH)}")


class Progress:
    """Progress on stderr: a line per check as it ends; on a terminal, also a live line naming what runs now."""

    def __init__(self, total: int, stream: TextIO, live: bool, width: int | None = None) -> None:
        self.total, self.stream, self.live = total, stream, live
        # The live line must fit the terminal: one that wraps leaves its first rows behind at each redraw.
        self.width = width if width is not None else shutil.get_terminal_size().columns - 1
        self.done = 0
        self.running: dict[str, float] = {}

    def started(self, check: Check) -> None:
        self.running[check.id] = time.monotonic()
        self.tick()

    def ended(self, result: CheckResult) -> None:
        self.running.pop(result.check.id, None)
        self.done += 1
        self._clear()
        print(progress_line(result, self.done, self.total), file=self.stream, flush=True)
        self.tick()

    def tick(self) -> None:
        """Redraw the live line (called on every change and twice a second)."""
        if not self.live or not self.running:
            return
        now = time.monotonic()
        running = ", ".join(f"{cid} {now - t:.0f} s" for cid, t in sorted(self.running.items(), key=lambda kv: kv[1]))
        line = f"[{self.done}/{self.total}] running: {running}"
        self.stream.write("\r\x1b[2K" + clipped(line, self.width))
        self.stream.flush()

    def close(self) -> None:
        self._clear()

    def _clear(self) -> None:
        if self.live:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


def report_junit(argv: Sequence[str], results: Sequence[CheckResult], seconds: float) -> bytes:
    """The report as JUnit XML (one testcase per check; FAIL of a mandatory or advertised-capability check is a
    failure, of an advisory one a testcase that passes with the finding in its output; SKIP, BLOCKED and
    INCONCLUSIVE are skipped with the reason), for the CI systems agent authors use."""
    suite = ET.Element("testsuite", name="acp-conformance", tests=str(len(results)),
                       failures=str(sum(1 for r in results if r.fatal)),
                       skipped=str(sum(1 for r in results if r.result is Result.SKIP or r.result in UNDECIDED)),
                       errors="0",
                       time=f"{seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="agent", value=" ".join(argv))
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=f"acp.{r.check.tier.value}",
                             name=f"{r.check.id} {r.check.title}", time=f"{r.seconds:.3f}")
        if r.check.tck:
            case_props = ET.SubElement(case, "properties")
            ET.SubElement(case_props, "property", name="tck", value=" ".join(r.check.tck))
        if r.fatal:
            failure = ET.SubElement(case, "failure", message=r.evidence[:500], type=r.check.tier.value)
            failure.text = f"{r.evidence}\n{r.check.citation}" + "".join(f"\n{v}" for v in r.violations[:10])
        elif r.result is Result.SKIP or r.result in UNDECIDED:
            ET.SubElement(case, "skipped", message=f"{r.result.value.upper()}: {r.evidence[:500]}")
        ET.SubElement(case, "system-out").text = f"{r.result.value.upper()}: {r.evidence}"
    return bytes(ET.tostring(suite, encoding="utf-8", xml_declaration=True))
