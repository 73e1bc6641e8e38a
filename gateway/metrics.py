"""The gateway's Prometheus metrics (prometheus_client), in one registry of its own: what `/metrics` serves.

Each metric is defined once here; the rooms that observe something import its metric. Labels are bounded:
owners (configured tokens), agent profile ids, method names of the API's table, stop reasons and restore outcomes
are finite sets.

What an owner's work caused carries an `owner` label, and an owner's token reads only the series labelled with its
owner (`exposition(owner)`): another owner's call counts and turns would tell when and how they work. The
gateway-wide series (live sessions, connections, the journal, the store) are the operator's: `metrics_token`, or
the token of a gateway's only owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Metric, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry(auto_describe=True)

RESTORES = Counter("acp_gateway_restores", "Agent launches by how the session was established: the method that "
                   "settled it (session/resume, session/load, session/new, none), the outcome and the failure class",
                   ["owner", "agent", "method", "outcome", "failure_class"], registry=REGISTRY)
LAUNCHES = Counter("acp_gateway_agent_launches", "Agent processes started", ["owner", "agent"], registry=REGISTRY)
EXITS = Counter("acp_gateway_agent_exits", "Agent processes stopped, by why: stopped (asked), exited (on its own), "
                "cancelled, cancel_unanswered, failed", ["owner", "agent", "reason"], registry=REGISTRY)
HOST_REATTACHES = Counter("acp_gateway_host_reattaches", "Agent hosts a starting gateway found, by outcome: attached "
                          "(the agent kept running) or lost (dead, lingered out, refused: the restore rules follow)",
                          ["outcome"], registry=REGISTRY)
TURNS = Counter("acp_gateway_turns", "Turns ended, by stop reason (error: the agent failed the turn)",
                ["owner", "agent", "stop_reason"], registry=REGISTRY)
RPC_CALLS = Counter("acp_gateway_rpc_calls", "JSON-RPC calls by method and outcome (ok, or the error code)",
                    ["owner", "method", "outcome"], registry=REGISTRY)
RPC_SECONDS = Histogram("acp_gateway_rpc_seconds", "JSON-RPC call latency by method", ["owner", "method"],
                        registry=REGISTRY,
                        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30, 120))
RELAY_LAG = Histogram("acp_gateway_relay_lag_seconds", "From an event being queued (an agent's update read) to its "
                      "commit and fan-out, per group commit", registry=REGISTRY,
                      buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1))
SUBSCRIBERS_BEHIND = Counter("acp_gateway_subscribers_behind", "Times a subscriber read slower than its events came "
                             "and was fed from the journal instead of live (not dropped)", registry=REGISTRY)
SUBSCRIPTIONS_ENDED = Counter("acp_gateway_subscriptions_ended", "Subscriptions the journal could not bring forward in "
                              "order, ended and told to resubscribe (4429), by rule: SUB-7 retention pruned past the "
                              "cursor, SUB-8 reading the journal failed", ["rule"], registry=REGISTRY)
OUTBOX_PEAK_BYTES = Gauge("acp_gateway_outbox_peak_bytes", "The most bytes any connection's outbox has held queued "
                          "since the gateway started (bounded by outbox_limit_bytes plus a page)", registry=REGISTRY)
_outbox_peak = [0]


def outbox_queued(size: int) -> None:
    """A connection's outbox holds `size` bytes queued: the peak gauge follows."""
    if size > _outbox_peak[0]:
        _outbox_peak[0] = size
        OUTBOX_PEAK_BYTES.set(size)


ACP_CALLS = Counter("acp_gateway_acp_calls", "ACP calls of remote clients on /acp by method and outcome (ok, or the "
                    "error code)", ["owner", "method", "outcome"], registry=REGISTRY)
ACP_SECONDS = Histogram("acp_gateway_acp_seconds", "ACP call latency on /acp by method (session/prompt: the whole "
                        "turn)", ["owner", "method"], registry=REGISTRY,
                        buckets=(0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10, 60, 300, 1800))


def gauge(name: str, documentation: str, read: Callable[[], float]) -> None:
    """A gauge read when scraped (live sessions, connections, …), set up once the gateway runs."""
    if name in REGISTRY._names_to_collectors:  # a second gateway in one process (tests) rebinds it
        REGISTRY.unregister(REGISTRY._names_to_collectors[name])
    Gauge(name, documentation, registry=REGISTRY).set_function(read)


class _OwnersView:
    """The registry as one owner may read it: only the samples labelled with that owner."""

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def collect(self) -> Iterator[Metric]:
        for family in REGISTRY.collect():
            samples = [s for s in family.samples if s.labels.get("owner") == self.owner]
            if samples:
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = samples
                yield kept


def exposition(owner: str | None = None) -> tuple[bytes, str]:
    """The text format and its content type: every series (the operator's view), or `owner`'s own."""
    return generate_latest(REGISTRY if owner is None else _OwnersView(owner)), CONTENT_TYPE_LATEST
