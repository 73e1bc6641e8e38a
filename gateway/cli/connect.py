"""`acp-gateway connect`: an ACP agent on stdio that is a gateway session — what an editor runs as a custom agent.

It finds the gateway and the token as every other command does (--url / ACP_GATEWAY_URL / the state directory's
`url`; --token / ACP_GATEWAY_TOKEN / the state directory's `token`) and speaks to its `/acp` endpoint
(gateway/clients/bridge: the rules, then the I/O)."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .argspec import Argument, arg
from .frontend import gateway_token, gateway_url

CONNECT_ARGUMENTS: tuple[Argument, ...] = (
    arg("--url", default=None, help="the gateway (default: ACP_GATEWAY_URL, else where `serve` listens, from the "
        "state directory, else ws://127.0.0.1:8765); its /acp endpoint is used"),
    arg("--token", help="default: ACP_GATEWAY_TOKEN, else the token file in --state-dir"),
    arg("--state-dir", type=Path, default=None, help="where to find the gateway's url and token"),
    arg("--agent", default=None, help="the agent profile a new session runs (default: the gateway's default_agent; "
        "an editor's own _meta.acpGateway.agent wins)"),
    arg("--wait", type=float, default=15.0, metavar="SECONDS",
        help="how long to wait for the gateway at start before answering the editor that there is none (default 15)"),
    arg("--session", default=None, help="an existing gateway session (id or name, see `acp-gateway sessions`) that "
        "the editor's new thread opens, with its conversation, instead of starting a session"),
)


def acp_url(url: str) -> str:
    """The `/acp` endpoint of the gateway a URL names (its `/rpc`, its root, or `/acp` itself)."""
    if "://" not in url:  # `127.0.0.1:8765`: a bare address
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if path.endswith("/rpc"):
        path = path[: -len("/rpc")]
    if not path.endswith("/acp"):
        path += "/acp"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def run(args: argparse.Namespace) -> int:
    from ..clients.bridge.link import run_bridge

    return run_bridge(lambda: acp_url(gateway_url(args)), gateway_token(args), args.agent, args.session, args.wait)
