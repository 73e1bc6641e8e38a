"""One gateway session open on one `/acp` connection: the sink of its journal subscription, which turns the
session's events into the ACP messages the remote client is sent, in journal order.

The subscription replays (session/load: the whole retained conversation; session/new: the session's start) and then
goes live without a gap, as every subscription does (`gateway.journal`). Permission requests seen in a replay are
history: only the ones still waiting (re-offered by the broker) and new ones are put to the client, after the
load's answer. So are past reports of state (commands, usage, configuration): the latest of each kind follows the
answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...journal import Subscription
from .updates import CaughtUp, Deleted, Notify, Out, QuestionOffer, Withdraw, translate, translate_all, without_booleans


@dataclass
class Translated:
    """A committed group's events as ACP messages, made once for every ACP client the group goes to."""

    outs: list[Out | None]
    updates: list[bytes] | None  # when every event is a plain update: their frames, in order
    shared: dict[str, Any] = field(default_factory=dict)  # their encoding on the wire (the outbox's)

    @classmethod
    def of(cls, frames: list[bytes]) -> Translated:
        outs = translate_all(frames)
        plain = all(isinstance(out, Notify) and out.prompt is None and out.state is None and len(out.frames) == 1
                    for out in outs)
        return cls(outs, [out.frames[0] for out in outs if isinstance(out, Notify)] if plain else None)


class Wire(Protocol):
    """What an attachment needs of its connection."""

    def send(self, frame: bytes) -> None: ...

    def send_many(self, frames: list[bytes], shared: dict[str, Any] | None = None) -> None: ...

    def full(self) -> bool: ...

    async def drain(self) -> None: ...

    def end(self, reason: str) -> None: ...

    @property
    def booleans(self) -> bool:
        """The client takes boolean config options (it said so at initialize)."""

    def offer(self, attachment: Attachment, offer: QuestionOffer) -> None: ...

    def withdraw(self, attachment: Attachment, request_id: str) -> None: ...

    def own_turn_started(self, session_id: str, prompt: tuple[dict[str, Any], ...]) -> bool:
        """A turn of the session started with this prompt: True when this connection sent it."""

    def deleted(self, attachment: Attachment) -> None: ...


@dataclass(eq=False)
class Attachment:
    session_id: str
    wire: Wire
    on_caught_up: Callable[[], None] | None = None  # writes the answer of a session/load or session/resume
    subscription: Subscription | None = None
    live: bool = False  # the replay is over (`caught_up` came): events are live, permission requests are put
    deferred: list[QuestionOffer] = field(default_factory=list)  # re-offers that came during the replay
    states: dict[str, tuple[bytes, ...]] = field(default_factory=dict)  # the replay's latest state report of a kind
    offers: dict[str, int] = field(default_factory=dict)  # gateway permission request id -> this connection's id

    # -- the Sink of the subscription --------------------------------------------------------------------------
    def send(self, frame: bytes) -> None:
        """A frame that is not in the journal: `caught_up`, a heartbeat, a re-offered permission request."""
        out = translate(frame)
        if isinstance(out, CaughtUp):
            self._caught_up()
        elif isinstance(out, QuestionOffer):
            if self.live:
                self.wire.offer(self, out)
            else:
                self.deferred.append(out)

    def send_many(self, frames: list[bytes], message: bytes | None = None, batch: bool = False,
                  shared: dict[str, Any] | None = None) -> None:
        """Journal events in id order. `shared` keeps their translation, and a group of agent updates only (an agent
        streaming) its encoding on the wire too, for every other ACP client the group goes to."""
        if shared is not None:
            translated: Translated | None = shared.get("acp")
            if translated is None:
                translated = shared["acp"] = Translated.of(frames)
            if translated.updates is not None:
                self.wire.send_many(translated.updates, translated.shared)
                return
            outs = translated.outs
        else:
            outs = translate_all(frames)
        updates: list[bytes] = []
        for out in outs:
            if isinstance(out, Notify):
                if out.prompt is not None and self.live and self.wire.own_turn_started(self.session_id, out.prompt):
                    continue  # the client has its own prompt: no echo
                said = out.frames
                if out.state in ("config_option_update", "session_config") and not self.wire.booleans:
                    said = tuple(without_booleans(frame) for frame in said)
                if out.state is not None and not self.live:
                    self.states.pop(out.state, None)  # kept in the order of their latest: sent after the answer
                    self.states[out.state] = said
                    continue
                updates.extend(said)
            elif out is not None and self.live:  # a replay's permission requests and answers are history
                if updates:
                    self.wire.send_many(updates)
                    updates = []
                self._control(out)
        if updates:
            self.wire.send_many(updates)

    def full(self) -> bool:
        return self.wire.full()

    async def drain(self) -> None:
        await self.wire.drain()

    def end(self, reason: str) -> None:
        self.wire.end(reason)

    # -- -------------------------------------------------------------------------------------------------------
    def _control(self, out: Out) -> None:
        if isinstance(out, QuestionOffer):
            self.wire.offer(self, out)
        elif isinstance(out, Withdraw):
            self.wire.withdraw(self, out.request_id)
        elif isinstance(out, Deleted):
            self.wire.deleted(self)

    def _caught_up(self) -> None:
        """The journal part is sent: the answer goes now (before any live event), then what waited for it."""
        self.live = True
        answer, self.on_caught_up = self.on_caught_up, None
        if answer is not None:
            answer()
        states, self.states = self.states, {}
        if states:
            self.wire.send_many([frame for frames in states.values() for frame in frames])
        deferred, self.deferred = self.deferred, []
        for offer in deferred:
            self.wire.offer(self, offer)
