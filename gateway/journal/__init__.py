"""The journal's fan-out (docs/architecture.md: The journal): every event is written to the store, then published to
the subscriptions that follow it. `bus` holds the bus and a subscription's feed; `phases` the subscription's phases
as a table."""

from .bus import EventBus
from .subscription import HEARTBEAT_SECONDS, Sink, Subscription, synthetic_frame

__all__ = ["HEARTBEAT_SECONDS", "EventBus", "Sink", "Subscription", "synthetic_frame"]
