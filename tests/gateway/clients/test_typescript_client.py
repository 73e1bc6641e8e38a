"""The TypeScript client (clients/typescript) from here: its generated types and the web UI's bundle are current,
its own tests pass under Node.js against real gateways (kill -9, a blackholed link, a cursor past retention, a
refused token), it words a refusal as the Python client does, and the tarball `npm pack` makes installs in an empty
directory and runs the README's example against a gateway: with the token, and refused without it or with a wrong
one."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gateway.clients.policy import refusal_message
from tests.gateway_harness import GatewayProcess, reference_profile
from tests.third_party import ROOT, interop_node

PACKAGE = ROOT / "clients" / "typescript"


def node_env() -> dict[str, str]:
    """Node.js 20 from `make interop` first on PATH; the gateway's Python for the scripts that export its contract."""
    subprocess.run(["make", "-s", "ts"], cwd=ROOT, check=True, timeout=900)
    return {**os.environ, "PATH": f"{interop_node().parent}{os.pathsep}{os.environ['PATH']}",
            "ACP_GATEWAY_PYTHON": sys.executable}


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def test_generated_types_and_ui_bundle_are_current() -> None:
    env = node_env()
    run(["node", "scripts/generate-types.mjs", "--check"], PACKAGE, env)
    run(["node", "scripts/bundle.mjs", "--check"], PACKAGE, env)


def test_guarantees_hold_under_node_against_a_real_gateway() -> None:
    env = node_env()
    run(["npm", "run", "--silent", "build"], PACKAGE, env)
    out = run(["node", "--test", *sorted(str(p) for p in (PACKAGE / "test").glob("*.test.mjs"))], PACKAGE, env, 600)
    assert re.search(r"^# fail 0$", out, re.M) and not re.search(r"^# pass 0$", out, re.M), out[-3000:]


def test_both_clients_word_a_refusal_alike() -> None:
    env = node_env()
    run(["npm", "run", "--silent", "build"], PACKAGE, env)
    cases: list[tuple[str, int, bool]] = [
        ("ws://127.0.0.1:8765/rpc", 401, True), ("ws://127.0.0.1:8765/rpc", 401, False),
        ("ws://127.0.0.1:8765/rpc?token=x-0123456789abcdef", 401, False),
        ("wss://me:pw@gw.example:8443/x/rpc", 401, True), ("ws://127.0.0.1:8765/rpc", 403, False)]
    script = ("import { policy } from './dist/index.js';"
              f"console.log(JSON.stringify({json.dumps(cases)}.map(([u, s, t]) => policy.refusalMessage(u, s, t))));")
    words = json.loads(run(["node", "--input-type=module", "-e", script], PACKAGE, env))
    assert words == [refusal_message(url, status, given) for url, status, given in cases]


async def test_packed_tarball_runs_the_readme_example(tmp_path: Path) -> None:
    env = node_env()
    pack = tmp_path / "pack"
    pack.mkdir()
    run(["npm", "pack", "--silent", "--pack-destination", str(pack)], PACKAGE, env)
    tarball = next(pack.glob("*.tgz"))
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
    ws = next((PACKAGE / "node_modules" / "ws").glob("package.json"))
    run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefer-offline", str(tarball), str(ws.parent)],
        app, env)
    example = re.search(r"```js\n(.*?)```", (PACKAGE / "README.md").read_text(), re.S)
    assert example is not None
    (app / "stream-turn.mjs").write_text(example.group(1))

    agents, work = tmp_path / "agents", tmp_path / "work"
    agents.mkdir()
    work.mkdir()
    reference_profile(agents, tmp_path / "agent-state", "reference")
    gateway = await GatewayProcess(tmp_path / "state", agents, "--default-agent", "reference").start()
    wrong = "wrong-token-zzzzzzzzzzzzzzzz"  # a dummy secret: the example must not print it

    async def run_example(token: str | None) -> tuple[int | None, str, str]:
        given = {"ACP_GATEWAY_TOKEN": token} if token is not None else {}
        proc = await asyncio.create_subprocess_exec(
            "node", "stream-turn.mjs", "hello from the README", cwd=app, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**{k: v for k, v in env.items() if k != "ACP_GATEWAY_TOKEN"}, **given,
                                                 "ACP_GATEWAY_URL": gateway.url, "ACP_WORKDIR": str(work)})
        # a client that kept retrying a refused token would never end: the wait's bound fails the test
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        return proc.returncode, out.decode(), err.decode()

    try:
        code, out, err = await run_example(gateway.token or "")
        refusals = [await run_example(None), await run_example(wrong)]
    finally:
        await gateway.stop()
    assert code == 0, err
    assert out == "echo: hello from the README\n[end_turn]\n"
    assert "[link live]" in err
    for (code, out, err), says in zip(refusals, ["no token was given", "refused the token (HTTP 401)"], strict=True):
        assert code == 1 and out == "", err
        assert says in err and "ACP_GATEWAY_TOKEN" in err and wrong not in err
        assert "[link closed]" in err and "[link reconnecting]" not in err and "[link connecting]" not in err
    shutil.rmtree(app)
