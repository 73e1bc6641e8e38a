"""The documentation a user clones: every relative link in README and docs/ resolves inside a fresh clone (anchors
included), and nothing points outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.paths import REPO

ROOT = REPO
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def test_every_relative_link_resolves_in_a_fresh_clone(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    documents = [clone / "README.md", *sorted((clone / "docs").glob("*.md"))]
    assert len(documents) >= 6, documents
    checked, broken = 0, []
    for doc in documents:
        text = doc.read_text()
        assert "../shared" not in text, f"{doc.name} points outside the repository"
        for target in LINK.findall(re.sub(r"```.*?```", "", text, flags=re.S)):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file_part, _, anchor = target.partition("#")
            resolved = (doc.parent / file_part).resolve() if file_part else doc
            checked += 1
            if not resolved.is_relative_to(clone.resolve()) or not resolved.exists():
                broken.append(f"{doc.name}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert checked > 20 and not broken, broken
