"""Code that runs inside an agent's sandbox, not in the gateway: the standard library only, and this package imports
nothing, so `python -I -m gateway.sandboxed.key_relay` starts fast and sees nothing of the gateway."""
