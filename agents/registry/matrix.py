"""The protocol matrix of the installed agents: one row of facts per agent (version, `initialize`, sign-in,
capabilities) and one verdict per conformance check, as text, JSON and JUnit — the registry's daily matrix, with the
checker's verdicts and restore checks beside its probes. Pure: the rows are made by `agents matrix`
(gateway/cli/agents.py), which runs the probe and the checks."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from acp.check import CheckResult
from acp.check.report import check_json, report_junit, verdict

CAPABILITY_WORDS = (("loadSession", "load"), ("sessionCapabilities.resume", "resume"),
                    ("sessionCapabilities.list", "list"), ("sessionCapabilities.fork", "fork"),
                    ("sessionCapabilities.close", "close"), ("promptCapabilities.image", "image"),
                    ("promptCapabilities.embeddedContext", "context"), ("mcpCapabilities.http", "mcp-http"))


@dataclass
class AgentRow:
    id: str
    version: str
    kind: str
    argv: list[str]
    probe: dict[str, Any]
    results: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0


def capabilities_words(capabilities: dict[str, Any] | None) -> str:
    """`load,resume,list`: the capabilities an agent advertised that bear on sessions and prompts."""
    found = []
    for path, word in CAPABILITY_WORDS:
        node: Any = capabilities or {}
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node not in (None, False):
            found.append(word)
    return ",".join(found) or "-"


def summary_of(results: Sequence[CheckResult]) -> dict[str, Any]:
    """What `agents list` and the web UI show of an agent's last checks."""
    counts = Counter(r.result.value for r in results)
    return {"verdict": verdict(results).value, "counts": dict(sorted(counts.items()))}


def _facts(row: AgentRow) -> list[str]:
    p = row.probe
    return [row.version, p.get("initialize", {}).get("status", "-"), str(p.get("auth_state", "-")).replace("_", " "),
            capabilities_words(p.get("capabilities")), verdict(row.results).value.replace("_", " ")
            if row.results else "not checked"]


def render_text(rows: Sequence[AgentRow]) -> str:
    """One column per agent, one line per fact and per check (agents are few, checks many)."""
    if not rows:
        return "no agents installed from the registry: acp-gateway agents add ID\n"
    labels = ["version", "initialize", "auth", "capabilities", "verdict"]
    checks: list[tuple[str, str]] = []
    for row in rows:
        for r in row.results:
            if (r.check.id, r.check.title) not in checks:
                checks.append((r.check.id, r.check.title))
    columns = [[row.id, *_facts(row), *[next((r.result.value for r in row.results if r.check.id == cid), "-")
                                         for cid, _ in checks]] for row in rows]
    names = ["agent", *labels, *[cid for cid, _ in checks]]
    first = max(len(n) for n in names)
    column_width = max(len(cell) for c in columns for cell in c) + 2
    lines = [f"{name:{first}}  " + "".join(f"{c[i]:{column_width}}" for c in columns).rstrip()
             for i, name in enumerate(names)]
    return "\n".join(lines) + "\n"


def render_json(rows: Sequence[AgentRow]) -> dict[str, Any]:
    return {"agents": [{"id": row.id, "version": row.version, "kind": row.kind, "command": row.argv,
                        "initialize": row.probe.get("initialize"), "session_new": row.probe.get("session_new"),
                        "protocol_version": row.probe.get("protocol_version"),
                        "auth_state": row.probe.get("auth_state"), "auth_methods": row.probe.get("auth_methods", []),
                        "capabilities": row.probe.get("capabilities", {}),
                        "verdict": verdict(row.results).value if row.results else None,
                        "seconds": round(row.seconds, 3),
                        "checks": [check_json(r, with_transcript=False) for r in row.results]} for row in rows]}


def render_junit(rows: Sequence[AgentRow]) -> bytes:
    """<testsuites> with one <testsuite> per agent (named ID@VERSION), each as `acp-gateway check --junit` writes
    it, plus a testcase for its start-up (a failed `initialize` is a failure)."""
    root = ET.Element("testsuites", name="acp-gateway agents matrix")
    for row in rows:
        suite = ET.fromstring(report_junit(row.argv, row.results, row.seconds))
        suite.set("name", f"{row.id}@{row.version}")
        started = ET.Element("testcase", classname="acp.install", name="initialize after install", time="0")
        init = row.probe.get("initialize", {})
        if init.get("status") != "ok":
            ET.SubElement(started, "failure", message=str(init.get("message", "did not start"))[:500])
            suite.set("failures", str(int(suite.get("failures", "0")) + 1))
        ET.SubElement(started, "system-out").text = f"auth: {row.probe.get('auth_state')}"
        suite.insert(1, started)
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
        root.append(suite)
    return bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))
