"""docs/registry.md's examples name the agents of the shipped registry snapshot at the snapshot's versions, and
its count of agents is the snapshot's: the page cannot drift from agents/registry/snapshot.json again."""

from __future__ import annotations

import re

import orjson
import pytest

from agents.registry.index import SNAPSHOT
from tests.support.paths import REPO

pytestmark = pytest.mark.unit

PAGE = REPO / "docs" / "registry.md"


def snapshot_versions() -> dict[str, str]:
    return {entry["id"]: entry["version"] for entry in orjson.loads(SNAPSHOT.read_bytes())["agents"]}


def example_versions(text: str, ids: list[str]) -> list[tuple[str, str]]:
    """Every `ID@VERSION` and `ID VERSION` of the page (a command, a probe's output, an error) for an id of the
    snapshot; `fast-agent-acp 0.10.1` is a package, not the id `fast-agent`."""
    names = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
    return re.findall(rf"(?<![\w@/.-])({names})(?:@|\s+)(\d[\w.+-]*\w)", text)


def test_every_example_version_is_the_snapshots() -> None:
    versions = snapshot_versions()
    found = example_versions(PAGE.read_text(), list(versions))
    assert len(found) >= 5, found  # the page's commands, probe output and refusal all name a version
    wrong = [f"{agent}@{version} (the snapshot has {versions[agent]})" for agent, version in found
             if version != versions[agent]]
    assert not wrong, f"docs/registry.md names versions the shipped snapshot does not: {', '.join(wrong)}"


def test_the_page_counts_the_snapshots_agents() -> None:
    counted = re.search(r"`agents/registry/snapshot\.json`, (\d+) agents", PAGE.read_text())
    assert counted is not None and int(counted[1]) == len(snapshot_versions())


def test_a_drifted_example_is_found() -> None:
    """The check reads what a page could say: another version, after `@` or a space or a line break."""
    found = example_versions("agents add claude-acp@0.101.0\n(ACP 1, pi-acp\n0.0.24) fast-agent-acp 0.10.1",
                             ["claude-acp", "pi-acp", "fast-agent"])
    assert found == [("claude-acp", "0.101.0"), ("pi-acp", "0.0.24")]
