"""The key proxy: a profile's brokered model-API key stays in the gateway. Agents reach this HTTP server on a unix
socket (bound read-only into each sandbox, `key_relay` turning it into a loopback port there) with a stand-in; the
proxy swaps it for the real key (`key_rules`) and streams the upstream's answer back unchanged.

Grants live in memory, one per brokered entry per agent execution, and end with the execution: a stand-in an agent
kept is worthless once it has exited, and nothing about a grant is stored. A stand-in is derived from the execution
(an HMAC under a secret of the state directory's, never shown to an agent), so a restarted gateway that takes an
agent back from its host (docs/agent-hosts.md) grants the very stand-in that agent holds, the real key read again
from where the profile names it; the socket keeps its path, in a directory of its own that sandboxes bind.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agents.brokered import BrokeredKey

from .key_rules import STAND_IN_PREFIX, Refused, response_headers, stand_in_of, upstream_request

# aiohttp (~0.1 s to import) only once a brokered-key profile runs: a gateway without one never loads it.
if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

log = logging.getLogger("acp_gateway.key_proxy")

SANDBOX_DIRECTORY = "/run/acp-gateway"  # where a sandbox sees the proxy socket's directory (bound, not the socket:
SANDBOX_SOCKET = f"{SANDBOX_DIRECTORY}/keys.sock"  # a restarted gateway's new socket is seen there by every agent)
SECRET_BYTES = 32
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # a model request with its context: large, never unbounded
CHUNK = 64 * 1024


@dataclass(frozen=True)
class Grant:
    """What a stand-in stands for: whose agent execution, which upstream, which header, which key."""

    owner: str
    session_id: str
    execution_id: str
    upstream: str
    header: str
    real_key: str
    url: str  # `VAR=PATH`: the base URL variable `key_relay` sets, and the path it ends with


class KeyProxy:
    """The gateway's forwarding proxy for brokered keys (one per gateway, started at the first brokered launch)."""

    def __init__(self, state_dir: Path) -> None:
        self.socket_path = state_dir / "run" / "keys" / "keys.sock"  # the only file in its directory
        self.secret_path = state_dir / "run" / "stand-ins.secret"  # never in a directory any sandbox binds
        self._secret: bytes | None = None
        self.grants: dict[str, Grant] = {}
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    async def admit(self, owner: str, session_id: str, execution_id: str, keys: list[BrokeredKey],
                    environ: dict[str, str]) -> dict[str, str]:
        """Grants for an execution's brokered keys (the proxy started if it is not yet): the variables its agent
        gets, a stand-in in each key variable (`urls` gives the base URLs). An entry whose key cannot be read gets
        no grant: its agent is then given no key, and says so itself."""
        await self.start()
        env: dict[str, str] = {}
        for index, entry in enumerate(keys):
            real, preset = entry.real_key(environ), entry.resolved()
            if not real:
                log.warning("session %s: a brokered key for %s cannot be read; its agent gets none", session_id,
                            preset.upstream, extra={"session_id": session_id})
                continue
            stand_in = self.stand_in(execution_id, index)
            url = f"{preset.base_url_var}={preset.base_path}"
            self.grants[stand_in] = Grant(owner, session_id, execution_id, preset.upstream, preset.header, real, url)
            env[preset.key_var] = stand_in
        return env

    def stand_in(self, execution_id: str, index: int) -> str:
        """The stand-in of an execution's `index`-th brokered key: the same for every gateway of this state
        directory, unguessable without its secret."""
        digest = hmac.new(self._state_secret(), f"{execution_id}\0{index}".encode(), hashlib.sha256).digest()
        return STAND_IN_PREFIX + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def secret_file(self) -> str:
        """The secret's path, the file made first if need be (a sandbox masks it by binding over it: a missing one
        would be made empty by the mount, and taken for a broken secret)."""
        self._state_secret()
        return str(self.secret_path)

    def _state_secret(self) -> bytes:
        if self._secret is None:
            self.secret_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                fd = os.open(self.secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                secret = self.secret_path.read_bytes()
                if len(secret) != SECRET_BYTES:
                    raise RuntimeError(f"{self.secret_path} is not a stand-in secret ({len(secret)} bytes, not "
                                       f"{SECRET_BYTES}): remove it and restart the agents with brokered keys") \
                        from None
            else:
                secret = secrets.token_bytes(SECRET_BYTES)
                with os.fdopen(fd, "wb") as file:
                    file.write(secret)
            self._secret = secret
        return self._secret

    def urls(self, session_id: str) -> tuple[str, ...]:
        """The base URLs a session's agent and terminals are given (none: it has no brokered key)."""
        return tuple(dict.fromkeys(g.url for g in self.grants.values() if g.session_id == session_id))

    def revoke(self, session_id: str, keep_execution: str | None = None) -> None:
        """End a session's grants (all but `keep_execution`'s: the one running now)."""
        for stand_in, grant in list(self.grants.items()):
            if grant.session_id == session_id and grant.execution_id != keep_execution:
                del self.grants[stand_in]

    async def start(self) -> None:
        if self._runner is not None:
            return
        import aiohttp
        from aiohttp import web

        directory = self.socket_path.parent
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory.parent, 0o700)
        os.chmod(directory, 0o700)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a gateway killed before it could remove it
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        old = os.umask(0o177)  # the socket is 0600 from the moment it exists
        try:
            await web.UnixSite(runner, str(self.socket_path)).start()
        finally:
            os.umask(old)
        self._client = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(
            total=None, connect=30, sock_read=600))
        self._runner = runner

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._client is not None:
            await self._client.close()
            self._client = None
        self.grants.clear()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        import aiohttp  # loaded by start() already
        from aiohttp import web
        from multidict import CIMultiDict

        try:
            stand_in = stand_in_of(request.headers.items(), request.raw_path)
            grant = self.grants.get(stand_in)
            if grant is None:
                raise Refused(401, "KEY-5", "this stand-in key is not (or no longer) valid: it is given to one agent "
                                            "execution and ends with it")
            outgoing = upstream_request(grant.upstream, grant.header, grant.real_key, request.raw_path,
                                        request.headers.items())
        except Refused as refused:
            return _refusal(refused.status, refused.message)
        assert self._client is not None
        body = await request.read()
        response: web.StreamResponse | None = None
        try:
            async with self._client.request(request.method, outgoing.url, headers=list(outgoing.headers),
                                            data=body or None, allow_redirects=False) as answer:
                response = web.StreamResponse(status=answer.status, reason=answer.reason,
                                              headers=CIMultiDict(response_headers(answer.headers.items())))
                await response.prepare(request)
                async for chunk in answer.content.iter_chunked(CHUNK):  # streamed: an SSE answer as it comes
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (aiohttp.ClientError, TimeoutError) as exc:  # KEY-6: the upstream's name and the error's kind only
            log.warning("session %s: brokered request to %s failed: %s", grant.session_id, grant.upstream,
                        type(exc).__name__, extra={"session_id": grant.session_id})
            if response is not None:  # cut mid-answer: the agent sees its connection end, as upstream's would
                return response
            return _refusal(502, f"the gateway's key proxy could not reach {grant.upstream}: {type(exc).__name__}")


def _refusal(status: int, message: str) -> web.Response:
    """KEY-6: an error an API client shows (both the Anthropic and the OpenAI shape read `error.message`)."""
    from aiohttp import web

    return web.json_response({"type": "error", "error": {"type": "acp_gateway_key_proxy", "message": message}},
                             status=status)
