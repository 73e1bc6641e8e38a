"""Section `checkpoints`: what the checkpoint before every turn costs (docs/worktrees.md) — a turn of a session in a
git repository of 2,000 files, each turn changing one of them, beside the same turn of a session in a plain
directory of the same files."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from pathlib import Path

from harness import RUNS, TOKEN, WORK, Gateway, start_session
from report import row

from gateway.clients.client import GatewayClient

FILES = 2000
TURNS = 20
GIT_ENV = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
           "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@example.com"}


def tree_of(at: Path, repository: bool) -> Path:
    """`FILES` small files in `at` (committed, in a repository)."""
    shutil.rmtree(at, ignore_errors=True)
    for i in range(FILES):
        (at / f"d{i % 20}").mkdir(parents=True, exist_ok=True)
        (at / f"d{i % 20}" / f"f{i}.txt").write_text(f"line {i}\n" * 20)
    if repository:
        for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "files"]):
            subprocess.run(["git", "-C", str(at), *args], env=GIT_ENV, check=True)
    return at


async def turn_ms(client: GatewayClient, session_id: str) -> list[float]:
    """Milliseconds of each of `TURNS` turns, each changing one file through the agent's shell."""
    took = []
    for i in range(TURNS):
        t0 = time.perf_counter()
        await client.call("task.session.prompt", {"session_id": session_id,
                                                   "prompt": f"/sh echo {i} > d0/f0.txt"})
        took.append((time.perf_counter() - t0) * 1000)
    return took


async def checkpoints_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    repo, plain = tree_of(WORK / "bench-repo", True), tree_of(WORK / "bench-plain", False)
    gw = Gateway(tmp / "checkpoints", agents).start()
    client = await GatewayClient.connect(gw.url, TOKEN)
    ours, base = [], []
    try:
        in_repo = (await start_session(client, "ref", repo))["session_id"]
        in_plain = (await start_session(client, "ref", plain))["session_id"]
        await turn_ms(client, in_repo)  # the first snapshot hashes what git's own index does not cover
        for _ in range(RUNS):
            ours.append(statistics.median(await turn_ms(client, in_repo)))
            base.append(statistics.median(await turn_ms(client, in_plain)))
    finally:
        await client.close()
        gw.stop()
        for at in (repo, plain):
            shutil.rmtree(at, ignore_errors=True)
    rows.append(row(f"turn in a repository ({FILES} files, a checkpoint before it)", ours, base, "ms",
                    "reported", True, "the same turn in a plain directory"))

