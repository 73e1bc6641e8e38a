"""The conformance checks behind `acp-gateway check`: requirements with stable ids, tiers, citations and verdicts.

Modelled on the ACP Test Compatibility Kit (`acp-tck`; `Check.tck` names its overlapping requirement ids): each
check ends in a verdict that says whose fault it is (FAIL: the agent broke a rule; BLOCKED: a prerequisite failed
here; INCONCLUSIVE: the observation could not decide), with one line of evidence and the transcript of what was
said. Every message the agent sends is validated against the ACP v1 JSON Schema. Beyond the kit, the checks cover
what a gateway needs across an agent restart: load (history replayed before the answer) and resume (no replay,
usable after) in a new process, and `-32002` for unknown sessions. Running them is `conformance_run.py`; the
reports are `conformance_report.py`; what is said to the agent is `conformance_options.py`.
"""

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

from .auth import choose_auth_method
from .check_terminals import ScratchTerminals
from .client import AcpClient, ClientOptions
from .conformance_options import CheckOptions, ClientOffer
from .elicitation import Elicitation
from .errors import AUTH_REQUIRED, RESOURCE_NOT_FOUND, RequestTimeout, RpcError
from .models import STOP_REASONS, AuthMethod, conversation
from .process import AgentProcess
from .schema_check import Violation, acp_v1_schema

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
    last_new: dict[str, Any] | None = None  # the last session/new answer
    terminals: ScratchTerminals | None = None  # the terminals it was given, where the offer has them

    def begin(self) -> None:
        """A check starts using this (shared) process: what it observes from now on is that check's evidence."""
        self.transcript, self.violations, self.updates, self.requests_in = [], [], [], []
        self.responses_in = []
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
            self._judge_envelope(msg)
        answered = self._answering.pop(msg.get("id"), None) if "method" not in msg else None
        violation = acp_v1_schema().check_from_agent(msg, answered)
        if violation is not None:
            self.violations.append(violation)

    def _judge_envelope(self, msg: dict[str, Any]) -> None:
        """A response's JSON-RPC shape (kit ACP-JSONRPC-002) and its error message's (ACP-ERROR-001), noted."""
        if ("result" in msg) == ("error" in msg):
            self.envelope.append(f"response to id {msg.get('id')!r} carries {'both' if 'result' in msg else 'neither'}"
                                 " of result and error")
            return
        if "error" not in msg:
            return
        error = msg["error"]
        code = error.get("code") if isinstance(error, dict) else None
        if not isinstance(error, dict) or not isinstance(code, int) or isinstance(code, bool) \
                or not isinstance(error.get("message"), str):
            self.envelope.append(f"error of id {msg.get('id')!r} is not {{code: integer, message: string}}: "
                                 f"{str(error)[:120]}")
            return
        text = error["message"]
        if not text.strip() or "\n" in text:
            self.error_shapes.append(f"error {error['code']} of id {msg.get('id')!r}: message "
                                     f"{'empty' if not text.strip() else 'over several lines'}: {text[:120]!r}")

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
            raise CheckFailed(f"initialize answered {result!r}")
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


# -- the checks ------------------------------------------------------------------------------------------

@check("ACP-INIT-001", Tier.MANDATORY, "initialize answers the requested protocol version it supports",
       f"{SPEC}/initialization: If the Agent supports the requested version, it MUST respond with the same version.",
       fresh=True, tck=("ACP-INIT-001", "ACP-INIT-002"))
async def init_version(ctx: CheckContext) -> str:
    p = await ctx.probe()
    result = await p.initialize(1, judged=True)
    if result.get("protocolVersion") != 1:
        raise CheckFailed(f"asked for version 1, the agent answered {result.get('protocolVersion')!r}")
    return "protocolVersion 1 answered"


@check("ACP-INIT-002", Tier.MANDATORY, "an unsupported requested version gets the agent's latest, not an error",
       f"{SPEC}/initialization: Otherwise, the Agent MUST respond with the latest version it supports.",
       fresh=True, tck=("ACP-INIT-003",))
async def init_unsupported(ctx: CheckContext) -> str:
    p = await ctx.probe()
    result = await p.initialize(65535, judged=True)
    version = result.get("protocolVersion")
    if not isinstance(version, int) or isinstance(version, bool) or not 0 < version < 65535:
        raise CheckFailed(f"asked for version 65535, the agent answered {version!r}")
    return f"asked 65535, answered its latest ({version})"


@check("ACP-STDOUT-001", Tier.MANDATORY, "stdout carries only ACP messages",
       f"{SPEC}/transports: The agent MUST NOT write anything to its stdout that is not a valid ACP message.",
       tck=("ACP-TRANSPORT-001",))
async def stdout_hygiene(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
    if p.stdout_noise:
        sample = p.client.conn.stats.samples[0] if p.client.conn.stats.samples else ""
        raise CheckFailed(f"{p.stdout_noise} stdout line(s) were not JSON-RPC, e.g. {sample[:120]!r}")
    return f"{p.client.conn.stats.frames} frames, no noise"


@check("ACP-SESSION-001", Tier.MANDATORY, "session/new answers a session id",
       f"{SPEC}/session-setup: The Agent MUST respond with a unique Session ID that identifies this conversation.",
       tck=("ACP-SESSION-001", "ACP-SESSION-002"))
async def session_new(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    a = await p.new_session(ctx.workdir)
    b = await p.new_session(ctx.workdir)
    if a == b:
        raise CheckFailed(f"two session/new calls answered the same id {a!r}")
    return f"sessionId {a!r}"


@check("ACP-PROMPT-001", Tier.MANDATORY, "a prompt turn ends with a valid stop reason",
       f"{SPEC}/prompt-turn#stop-reasons: When an Agent stops processing, it MUST respond with a StopReason.",
       tck=("ACP-PROMPT-001",))
async def prompt_stop_reason(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    result = await p.prompt(sid, ctx.prompts.short)
    reason = result.get("stopReason")
    if reason not in STOP_REASONS:
        raise CheckFailed(f"stopReason {reason!r} is not one of {sorted(STOP_REASONS)}")
    return f"stopReason {reason!r} after {len(p.updates)} update(s)"


@check("ACP-UPDATE-001", Tier.MANDATORY, "session/update notifications are well formed and name the session",
       f"{SPEC}/prompt-turn#3-agent-reports-output: The Agent reports the model's output to the Client via "
       "session/update notifications.", tck=("ACP-PROMPT-002",))
async def update_shapes(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
    # A shared process may still report on an earlier check's session; an id it never created is the finding.
    wrong = [u.get("sessionId") for u in p.updates if u.get("sessionId") not in p.sessions]
    if wrong:
        raise CheckFailed(f"updates named session(s) {sorted(set(map(str, wrong)))} instead of {sid!r}")
    bad = [v for v in p.violations if v.role == "notification session/update"]
    if bad:
        raise CheckFailed(str(bad[0]))
    if not p.updates:
        raise CheckSkipped("the turn sent no session/update to judge")
    return f"{len(p.updates)} update(s) valid"


async def _cancel_turn(ctx: CheckContext, wait_for: str, by: str = "session/cancel") -> str:
    """Cancel a turn only while it demonstrably runs (an update came and the turn goes on, or a permission request
    is pending). A turn that ends as the cancel goes out, with no update after it, raced it: tried once more with
    a longer task, then INCONCLUSIVE. A turn that went on after the cancel and ended otherwise than `cancelled`
    broke the rule, as does an update for the session after the `cancelled` answer."""
    p, sid = await session_of(ctx)
    raced = ""
    texts = [ctx.prompts.permission] * 2 if wait_for == "permission" else [ctx.prompts.long, ctx.prompts.longer]
    for text in texts:
        waiter = p.permission_asked if wait_for == "permission" else p.first_update
        waiter.clear()
        turn = asyncio.ensure_future(p.prompt(sid, text))
        seen = asyncio.ensure_future(waiter.wait())
        try:
            await asyncio.wait({turn, seen}, timeout=ctx.options.turn_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            seen.cancel()
        if not waiter.is_set() and not turn.done():
            turn.cancel()
            raise CheckFailed(f"no update and no answer within {ctx.options.turn_timeout:g} s of the prompt (raise "
                              "--turn-timeout if the agent is only slow)")
        if turn.done() and (turn.cancelled() or turn.exception() is not None):
            await turn  # a failing turn: BLOCKED (or its own verdict), as in every other check
        if not waiter.is_set():
            if wait_for == "permission":
                raise CheckSkipped("the agent asked no permission in the turn, so a pending request could not be "
                                   "cancelled (set [check] permission to a prompt that makes it ask)")
        if turn.done():  # over before the cancel could be sent: nothing to judge
            raced = f"the turn ended ({turn.result().get('stopReason')!r}) before {by} could be sent"
            continue
        updates_at_cancel = len(conversation(p.updates))
        closing: asyncio.Future[Any] | None = None
        if by == "session/cancel":
            await p.client.cancel(sid)
        else:  # session/close: "as if session/cancel was called", then the session is gone
            closing = asyncio.ensure_future(p.call(by, {"sessionId": sid}))
        try:
            result = await asyncio.wait_for(turn, CANCEL_GRACE)
        except TimeoutError:
            raise CheckFailed(f"the turn did not end within {CANCEL_GRACE:g} s of {by}") from None
        except RpcError as err:
            raise CheckFailed(f"the cancelled turn answered an error ({err.code} {err.message}) instead of "
                              "stopReason 'cancelled'") from None
        finally:
            if closing is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(closing, CANCEL_GRACE)
        reason = result.get("stopReason")
        if reason == "cancelled":
            answered_at = len(p.updates)
            await _settle(p)
            late = [u for u in conversation(p.updates[answered_at:]) if u.get("sessionId") == sid]
            if late:
                raise CheckFailed(f"{len(late)} update(s) for the session came after the 'cancelled' answer; the "
                                  "agent must send them before it answers")
            return f"stopReason 'cancelled' after {by}, no update after the answer"
        if len(conversation(p.updates)) > updates_at_cancel:
            raise CheckFailed(f"the turn went on after {by} and ended with stopReason {reason!r}")
        raced = f"the turn ended ({reason!r}) as {by} was sent, with no update after it"
    raise CheckInconclusive(f"{raced}, twice (the second time with a longer task): the agent's turns end too soon "
                            "for a cancel to reach one; give it a longer task ([check] long and longer) to tell")


@check("ACP-CANCEL-001", Tier.MANDATORY, "session/cancel ends the turn with stopReason 'cancelled', not an error",
       f"{SPEC}/prompt-turn#cancellation: The Agent MUST respond to the original session/prompt request with the "
       "cancelled stop reason.", tck=("ACP-CANCEL-001", "ACP-CANCEL-002"))
async def cancel_turn(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "update")


@check("ACP-CANCEL-002", Tier.MANDATORY, "cancel with a permission request pending ends the turn 'cancelled'",
       f"{SPEC}/prompt-turn#cancellation: The Client MUST respond to all pending session/request_permission requests "
       "with the cancelled outcome.")
async def cancel_with_permission(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "permission")


@check("ACP-CLOSE-002", Tier.CAPABILITY, "session/close during a turn ends the turn with stopReason 'cancelled'",
       f"{SPEC}/session-setup: The agent must cancel any ongoing work (as if session/cancel was called).",
       needs="close", tck=("ACP-CLOSE-002",))
async def close_cancels_turn(ctx: CheckContext) -> str:
    return await _cancel_turn(ctx, "update", by="session/close")


async def _session_from_earlier_process(ctx: CheckContext, word: str) -> tuple[str, str]:
    first = await initialized(ctx)
    sid = await first.new_session(ctx.workdir)
    text = f"Remember the word {word}."
    await first.prompt(sid, text)
    said = first.agent_text()
    await first.client.stop()  # closes stdin first: the agent must keep the session for the next process
    return sid, said


async def _settle(p: Probe, seconds: float = 0.5) -> None:
    await asyncio.sleep(seconds)  # late messages are a finding, so give them a moment to show


@check("ACP-LOAD-001", Tier.CAPABILITY, "session/load in a new process replays the history before answering",
       f"{SPEC}/session-setup#loading-sessions: The Agent MUST replay the entire conversation to the Client in the "
       "form of session/update notifications ... When all the conversation entries have been streamed to the "
       "Client, the Agent MUST respond to the original session/load request.", needs="loadSession", fresh=True,
       tck=("ACP-LOAD-001", "ACP-LOAD-002"))
async def load_replays(ctx: CheckContext) -> str:
    word = f"kiwi-{ctx.nonce(6)}"
    sid, said = await _session_from_earlier_process(ctx, word)
    second = await initialized(ctx)
    try:
        await second.call("session/load", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        raise CheckFailed(f"session/load of {sid!r} answered {err.code} {err.message}") from None
    before = list(second.updates)
    await _settle(second)
    late = conversation(second.updates[len(before):])  # commands or usage reported after the answer are not replay
    users = "".join(_chunk_text(u, "user_message_chunk") for u in before)
    if late:
        raise CheckFailed(f"{len(late)} update(s) arrived after the session/load answer (replay must come first)")
    if not before:
        raise CheckFailed("session/load answered without replaying any history")
    if word not in users:
        raise CheckFailed(f"the replay did not contain the user's message (looked for {word!r})")
    if said and said not in second.agent_text(before):
        raise CheckFailed("the replayed agent messages differ from what the agent said in the first process")
    return f"{len(before)} update(s) replayed before the answer, matching the first process"


@check("ACP-LOAD-002", Tier.CAPABILITY, "a loaded session is usable: it can be prompted",
       f"{SPEC}/session-setup#loading-sessions: the Client can continue the conversation.", needs="loadSession",
       fresh=True)
async def load_usable(ctx: CheckContext) -> str:
    sid, _ = await _session_from_earlier_process(ctx, "plum")
    second = await initialized(ctx)
    try:
        await second.call("session/load", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
        result = await second.prompt(sid, "What word did I ask you to remember?")
    except RpcError as err:
        raise CheckFailed(f"after session/load: {err.code} {err.message}") from None
    return f"prompt after load ended {result.get('stopReason')!r}"


@check("ACP-RESUME-001", Tier.CAPABILITY, "session/resume in a new process answers without replay and is usable",
       f"{SPEC}/session-setup: session/resume resumes an existing session without returning previous messages "
       "(unlike session/load).", needs="resume", fresh=True, tck=("ACP-RESUME-001", "ACP-RESUME-002"))
async def resume_no_replay(ctx: CheckContext) -> str:
    sid, _ = await _session_from_earlier_process(ctx, "fig")
    second = await initialized(ctx)
    try:
        await second.call("session/resume", {"sessionId": sid, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        raise CheckFailed(f"session/resume of {sid!r} answered {err.code} {err.message}") from None
    await _settle(second)
    replayed = conversation(second.updates)  # a report of its commands or usage is not a replay
    if replayed:
        raise CheckFailed(f"session/resume replayed {len(replayed)} update(s); resume must not replay")
    try:
        result = await second.prompt(sid, "What word did I ask you to remember?")
    except RpcError as err:
        raise CheckFailed(f"prompt after session/resume answered {err.code} {err.message}") from None
    return f"no replay; prompt after resume ended {result.get('stopReason')!r}"


async def _unknown(ctx: CheckContext, method: str) -> str:
    p = await initialized(ctx)
    unknown = unknown_session_id(ctx)
    try:
        await p.call(method, {"sessionId": unknown, "cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        if err.code == AUTH_REQUIRED:  # it may not say anything of sessions before authentication
            raise blocked_by_error(err, method) or CheckBlocked(err.message) from None
        if err.code != RESOURCE_NOT_FOUND:
            raise CheckFailed(f"{method} of an unknown id answered {err.code} {err.message!r}, not -32002") from None
        return f"-32002 {err.message!r}"
    raise CheckFailed(f"{method} of an unknown id {unknown!r} succeeded")


@check("ACP-UNKNOWN-001", Tier.CAPABILITY, "session/load of an unknown id answers -32002 (resource not found)",
       f"{SPEC}/schema#errorcode: -32002 Resource not found.", needs="loadSession")
async def unknown_load(ctx: CheckContext) -> str:
    return await _unknown(ctx, "session/load")


@check("ACP-UNKNOWN-002", Tier.CAPABILITY, "session/resume of an unknown id answers -32002 (resource not found)",
       f"{SPEC}/schema#errorcode: -32002 Resource not found.", needs="resume")
async def unknown_resume(ctx: CheckContext) -> str:
    return await _unknown(ctx, "session/resume")


@check("ACP-CAPS-001", Tier.MANDATORY, "advertised methods are answered (no -32601 for what is advertised)",
       f"{SPEC}/initialization#agent-capabilities: capabilities advertise the methods the Agent supports.")
async def capabilities_consistent(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    unknown = unknown_session_id(ctx)
    probes: dict[str, tuple[str, dict[str, Any]]] = {
        "loadSession": ("session/load", {"sessionId": unknown, "cwd": ctx.workdir, "mcpServers": []}),
        "resume": ("session/resume", {"sessionId": unknown, "cwd": ctx.workdir, "mcpServers": []}),
        "list": ("session/list", {}),
        "close": ("session/close", {"sessionId": sid}),
    }
    tried, broken = [], []
    for capability, (method, params) in probes.items():
        if not ctx.advertised(capability):
            continue
        tried.append(method)
        try:
            await p.call(method, params)
        except RpcError as err:
            if err.code == -32601:
                broken.append(method)
    if broken:
        raise CheckFailed(f"advertised but answered -32601 (method not found): {', '.join(broken)}")
    return f"answered: {', '.join(tried) or 'nothing optional advertised'}"


@check("ACP-LIST-001", Tier.CAPABILITY, "session/list lists a session that was created",
       f"{SPEC}/session-list: session/list returns the sessions the Agent knows.", needs="list",
       tck=("ACP-LIST-001",))
async def list_sessions(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    await p.prompt(sid, ctx.prompts.short)
    seen: list[str] = []
    cursor = None
    for _ in range(50):
        try:
            result = await p.call("session/list", {"cwd": ctx.workdir, **({"cursor": cursor} if cursor else {})})
        except RpcError as err:
            raise CheckFailed(f"session/list answered {err.code} {err.message}") from None
        seen += [str(s.get("sessionId")) for s in result.get("sessions", []) if isinstance(s, dict)]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    if sid not in seen:
        raise CheckFailed(f"session {sid!r} is missing from session/list ({len(seen)} listed)")
    return f"{len(seen)} session(s) listed, including the new one"


@check("ACP-CLOSE-001", Tier.CAPABILITY, "session/close closes a session",
       f"{SPEC}/session-setup: session/close closes an active session.", needs="close",
       tck=("ACP-CLOSE-001",))
async def close_session(ctx: CheckContext) -> str:
    p, sid = await session_of(ctx)
    try:
        await p.call("session/close", {"sessionId": sid})
    except RpcError as err:
        raise CheckFailed(f"session/close answered {err.code} {err.message}") from None
    return "closed"


# Advisory: no MUST says an agent that answers -32000 must list a method (the TCK files it advisory too), but a
# client can do nothing with such an agent but tell its user to log in elsewhere.
@check("ACP-AUTH-001", Tier.ADVISORY, "an agent that requires authentication advertises how",
       f"{SPEC}/initialization: authMethods lists the authentication methods the Agent supports; -32000 means "
       "authentication is required.", fresh=True, tck=("ACP-AUTH-005",))
async def auth_required(ctx: CheckContext) -> str:
    p = await ctx.probe()
    init = await p.initialize()
    try:
        await p.call("session/new", {"cwd": ctx.workdir, "mcpServers": []})
    except RpcError as err:
        if err.code != -32000:
            raise CheckFailed(f"session/new answered {err.code} {err.message}") from None
        methods = init.get("authMethods") or []
        if not methods:
            raise CheckFailed("session/new requires authentication (-32000) but authMethods is empty") from None
        worked = await p.authenticate_if_asked(err)
        return (f"authentication required; {len(methods)} method(s) advertised; authenticate "
                + ("worked" if worked else "did not work without credentials"))
    return "no authentication required"


@check("ACP-AUTH-002", Tier.MANDATORY, "no terminal sign-in is advertised to a client that does not run them",
       f"{SPEC}/authentication: Agents MUST NOT include terminal auth methods unless the client advertised "
       "clientCapabilities.auth.terminal.", tck=("ACP-AUTH-002",), from_init=True)
async def terminal_auth_only_when_offered(ctx: CheckContext) -> str:
    if ctx.options.offer.terminal_auth:
        raise CheckSkipped("--offer terminal-auth=on: the client offered terminal sign-ins, nothing to judge")
    # The run's first initialize offered no `auth.terminal`: its answer is the evidence.
    methods = [m for m in ctx.caps.get("authMethods") or [] if isinstance(m, dict)]
    terminal = [str(m.get("id")) for m in methods if m.get("type") == "terminal"]
    if terminal:
        raise CheckFailed(f"initialize without clientCapabilities.auth.terminal advertised terminal sign-in "
                          f"method(s) {', '.join(terminal)}: a client that cannot run them offers its user a dead end")
    return f"{len(methods)} auth method(s), none of type terminal"


_OFFERED_BY = {"fs/read_text_file": "fs.readTextFile", "fs/write_text_file": "fs.writeTextFile",
               "elicitation/create": "elicitation"}


@check("ACP-CLIENTCAP-001", Tier.MANDATORY, "the agent calls no file, terminal or elicitation method the client did "
       "not offer",
       f"{SPEC}/file-system, {SPEC}/terminals, {SPEC}/elicitation: if the capability is false or not present, the "
       "Agent MUST NOT attempt to call its methods.", fresh=True,
       tck=("ACP-CLIENTCAP-001", "ACP-CLIENTCAP-002", "ACP-CLIENTCAP-003"))
async def offers_honoured(ctx: CheckContext) -> str:
    p = await initialized(ctx, ClientOffer.nothing())
    sid = await p.new_session(ctx.workdir)
    result = await p.prompt(sid, ctx.prompts.tools)
    await _settle(p)
    called = sorted({str(m["method"]) for m in p.requests_in if str(m["method"]).startswith(("fs/", "terminal/"))
                     or m["method"] == "elicitation/create"})
    if called:
        raise CheckFailed("offered no files, terminals or questions (clientCapabilities fs false, terminal false, no "
                          "elicitation), the agent called "
                          + ", ".join(f"{m} (needs {_OFFERED_BY.get(m, 'terminal')})" for m in called))
    return (f"offered none, called none; the turn ended {result.get('stopReason')!r} (PASS holds for an agent that "
            "needed none, too)")


# Advisory: the spec makes the agent "responsible for releasing the terminal" (terminal/create), not a MUST; a
# client ends an agent's terminals with the agent anyway (the gateway does), but until then each holds a process.
@check("ACP-TERMINAL-001", Tier.ADVISORY, "terminals the agent creates are released (terminal/release)",
       f"{SPEC}/terminals: The Agent is responsible for releasing the terminal by using the terminal/release method.",
       fresh=True)
async def terminals_released(ctx: CheckContext) -> str:
    p = await initialized(ctx, ClientOffer(terminal=True))
    sid = await p.new_session(ctx.workdir)
    await p.prompt(sid, ctx.prompts.tools)
    await _settle(p)
    host = p.terminals
    assert host is not None
    if not host.created:
        raise CheckSkipped("the agent ran no command in a terminal of the client's (the `tools` prompt; set [check] "
                           "tools to one that makes it)")
    left = host.unreleased()
    if left:
        raise CheckFailed(f"{len(left)} of {len(host.created)} terminal(s) still held when the turn had ended: "
                          f"{', '.join(left)} (never terminal/release'd)")
    return f"{len(host.created)} terminal(s) created, each released"


@check("ACP-CLIENT-001", Tier.MANDATORY, "the agent survives -32601 from the client for a method it does not have",
       "https://www.jsonrpc.org/specification#error_object: -32601 Method not found.")
async def unknown_client_method(ctx: CheckContext) -> str:
    if ctx.prompts.client_method is None:
        raise CheckSkipped("no prompt makes an agent call a client method the checker lacks; set [check] "
                           "client_method (or --prompt client_method=TEXT) to one that does")
    p, sid = await session_of(ctx)
    try:
        result = await p.prompt(sid, ctx.prompts.client_method)
    except RpcError as err:
        raise CheckFailed(f"the turn failed: {err.code} {err.message}") from None
    asked = [m["method"] for m in p.requests_in if m["method"] not in
             ("fs/read_text_file", "fs/write_text_file", "session/request_permission")]
    if not asked:
        raise CheckSkipped("the agent called no method the client lacks")
    return f"answered -32601 to {asked[0]!r}; the turn still ended {result.get('stopReason')!r}"


@check("ACP-SHUTDOWN-001", Tier.ADVISORY, "the agent exits when its stdin closes",
       f"{SPEC}/transports: The client closes the agent's stdin to end the connection; the agent SHOULD exit.",
       fresh=True, tck=("ACP-SHUTDOWN-001",))
async def shutdown_on_stdin_close(ctx: CheckContext) -> str:
    p = await initialized(ctx)
    with contextlib.suppress(Exception):
        p.client.process.stdin.close()
    try:
        rc = await asyncio.wait_for(p.client.process.wait(), 3.0)
    except TimeoutError:
        raise CheckFailed("still running 3 s after its stdin closed") from None
    return f"exited with status {rc}"


@check("ACP-INFO-001", Tier.INFORMATIONAL, "what the agent says about itself",
       f"{SPEC}/initialization: agentInfo, agentCapabilities and authMethods.", tck=("ACP-INIT-004",))
async def agent_info(ctx: CheckContext) -> str:
    info = ctx.caps.get("agentInfo") or {}
    caps = ctx.caps.get("agentCapabilities") or {}
    flags = [c for c in ("loadSession", "resume", "list", "close") if ctx.advertised(c)]
    advertised = ", ".join(flags) or "no optional methods"
    prompt_caps = sorted(k for k, v in (caps.get("promptCapabilities") or {}).items() if v)
    name = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    return f"{name}; advertises {advertised}; prompt capabilities {prompt_caps}"


# Judged from what every other check saw, not run on their own.
STARTUP_CHECK = Check("ACP-STARTUP-001", Tier.ADVISORY, "initialize is answered within a few seconds",
                      f"{SPEC}/initialization: Before a Session can be created, Clients MUST initialize the "
                      "connection; clients wait for the answer before showing anything.", lambda ctx: _never())
SCHEMA_CHECK = Check("ACP-SCHEMA-001", Tier.MANDATORY, "every message the agent sent matches the ACP v1 JSON Schema",
                     f"{SPEC}/schema: the ACP v1 JSON Schema (schema/v1/schema.json).", lambda ctx: _never(),
                     tck=("ACP-SCHEMA-001",))


async def _never() -> str:
    raise AssertionError("computed from every other check")


from . import conformance_kit  # noqa: E402  (its checks register after these, and it imports this module)


def startup_verdict(init_seconds: float | None, options: CheckOptions, unusable: str | None) -> tuple[Result, str]:
    """ACP-STARTUP-001 from the first initialize: slow is a finding (advisory), never a transport failure."""
    if init_seconds is None:
        return Result.BLOCKED, unusable or "initialize was not answered (see ACP-INIT-001)"
    if init_seconds > options.slow_initialize:
        return Result.FAIL, (f"initialize took {init_seconds:.1f} s (over {options.slow_initialize:g} s): clients "
                             "with a shorter timeout give up; answer initialize first and do slow set-up (finding a "
                             "CLI, logging in) afterwards or on session/new")
    return Result.PASS, f"initialize answered in {init_seconds:.2f} s"


def all_checks() -> list[Check]:
    return [*CHECKS, STARTUP_CHECK, SCHEMA_CHECK, *RUN_WIDE_CHECKS]


RUN_WIDE_CHECKS: tuple[Check, ...] = (conformance_kit.ENVELOPE_CHECK, conformance_kit.ERROR_CHECK,
                                      conformance_kit.UTF8_CHECK)


