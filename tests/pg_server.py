"""A real PostgreSQL server for the tests, never a skip: the one `ACP_GATEWAY_TEST_PG` names, else the one at
127.0.0.1:5432 if it answers, else a throwaway cluster made with Debian's `postgresql` package (`make postgres`
installs it), listening on a free port and deleted when the tests end. `ACP_GATEWAY_TEST_PG=throwaway` asks for
the throwaway cluster even where a server runs (how that path is tried on a development machine).

Every test that asks gets a database of its own on that server (`fresh_database`), dropped after it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg

LOCAL = "postgresql://postgres@127.0.0.1:5432/test"


def _answers(url: str) -> bool:
    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(url, timeout=3)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            return False
        await conn.close()
        return True

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # callable from inside a running event loop too
        return pool.submit(lambda: asyncio.run(probe())).result()


def _initdb() -> str:
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1:]), None)
    if found is None:
        raise RuntimeError("no PostgreSQL server for the tests: none at 127.0.0.1:5432, ACP_GATEWAY_TEST_PG unset, "
                           "and no initdb to start one; `make postgres` (part of `make test`) installs Debian's "
                           "postgresql package")
    return found


@contextlib.contextmanager
def throwaway_server() -> Iterator[str]:
    """initdb + pg_ctl start on a free port (as the `postgres` user when run as root: PostgreSQL refuses root)."""
    bindir = os.path.dirname(_initdb())
    root = tempfile.mkdtemp(prefix="acp-test-pg-")
    data = os.path.join(root, "data")
    run_as: list[str] = []
    if os.geteuid() == 0:
        user = "postgres" if _user_exists("postgres") else "nobody"
        shutil.chown(root, user)
        run_as = ["runuser", "-u", user, "--"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([*run_as, os.path.join(bindir, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
                    "--no-sync"], check=True, capture_output=True)
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off"
    subprocess.run([*run_as, os.path.join(bindir, "pg_ctl"), "-D", data, "-o", options, "-l",
                    os.path.join(root, "log"), "-w", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*run_as, os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


@contextlib.contextmanager
def test_server() -> Iterator[str]:
    """The server URL the tests use, for the whole run."""
    named = os.environ.get("ACP_GATEWAY_TEST_PG")
    if named and named != "throwaway":
        yield named
    elif named != "throwaway" and _answers(LOCAL):
        yield LOCAL
    else:
        with throwaway_server() as url:
            yield url


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


@contextlib.asynccontextmanager
async def fresh_database(server: str) -> AsyncIterator[str]:
    """A new, empty database on the server; dropped (with whatever still connects to it) afterwards."""
    name = f"acp_test_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield with_database(server, name)
    finally:
        admin = await asyncpg.connect(server)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
