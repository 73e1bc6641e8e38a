"""The checker's framework: tiers and verdicts, the probe that drives an agent, a check and its context, and the
registry the `@check` decorator fills. The checks themselves are in `core.py` and `kit.py`; `run.py` runs them."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import orjson

from ..auth import choose_auth_method
from ..client import AcpClient, ClientOptions
from ..elicitation import Elicitation
from ..errors import AUTH_REQUIRED, RequestTimeout, RpcError
from ..models import AuthMethod, conversation
from ..process import AgentProcess
from .options import CheckOptions, ClientOffer
from .schema import Violation, acp_v1_schema
from .terminals import ScratchTerminals

SPEC = "https://agentclientprotocol.com/protocol"
CANCEL_GRACE = 5.0


class Tier(StrEnum):
    MANDATORY = "mandatory"  # the spec's MUSTs
    CAPABILITY = "capability"  # only when advertised; then it must work
    ADVISORY = "advisory"  # SHOULDs: reported, never fatal
    INFORMATIONAL = "informational"  # observed, never asserted


class Result(StrEnum):
    PASS = "pass"
    FAIL = "fail"  # the agent broke a rule: evidence and citation
    BLOCKED = "blocked"  # a prerequisite failed (authentication, a failing turn): named, with what would unblock it
    INCONCLUSIVE = "inconclusive"  # the observation could not decide (a turn ended before a cancel could reach it)
    SKIP = "skip"  # not advertised, not applicable
    INFO = "info"


# The verdicts that say "could not be checked here", as opposed to "not conformant".
UNDECIDED = (Result.BLOCKED, Result.INCONCLUSIVE)


class CheckFailed(Exception):
    pass


class TurnTimedOut(CheckFailed):
    """A prompt turn that did not end within the turn timeout."""


class CheckSkipped(Exception):
    pass


class CheckBlocked(Exception):
    """A prerequisite failed: not the agent's fault as far as this check can tell."""


class CheckInconclusive(Exception):
    pass


def blocked_by_error(err: RpcError, doing: str) -> CheckBlocked | None:
    """The errors that block a check instead of failing it: authentication that could not be done here, and a turn
    the agent could not run (its model unreachable or unconfigured)."""
    if err.code == AUTH_REQUIRED:
        return CheckBlocked(f"{doing} needs authentication ({err.message}) and no credentials worked here: give the "
                            "agent its credentials (its API key in the environment, --auth-method ID, or --agent "
                            "with a profile whose env and auth_method set them) and run again")
    if doing == "a prompt turn":
        return CheckBlocked(f"a prompt turn failed ({err.code} {err.message}): the model behind the agent may be "
                            "unreachable or unconfigured; make a turn work, then run again")
    return None


class TurnGate:
    """Whether a prompt turn can run here at all, decided once for the whole run.

    Most checks need a turn that completes. When the agent's model is unreachable every such turn fails the same
    way, often after the agent's own retries (half a minute for real adapters offline): the first turn of the run is
    the precondition's test, turns asked for meanwhile wait for its outcome, and once a turn was blocked every later
    one is blocked at once with the same evidence, instead of each check waiting for the same failure. A first turn
    that never ends (an agent retrying an unreachable model past the turn timeout) FAILs the check it ran in, and
    blocks the others the same way.
    """

    def __init__(self) -> None:
        self.blocked: str | None = None
        self.works = False
        self._first: asyncio.Future[None] | None = None

    async def run(self, turn: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        if self.blocked is not None:
            raise CheckBlocked(f"{self.blocked} (decided once for the run by its first turn)")
        if not self.works and self._first is not None:
            await asyncio.shield(self._first)
            return await self.run(turn)
        first = not self.works and self._first is None
        if first:
            self._first = asyncio.get_running_loop().create_future()
        try:
            result = await turn()
        except CheckBlocked as exc:
            if first:
                self.blocked = str(exc)
            raise
        except TurnTimedOut as exc:  # judged once, by the check whose turn it was; the others are not made to wait
            if first:
                self.blocked = (f"{exc}: a turn did not end in time in another check, which judged it; make a turn "
                                "end, then run again")
            raise
        except BaseException:
            if first:  # not the precondition's fault (a timeout, a broken answer): the next turn tests it again
                self._first = None
            raise
        finally:
            if first and self._first is not None and not self._first.done():
                self._first.set_result(None)
        if first:
            self.works = True
        return result


@dataclass
class Probe:
    """One agent process under test, with everything it said since the check using it began."""

    client: AcpClient
    started: float
    options: CheckOptions = field(default_factory=CheckOptions)
    transcript: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    requests_in: list[dict[str, Any]] = field(default_factory=list)
    sessions: set[str] = field(default_factory=set)  # every session this process created, over its whole life
    _answering: dict[Any, str] = field(default_factory=dict)
    _noise_before: int = 0
    init: dict[str, Any] | None = None
    init_seconds: float | None = None
    authenticated: bool = False
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))  # for env_var auth methods
    permission_asked: asyncio.Event = field(default_factory=asyncio.Event)
    first_update: asyncio.Event = field(default_factory=asyncio.Event)
    turns: TurnGate = field(default_factory=TurnGate)  # the run's: shared by every probe
    activity: int = 0  # conversation updates and requests this process sent: what shows a turn running
    offer: ClientOffer = field(default_factory=ClientOffer)  # what its initialize offers
    # Run-wide findings (never reset by `begin`): responses of the wrong shape, error messages of the wrong shape.
    envelope: list[str] = field(default_factory=list)
    error_shapes: list[str] = field(default_factory=list)
    responses_in: list[dict[str, Any]] = field(default_factory=list)  # every response since the check began
    # How many updates had arrived when each response (by id) was read: what came before an answer, counted at the
    # answer's arrival, not when the awaiting coroutine next ran (late updates may have been read by then).
    updates_at: dict[Any, int] = field(default_factory=dict)
    last_new: dict[str, Any] | None = None  # the last session/new answer
    terminals: ScratchTerminals | None = None  # the terminals it was given, where the offer has them

    def begin(self) -> None:
        """A check starts using this (shared) process: what it observes from now on is that check's evidence."""
        self.transcript, self.violations, self.updates, self.requests_in = [], [], [], []
        self.responses_in, self.updates_at = [], {}
        self._noise_before = self._noise_total
        self.permission_asked.clear()
        self.first_update.clear()

    def observe(self, direction: str, msg: dict[str, Any]) -> None:
        self.transcript.append({"t": round(time.monotonic() - self.started, 4), "dir": direction,
                                "msg": _clip(msg)})
        if direction == "out":
            if "method" in msg and "id" in msg:
                self._answering[msg["id"]] = msg["method"]
            return
        if "method" in msg and "id" in msg:
            self.requests_in.append(msg)
            self.activity += 1  # a request of the agent's (a permission, a file): the turn runs
        if "method" not in msg:
            self.responses_in.append(msg)
            self.updates_at[msg.get("id")] = len(self.updates)
            self._judge_envelope(msg)
        answered = self._answering.pop(msg.get("id"), None) if "method" not in msg else None
        violation = acp_v1_schema().check_from_agent(msg, answered)
        if violation is not None:
            self.violations.append(violation)

    def _judge_envelope(self, msg: dict[str, Any]) -> None:
        """A response's JSON-RPC shape (kit ACP-JSONRPC-002) and its error message's (ACP-ERROR-001), noted."""
        if ("result" in msg) == ("error" in msg):
            self.envelope.append(f"response to id {shown(msg.get('id'))} carries "
                                 f"{'both' if 'result' in msg else 'neither'} of result and error")
            return
        if "error" not in msg:
            return
        error = msg["error"]
        code = error.get("code") if isinstance(error, dict) else None
        if not isinstance(error, dict) or not isinstance(code, int) or isinstance(code, bool) \
                or not isinstance(error.get("message"), str):
            self.envelope.append(f"error of id {shown(msg.get('id'))} is not {{code: integer, message: string}}: "
                                 f"{str(error)[:120]}")
            return
        text = error["message"]
        if not text.strip() or "\n" in text:
            self.error_shapes.append(f"error {error['code']} of id {shown(msg.get('id'))}: message "
                                     f"{'empty' if not text.strip() else 'over several lines'}: {shown(text[:120])}")

    async def call(self, method: str, params: dict[str, Any], timeout: float | None = None) -> Any:
        timeout = timeout or self.options.setup_timeout
        try:
            return await self.client.request(method, params, timeout=timeout)
        except RpcError as err:
            if method.startswith("session/") and await self.authenticate_if_asked(err):
                return await self.client.request(method, params, timeout=timeout)
            raise

    async def initialize(self, version: int = 1, judged: bool = False) -> dict[str, Any]:
        """The handshake. A shared process was initialized (with version 1) before its first check: that answer is
        reused. Without an answer in time, a check that judges initialize FAILs; any other is BLOCKED by it."""
        if self.init is not None and version == 1:
            return self.init
        began = time.monotonic()
        try:
            result = await self.call("initialize", {
                "protocolVersion": version,
                "clientCapabilities": self.offer.capabilities(),
                "clientInfo": {"name": "acp-gateway-check", "version": "0.1.0"}})
        except RpcError as err:
            raise CheckFailed(f"initialize answered an error: {err.message} ({err.code})") from None
        except RequestTimeout:
            said = (f"no answer to initialize within {self.options.setup_timeout:g} s (if the agent is only slow, "
                    "raise --setup-timeout)")
            raise (CheckFailed(said) if judged else CheckBlocked(f"{said}; see ACP-INIT-001, then run again")) from None
        if not isinstance(result, dict):
            raise CheckFailed(f"initialize answered {shown(result)}")
        self.init_seconds = time.monotonic() - began
        if version == 1:
            self.init = result
        return result

    async def authenticate_if_asked(self, err: RpcError) -> bool:
        """On -32000, authenticate once: with the profile's method if it names one, else an `env_var` method whose
        variables are set, else one the agent handles itself (no credentials are ever invented). True when it
        worked and the call should be retried."""
        if err.code != AUTH_REQUIRED or self.authenticated:
            return False
        self.authenticated = True
        advertised = [m for m in (self.init or {}).get("authMethods") or [] if isinstance(m, dict) and m.get("id")]
        parsed = []
        for raw in advertised:
            with contextlib.suppress(ValueError):
                parsed.append(AuthMethod.model_validate(raw))
        method = choose_auth_method(parsed, self.options.auth_method, self.env)
        if method is None:
            method = next((m["id"] for m in advertised if m.get("type", "agent") == "agent"), None)
        if method is None:
            return False
        try:
            await self.call("authenticate", {"methodId": method})
        except RpcError:
            return False
        except RequestTimeout:
            # An agent signing in with its vendor waits for a network it may not reach here: not its fault as far
            # as anyone can tell (codex-acp offline waits for its login server).
            raise CheckInconclusive(f"authenticate ({method}) got no answer within {self.options.setup_timeout:g} s: "
                                    "the agent may be waiting for a sign-in server it cannot reach; run again "
                                    "where it can, or give it its credentials") from None
        return True

    async def new_session(self, cwd: str, **extra: Any) -> str:
        try:  # `call` authenticates once on -32000 and asks again
            result = await self.call("session/new", {"cwd": cwd, "mcpServers": [], **extra})
        except RpcError as err:
            raise blocked_by_error(err, "session/new") or CheckFailed(
                f"session/new answered an error: {err.message} ({err.code})") from None
        sid = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(sid, str) or not sid:
            raise CheckFailed(f"session/new answered no sessionId: {result!r:.200}")
        self.last_new = result
        self.sessions.add(sid)
        return sid

    async def prompt(self, sid: str, text: str, blocks: Sequence[dict[str, Any]] = (),
                     meta: dict[str, Any] | None = None, judged: bool = False) -> dict[str, Any]:
        """A turn of `text` (and `blocks` after it, `meta` as the request's `_meta`). An error answer blocks the check
        (the environment's fault as far as it can tell), unless the turn is what the check judges (`judged`: a text
        turn worked before it), when it is raised as it is."""
        return await self.turns.run(lambda: self._prompt(sid, text, blocks, meta, judged))

    async def _prompt(self, sid: str, text: str, blocks: Sequence[dict[str, Any]] = (),
                      meta: dict[str, Any] | None = None, judged: bool = False) -> dict[str, Any]:
        heard = self.activity
        prompt: dict[str, Any] = {"sessionId": sid, "prompt": [{"type": "text", "text": text}, *blocks]}
        if meta is not None:
            prompt["_meta"] = meta
        request = asyncio.ensure_future(self.call("session/prompt", prompt, self.options.turn_timeout))
        request.add_done_callback(_seen)  # a turn given up on (a check's deadline) may still fail: seen, not warned of
        quiet = min(self.options.quiet_timeout, self.options.turn_timeout)
        done, _ = await asyncio.wait({request}, timeout=quiet)
        if not done and self.activity == heard:  # not a word: the turn is not running
            request.cancel()
            with contextlib.suppress(Exception):
                await self.client.cancel(sid)
            raise CheckBlocked(f"a prompt turn said nothing (no update, no answer) within {quiet:g} s: the model "
                               "behind the agent may be unreachable or unconfigured (raise --quiet-timeout if it "
                               "only starts slowly); make a turn work, then run again")
        try:
            result = await request
        except RpcError as err:
            if judged:
                raise
            raise blocked_by_error(err, "a prompt turn") or err from None
        except RequestTimeout:
            raise TurnTimedOut(f"the prompt turn did not end within {self.options.turn_timeout:g} s (raise "
                               "--turn-timeout if the agent is only slow)") from None
        if not isinstance(result, dict):
            raise CheckFailed(f"session/prompt answered {result!r:.200}")
        return result

    def agent_text(self, updates: Sequence[dict[str, Any]] | None = None) -> str:
        return "".join(_chunk_text(u, "agent_message_chunk") for u in (self.updates if updates is None else updates))

    @property
    def _noise_total(self) -> int:
        stats = self.client.conn.stats
        return stats.non_json + stats.non_jsonrpc

    @property
    def stdout_noise(self) -> int:
        return self._noise_total - self._noise_before

    @property
    def alive(self) -> bool:
        return self.client.process.returncode is None


def shown(value: Any) -> str:
    """A value of the agent's as JSON writes it (`"end_turn"`, `["a", "b"]`, `null`), not as Python would."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def _seen(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _chunk_text(params: dict[str, Any], kind: str) -> str:
    update = params.get("update") or {}
    content = update.get("content") if update.get("sessionUpdate") == kind else None
    return str(content.get("text", "")) if isinstance(content, dict) else ""


def _clip(value: Any, limit: int = 2000) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"...[{len(value) - limit} more]"
    if isinstance(value, dict):
        return {k: _clip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v, limit) for v in value[:200]]
    return value


async def launch_probe(argv: Sequence[str], workdir: str, env: dict[str, str] | None,
                       options: CheckOptions, turns: TurnGate | None = None, offer: ClientOffer | None = None) -> Probe:
    """A new agent process, observed, offered `offer` (default: files only). Its permission requests stay pending
    until the checker cancels the turn; its questions (elicitation, where offered) are declined."""
    offer = offer or options.offer
    probe_ref: dict[str, Probe] = {}

    def on_update(params: dict[str, Any], replay: bool) -> None:
        probe = probe_ref["p"]
        probe.updates.append(params)
        if conversation([params]):  # a state update (slash commands after set-up, usage) shows no turn running
            probe.activity += 1
            probe.first_update.set()

    async def hold_permission(params: dict[str, Any]) -> dict[str, Any]:
        probe_ref["p"].permission_asked.set()
        await asyncio.Event().wait()  # until the client cancels it
        return {"outcome": "cancelled"}

    # The process runs where the checker was started (a relative `python my_agent.py` works, as the user meant it);
    # its sessions and the files it may ask the checker for are in the scratch directory.
    process = await AgentProcess.spawn(argv, cwd=options.agent_cwd or os.getcwd(), env=env)
    terminals = ScratchTerminals(workdir) if offer.terminal else None
    client = AcpClient(process, cwd=workdir, on_update=on_update, on_permission=hold_permission,
                       options=ClientOptions(request_timeout=options.setup_timeout, stop_grace=1.0),
                       terminal_host=terminals,
                       on_elicitation=Declining() if offer.elicitation_form or offer.elicitation_url else None)
    probe = Probe(client, time.monotonic(), options, env=env if env is not None else dict(os.environ),
                  turns=turns if turns is not None else TurnGate(), offer=offer, terminals=terminals)
    probe_ref["p"] = probe
    client.conn.observers.append(probe.observe)
    return probe


class Declining:
    """The checker's answer to an agent's questions (where it offers elicitation): declined, nobody is there."""

    async def ask(self, elicitation: Elicitation, params: dict[str, Any]) -> dict[str, Any]:
        return {"action": "decline"}

    def completed(self, params: dict[str, Any]) -> None:
        pass


CheckFn = Callable[["CheckContext"], Awaitable[str]]


@dataclass(frozen=True)
class Check:
    id: str
    tier: Tier
    title: str
    citation: str
    fn: CheckFn
    needs: str | None = None  # the capability that must be advertised: "loadSession", "resume", "list", "close"
    fresh: bool = False  # needs agent processes of its own (a new initialize, stdin closed, a restart)
    tck: tuple[str, ...] = ()  # the ACP TCK's v1 requirement ids this check overlaps
    turn: bool = False  # cannot be decided without a prompt turn that completes
    from_init: bool = False  # judged from the run's first initialize (its transcript is the evidence)


@dataclass
class CheckResult:
    check: Check
    result: Result
    evidence: str
    transcript: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def fatal(self) -> bool:
        return self.result is Result.FAIL and self.check.tier in (Tier.MANDATORY, Tier.CAPABILITY)


async def initialized(ctx: CheckContext, offer: ClientOffer | None = None) -> Probe:
    """The check's process (offered `offer`, for a fresh check), initialized."""
    p = await ctx.probe(offer)
    await p.initialize()
    return p


async def session_of(ctx: CheckContext) -> tuple[Probe, str]:
    """The check's process, initialized, and a new session of it in the check's directory."""
    p = await initialized(ctx)
    return p, await p.new_session(ctx.workdir)


UNKNOWN_PREFIX = "acp-check-unknown-"  # the ids of sessions no agent has: every check asking about one uses it


def unknown_session_id(ctx: CheckContext) -> str:
    return f"{UNKNOWN_PREFIX}{ctx.nonce(32)}"


class CheckContext:
    """What one check works with: its processes (a fresh one per `probe()`, or the shared process), the working
    directory, what the agent advertised, and the options."""

    def __init__(self, workdir: str, caps: dict[str, Any], options: CheckOptions,
                 launch: Callable[[ClientOffer | None], Awaitable[Probe]], owns_probes: bool = True,
                 init_transcript: list[dict[str, Any]] | None = None, check_id: str = "") -> None:
        self.workdir = workdir
        self.check_id = check_id
        self._nonces = 0
        self.caps = caps  # what the agent advertised to a first initialize
        self.init_transcript = init_transcript or []  # and how it was said
        self.options = options
        self.prompts = options.prompts
        self.probes: list[Probe] = []
        self._launch = launch
        self._owns_probes = owns_probes

    async def probe(self, offer: ClientOffer | None = None) -> Probe:
        """A process for this check: a fresh check's own, offered `offer`; else the shared one (which offers the
        default)."""
        probe = await self._launch(offer)
        self.probes.append(probe)
        return probe

    def nonce(self, length: int) -> str:
        """A made-up value's hex part: random, or drawn from the options' seed (the check's id and how many it has
        drawn), the same in every run."""
        self._nonces += 1
        if self.options.seed is None:
            return uuid.uuid4().hex[:length]
        label = f"{self.options.seed}:{self.check_id}:{self._nonces}".encode()
        return hashlib.sha256(label).hexdigest()[:length]

    @staticmethod
    def advertised_as(capability: str) -> str:
        """Where `advertised` looks for `capability` in the agent's initialize answer, as people read it."""
        if capability == "loadSession":
            return "agentCapabilities.loadSession"
        if capability.startswith("prompt:"):
            return f"promptCapabilities.{capability.partition(':')[2]}"
        return f"sessionCapabilities.{capability}"

    def advertised(self, capability: str) -> bool:
        agent_caps = self.caps.get("agentCapabilities") or {}
        if capability == "loadSession":
            return bool(agent_caps.get("loadSession"))
        if capability.startswith("prompt:"):
            return (agent_caps.get("promptCapabilities") or {}).get(capability.partition(":")[2]) is True
        return (agent_caps.get("sessionCapabilities") or {}).get(capability) is not None

    async def close(self) -> None:
        if not self._owns_probes:
            return
        for probe in self.probes:
            with contextlib.suppress(Exception):
                await probe.client.stop()


CHECKS: list[Check] = []
# The checks that cannot be decided without a prompt turn that completes: once the run's turns are known to be
# blocked, they are blocked before they set up anything (a session/new may itself take an adapter 20 s offline).
NEEDS_TURN = frozenset({"ACP-STDOUT-001", "ACP-PROMPT-001", "ACP-UPDATE-001", "ACP-CANCEL-001", "ACP-CANCEL-002",
                        "ACP-LOAD-001", "ACP-LOAD-002", "ACP-RESUME-001", "ACP-LIST-001", "ACP-CLIENTCAP-001",
                        "ACP-TERMINAL-001", "ACP-CLOSE-002", "ACP-PROMPT-003", "ACP-PROMPTCAP-001",
                        "ACP-PROMPTCAP-002", "ACP-PROMPTCAP-003", "ACP-META-001", "ACP-INFO-004",
                        "ACP-MODES-003"})


def check(id_: str, tier: Tier, title: str, citation: str, needs: str | None = None, fresh: bool = False,
          tck: tuple[str, ...] = (), from_init: bool = False) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS.append(Check(id_, tier, title, citation, fn, needs, fresh, tck, turn=id_ in NEEDS_TURN,
                            from_init=from_init))
        return fn

    return register



async def _settle(p: Probe, seconds: float = 0.5) -> None:
    await asyncio.sleep(seconds)  # late messages are a finding, so give them a moment to show


async def _never() -> str:
    raise AssertionError("computed from every other check")
