"""What the integration tests share, beside tests/gateway_harness.py: the gateway worlds (`world`), what tests read
back from a gateway (`probes`), and a journal subscriber's sink (`frames`). Test modules import from here, never from
each other."""
