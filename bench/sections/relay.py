"""Section `relay`: relay throughput to 1 and 10 subscribers and an ACP client, beside the bare relays and the SDK."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from floods import acp_relay, bare_relay, relay, sdk_rate
from harness import N_UPDATES, RUNS, CpuMeter, Gateway
from report import row
from tally import Tally, got_all


@dataclass
class RelayRuns:
    """What the section measured, run by run: the gateway's floods (tallies), the baselines' rates (upd/s), and
    the CPU each relay process spent on them."""

    one: list[Tally] = field(default_factory=list)
    acp: list[Tally] = field(default_factory=list)
    batched: list[Tally] = field(default_factory=list)
    ten: list[Tally] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    durable: list[float] = field(default_factory=list)
    durable_batched: list[float] = field(default_factory=list)
    sdk: list[float] = field(default_factory=list)
    cpu_one: CpuMeter = field(default_factory=CpuMeter)
    cpu_batched: CpuMeter = field(default_factory=CpuMeter)
    cpu_bare: CpuMeter = field(default_factory=CpuMeter)
    cpu_durable: CpuMeter = field(default_factory=CpuMeter)
    cpu_durable_batched: CpuMeter = field(default_factory=CpuMeter)


async def measure(tmp: Path, agents: Path) -> RelayRuns:
    gw = Gateway(tmp / "relay", agents).start()
    await relay(gw, 1, N_UPDATES // 10, figure="relay warm-up")  # imports, first journal pages, the SQLite cache
    r = RelayRuns()
    assert gw.proc is not None
    database = tmp / "durable-relay.db"
    # Interleaved, one run of each per round, so a machine that slows down mid-bench slows all of them.
    for _ in range(RUNS):
        r.one.append(await r.cpu_one.measure(gw.proc.pid, N_UPDATES, relay(gw, 1, N_UPDATES,
                                                                           figure="relay throughput, 1 subscriber")))
        r.acp.append(await acp_relay(gw, N_UPDATES))
        r.batched.append(await r.cpu_batched.measure(gw.proc.pid, N_UPDATES, relay(
            gw, 1, N_UPDATES, batch=True, figure="relay, 1 subscriber with subscribe {batch: true}")))
        r.bare.append(await bare_relay(N_UPDATES, r.cpu_bare))
        r.durable.append(await bare_relay(N_UPDATES, r.cpu_durable, database))
        r.durable_batched.append(await bare_relay(N_UPDATES, r.cpu_durable_batched, database, batch=True))
        rate = sdk_rate(N_UPDATES)
        if rate is not None:
            r.sdk.append(rate)
    # Ten subscribers take their events in arrays: with a message per event, the ten clients (in this one driver
    # process) spent more time receiving than the gateway spent sending, and the figure measured them.
    r.ten = [await relay(gw, 10, N_UPDATES // 4, batch=True, figure="relay, each of 10 subscribers {batch: true}")
             for _ in range(RUNS)]
    gw.stop()
    return r


def sdk_and_ten_rows(r: RelayRuns) -> list[str]:
    """The gateway beside the official Python SDK client, and ten subscribers beside one."""
    rates_one, rates_batched = [t.rates[0] for t in r.one], [t.rates[0] for t in r.batched]
    ten_each = [min(t.rates) for t in r.ten]
    rows = []
    if r.sdk:
        rows.append(row(f"relay throughput, 1 subscriber ({got_all(r.one)})", rates_one, r.sdk, "upd/s", "≥ 2× SDK",
                        statistics.median(rates_one) >= 2 * statistics.median(r.sdk), "official Python SDK client"))
    else:
        rows.append("| relay throughput vs SDK | – | the SDK client could not be installed or failed (stderr says) | – "
                    "| ≥ 2× | not measured |")
    rows.append(row(f"relay, each of 10 subscribers {{batch: true}} ({got_all(r.ten)})", ten_each, rates_batched,
                    "upd/s", "≥ 0.5× of 1 subscriber",
                    statistics.median(ten_each) >= 0.5 * statistics.median(rates_batched),
                    "1 subscriber {batch: true}"))
    return rows


def bare_rows(r: RelayRuns) -> list[str]:
    """The gateway beside the bare relay and the durable bare relay; a target not met quotes the CPU per update
    each relay process spent (on 2 cores the agent, the relay and the subscribers' process share them, so CPU
    per update bounds the rate)."""
    rates_one, rates_batched = [t.rates[0] for t in r.one], [t.rates[0] for t in r.batched]
    name_one = f"relay throughput, 1 subscriber ({got_all(r.one)})"
    name_batched = f"relay, 1 subscriber with subscribe {{batch: true}} ({got_all(r.batched)})"
    one, batched, bare = r.cpu_one, r.cpu_batched, r.cpu_bare
    cpu_why = (f"the gateway uses {one.per_item:.1f} µs of CPU per update, the bare relay {bare.per_item:.1f} "
               f"(the subscriber's process {one.driver_per_item:.1f} and {bare.driver_per_item:.1f}); "
               "where it goes: bench/README.md")
    rows = [row(name_one, rates_one, r.bare, "upd/s", "≥ 0.9× bare relay",
                statistics.median(rates_one) >= 0.9 * statistics.median(r.bare), "bare asyncio→websockets relay",
                cpu_why),
            row(name_batched, rates_batched, r.bare, "upd/s", "≥ 1.2× bare relay",
                statistics.median(rates_batched) >= 1.2 * statistics.median(r.bare), "bare asyncio→websockets relay",
                f"the gateway uses {batched.per_item:.1f} µs of CPU per update in arrays (its subscriber "
                f"{batched.driver_per_item:.1f}), the bare relay {bare.per_item:.1f}")]
    # The same two beside a relay that, like the gateway, commits what it relays before sending it.
    durable, durable_batched = r.cpu_durable, r.cpu_durable_batched
    rows.append(row(name_one, rates_one, r.durable, "upd/s", "≥ 0.9× durable bare relay",
                    statistics.median(rates_one) >= 0.9 * statistics.median(r.durable),
                    "durable bare relay (SQLite WAL commit per batch read)",
                    f"the gateway uses {one.per_item:.1f} µs of CPU per update, the durable bare relay "
                    f"{durable.per_item:.1f} (the subscriber's process {one.driver_per_item:.1f} and "
                    f"{durable.driver_per_item:.1f}); where it goes: bench/README.md"))
    rows.append(row(name_batched, rates_batched, r.durable_batched, "upd/s", "≥ 1.2× durable bare relay",
                    statistics.median(rates_batched) >= 1.2 * statistics.median(r.durable_batched),
                    "durable bare relay, a JSON array per batch",
                    f"the gateway uses {batched.per_item:.1f} µs of CPU per update in arrays, the durable bare "
                    f"relay {durable_batched.per_item:.1f} (the subscriber's process "
                    f"{batched.driver_per_item:.1f} and {durable_batched.driver_per_item:.1f})"))
    return rows


def reported_rows(r: RelayRuns) -> list[str]:
    """CPU per update, arrays beside a message per event, and an ACP client on /acp beside a /rpc subscriber."""
    rates_one, rates_batched = [t.rates[0] for t in r.one], [t.rates[0] for t in r.batched]
    rates_acp = [t.rates[0] for t in r.acp]
    return [row("CPU per relayed update, gateway process", [r.cpu_one.per_item], [r.cpu_bare.per_item], "µs",
                "reported", True, "bare relay process"),
            row("CPU per relayed update, gateway process", [r.cpu_one.per_item], [r.cpu_durable.per_item], "µs",
                "reported", True, "durable bare relay process"),
            row(f"relay, 1 subscriber with subscribe {{batch: true}} ({got_all(r.batched)})", rates_batched,
                rates_one, "upd/s", "reported", True, "1 subscriber, a message per event (the default)"),
            row(f"relay throughput, 1 ACP client on /acp ({got_all(r.acp)})", rates_acp, rates_one,
                "upd/s", "≥ 0.8× /rpc subscriber",
                statistics.median(rates_acp) >= 0.8 * statistics.median(rates_one),
                "1 /rpc subscriber (task.session.event)")]


async def relay_section(tmp: Path, agents: Path, rows: list[str]) -> None:
    """Relay throughput, 1 and 10 subscribers, against the bare relay, the durable bare relay and the official SDK
    client; each gateway row says what its subscribers got of the floods (a subscriber short of one fails it)."""
    r = await measure(tmp, agents)
    rows += sdk_and_ten_rows(r) + bare_rows(r) + reported_rows(r)
