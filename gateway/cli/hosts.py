"""`acp-gateway hosts`: the agent hosts of a state directory, for an operator (docs/agent-hosts.md) — each host's
session, agent, pids, whether it still runs, its spool on disk and what the gateway committed of its lines; and
whether a gateway is attached to them or they are lingering without one.

It reads the store file itself, read-only, and the host JSON only key by key: the execution's secret and the agent's
`initialize` answer kept beside it are never read into what is shown.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .argspec import Argument, arg

if TYPE_CHECKING:
    from ..config import ServeConfig

ARGUMENTS: tuple[Argument, ...] = (
    arg("--config", type=Path, help="the TOML configuration file serve reads (its state_dir, store, host_linger)"),
    arg("--state-dir", help="as serve's (default: the per-user state directory)"),
    arg("--store", metavar="URL", help="as serve's: a SQLite path or a postgresql:// URL (default: the "
        "configuration's, else STATE_DIR/gateway.db); with PostgreSQL, the hosts of this state directory's node"),
    arg("--json", action="store_true", help="the hosts as a JSON list"),
)


@dataclass(frozen=True)
class HostView:
    """One row of agent_hosts as an operator sees it: nothing of the secret or the agent's `initialize` answer."""

    session_id: str
    agent: str | None
    execution_id: str
    agent_pid: int | None
    host_pid: int | None
    alive: bool
    state: str  # "attached", "lingering" or "gone"
    spool: str | None
    spool_bytes: int
    seen: int | None  # None: the gateway committed nothing of its lines yet
    open: list[int] = field(default_factory=list)
    incarnation: int = 0
    started: float | None = None
    remote: str | None = None  # the remote host it runs on (its pids and spool are that machine's: not looked at)


@dataclass(frozen=True)
class Hosts:
    """What `hosts` and `doctor` say of a state directory's agent hosts."""

    state_dir: Path
    store: str  # the SQLite file read, or the PostgreSQL URL (its password left out; never read)
    postgres: bool
    gateway_pid: int | None  # the gateway serving the state directory, None when none runs
    host_linger: float
    hosts: list[HostView]

    @property
    def running(self) -> int:
        return sum(1 for h in self.hosts if h.alive)

    @property
    def lingering(self) -> int:
        return sum(1 for h in self.hosts if h.state == "lingering")


def gateway_pid(state_dir: Path) -> int | None:
    """The pid of the gateway serving `state_dir`, or None when none runs. `serve` holds an exclusive flock on
    `gateway.lock` there while it runs (`app.StateDirLock`); the lock is looked up in /proc/locks rather than tried,
    so that a gateway starting at this very moment is never refused because this command held it."""
    lock = state_dir / "gateway.lock"
    try:
        st = os.stat(lock)
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    try:
        written = int(lock.read_text().strip() or "0")  # the holder writes its pid into the file
    except (OSError, ValueError):
        written = 0
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    for line in locks.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146308 0 EOF"; a waiter's line has "->" before FLOCK
        fields = line.split()
        if "FLOCK" not in fields or "->" in fields:
            continue
        i = fields.index("FLOCK")
        if len(fields) < i + 5 or not fields[i + 3].isdigit():
            continue
        pid, place = int(fields[i + 3]), fields[i + 4].rsplit(":", 1)  # place: "MAJOR:MINOR", "INODE"
        if len(place) == 2 and place[1] == str(st.st_ino) and (place[0] == device or pid == written):
            return pid
    return None


def is_host(pid: int | None) -> bool:
    """Whether `pid` is an agent host (a recycled pid is some other program)."""
    if not pid:
        return False
    try:
        return b"gateway.agenthost" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def spool_bytes(spool: str | None) -> int:
    """The bytes of the files under a host's spool directory (a host that exits deletes it; one killed
    leaves it behind)."""
    if not spool:
        return 0
    total = 0
    for root, _dirs, files in os.walk(spool):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # trimmed while counted (SP-2)
                pass
    return total


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def read_rows(db: Path) -> list[tuple[Any, ...]]:
    """agent_hosts joined with sessions (for the agent), from the SQLite file opened read-only: nothing written,
    nothing checkpointed. No file, or a store older than agent hosts: no rows."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    try:
        return list(conn.execute(HOST_ROWS))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        conn.close()


HOST_ROWS = ("SELECT h.session_id, h.execution_id, h.host, h.mark, h.incarnation, s.agent "
             "FROM agent_hosts h LEFT JOIN sessions s ON s.id = h.session_id ORDER BY h.session_id")


def read_pg_rows(url: str, state_dir: Path) -> list[tuple[Any, ...]]:
    """agent_hosts of a PostgreSQL store, this node's only: every node's rows are in the one database, and a host is
    the node's whose state directory holds its socket."""
    import asyncio

    import asyncpg

    async def fetch() -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            return [tuple(r) for r in await conn.fetch(HOST_ROWS)]
        except asyncpg.UndefinedTableError:
            return []
        finally:
            await conn.close()

    mine = str(state_dir / "hosts") + os.sep
    return [r for r in asyncio.run(fetch()) if str(orjson.loads(r[2] or "{}").get("socket", "")).startswith(mine)]


def view(row: tuple[Any, ...], attached: bool) -> HostView:
    """A row as shown: of the host JSON only the pids, the spool and the start time are taken."""
    session_id, execution_id, host_json, mark_json, incarnation, agent = row
    host = orjson.loads(host_json) if host_json else {}
    mark = orjson.loads(mark_json) if mark_json else None
    host_pid = _int(host.get("host_pid"))
    remote = str(host["remote"]) if host.get("remote") else None
    # A remote host is not looked for on this machine: while its gateway runs it counts as attached, else as
    # lingering there (its linger says how long)
    alive = is_host(host_pid) if remote is None else True
    spool = host.get("spool") if isinstance(host.get("spool"), str) else None
    return HostView(
        session_id=str(session_id), agent=None if agent is None else str(agent), execution_id=str(execution_id),
        agent_pid=_int(host.get("agent_pid")), host_pid=host_pid, alive=alive,
        state="gone" if not alive else "attached" if attached else "lingering",
        spool=spool, spool_bytes=spool_bytes(spool) if remote is None else 0,
        seen=_int(mark.get("seen", 0)) if isinstance(mark, dict) else None,
        open=[int(o) for o in mark.get("open", []) if _int(o) is not None] if isinstance(mark, dict) else [],
        incarnation=int(incarnation or 0), started=_float(host.get("started")), remote=remote)


def where(config: ServeConfig) -> tuple[Path, str, bool]:
    """The state directory `config` names, its store (a SQLite file's path, or a URL without its password, to show)
    and whether that is PostgreSQL: as `serve` would open them."""
    from agents.paths import default_state_dir

    from ..store import redacted, sqlite_path, store_kind

    state_dir = Path(config.state_dir).expanduser() if config.state_dir else default_state_dir()
    store = config.store or str(state_dir / "gateway.db")
    if store_kind(store) == "postgresql":
        return state_dir, redacted(store), True
    return state_dir, str(sqlite_path(store).expanduser()), False


def survey(config: ServeConfig) -> Hosts:
    """The state directory's agent hosts under `config`. sqlite3.Error when the store cannot be read."""
    state_dir, store, postgres = where(config)
    pid = gateway_pid(state_dir)
    rows = read_pg_rows(str(config.store), state_dir) if postgres else read_rows(Path(store))
    return Hosts(state_dir, store, postgres, pid, config.host_linger, [view(r, pid is not None) for r in rows])


def summary(config: ServeConfig) -> str:
    """`doctor`'s line: how many hosts run, and how many of them linger with no gateway."""
    if config.host_linger <= 0:
        return "hosts: off (host_linger = 0)"
    try:
        found = survey(config)
    except Exception as exc:  # sqlite3's, asyncpg's or the network's
        return f"hosts: the store cannot be read ({type(exc).__name__})"
    return f"hosts: {found.running} running ({found.lingering} lingering)"


def _seconds(value: float) -> str:
    return f"{value:g}"


def render(found: Hosts, say: Callable[[str], None] = print) -> None:
    """The hosts in plain words: what runs on the state directory, then one line per host."""
    if not found.hosts:
        say(f"no agent hosts in {found.state_dir}" + ("" if found.host_linger > 0 else
                                                       " (host_linger = 0: agents run as the gateway's children)"))
        return
    if found.gateway_pid is not None:
        say(f"gateway: running (pid {found.gateway_pid}) on {found.state_dir}, attached to its hosts")
    else:
        linger = (f"host_linger = {_seconds(found.host_linger)} s" if found.host_linger > 0
                  else "the host_linger the gateway started them with")
        say(f"gateway: none running on {found.state_dir}; the hosts still running are lingering (up to {linger} since "
            "the gateway left), then each stops its agent and exits")
    for h in found.hosts:
        state = f"alive ({h.state})" if h.alive else "gone"
        committed = ("nothing committed yet" if h.seen is None
                     else f"seen {h.seen}, open lines {', '.join(map(str, h.open)) or 'none'}")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h.started)) if h.started else "unknown"
        if h.remote is not None:
            say(f"session {h.session_id}: agent {h.agent or 'unknown'} on remote host {h.remote} (agent pid "
                f"{h.agent_pid or 'unknown'}, host pid {h.host_pid or 'unknown'} there; {h.state}), {committed}, "
                f"started {started}")
            continue
        say(f"session {h.session_id}: agent {h.agent or 'unknown'}, agent pid {h.agent_pid or 'unknown'}, host pid "
            f"{h.host_pid or 'unknown'} {state}, spool {h.spool_bytes} bytes, {committed}, started {started}")


def as_json(found: Hosts) -> list[dict[str, Any]]:
    """The hosts for scripts: each with the gateway it is attached to (null when none) and the configured linger."""
    return [{**asdict(h), "gateway_pid": found.gateway_pid, "host_linger": found.host_linger} for h in found.hosts]


def run(args: argparse.Namespace) -> int:
    from ..config import ConfigError, load_config

    try:
        config = load_config(args.config, {"state_dir": args.state_dir, "store": args.store})
    except ConfigError as exc:
        print(f"acp-gateway hosts: {exc}", file=sys.stderr)
        return 2
    try:
        found = survey(config)
    except Exception as exc:  # sqlite3's, asyncpg's or the network's: one line, the URL without its password
        print(f"acp-gateway hosts: cannot read the store {where(config)[1]}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(as_json(found)).decode())
    else:
        render(found)
    return 0
