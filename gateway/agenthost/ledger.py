"""What the gateway has done with each of a hosted agent's lines, so a reattach neither repeats nor loses one: pure,
rules LD-1…6 (docs/agent-hosts.md, "Exactly once"), tested by table in tests/gateway/agenthost/test_ledger.py.

A line's effects are of three kinds. A notification's (a `session/update`) are its events, queued on the read loop
as the line is read: committed with the next journal group. A request's (a permission asked) last until its answer
reached the host. A response to the turn's `session/prompt` lasts until the turn's end is committed. The ledger's
**mark** — the last line read (`seen`) and the lines whose effects are still open — is written in the same journal
group commit as the events, so after a crash the mark and the journal agree. The gateway attaches again with
`committed()`: the line before the oldest open one (or `seen`); of the lines replayed from there, those up to `seen`
that are not open are skipped (their effects are committed), the open ones and everything after `seen` go through.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import orjson

RULES: dict[str, str] = {
    "LD-1": "a request the agent sent is open until the host has taken the gateway's answer to it",
    "LD-2": "a response to the turn's prompt is open until the turn's end is committed (`settle_prompt`)",
    "LD-3": "a notification's effects are committed with the group commit that carries a mark past it",
    "LD-4": "the gateway attaches with the line before the oldest open one, or the last line seen",
    "LD-5": "a replayed line up to `seen` that is not open is skipped: its effects are committed",
    "LD-6": "a replayed open line, and every line after `seen`, is handled as a live one",
    "LD-7": "a prompt whose line's sequence number the mark holds reached the agent iff the host took that line",
    "LD-8": "a prompt whose line's number the mark lacks never reached the agent if the host took no line after the "
            "last one sent before it: the turn goes on by sending it again, with the same id",
    "LD-9": "a prompt whose line's number the mark lacks, the host having taken lines after the last one sent before "
            "it, is taken as reached: its answer is awaited (the user's cancel ends the wait)",
}

REPLAYED = "replayed"  # an open line of the mark, before the replay brings it again


@dataclass
class Mark:
    """What is committed of a hosted agent's lines: the journal keeps it with the events."""

    seen: int = 0  # the last line read and handed to the peer
    open: dict[int, str] = field(default_factory=dict)  # offset -> "request:<id>", "prompt:<id>" or REPLAYED
    prompts: list[Any] = field(default_factory=list)  # ids of the prompts sent whose turns are not over
    # Of each such prompt, where its line stands among the gateway's lines (sequence numbers, LD-7/LD-8): the last
    # line sent before it was named, and its own once sent. Only the latter is certain to be in the mark.
    after: dict[Any, int] = field(default_factory=dict)
    seq: dict[Any, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        lines = [[p, self.after.get(p, 0), self.seq.get(p)] for p in self.prompts]
        return orjson.dumps({"seen": self.seen, "open": sorted(self.open), "prompts": self.prompts,
                             "prompt_lines": lines})

    @classmethod
    def decode(cls, raw: dict[str, Any] | None) -> Mark:
        if not raw:
            return cls()
        lines = raw.get("prompt_lines", [])
        return cls(int(raw.get("seen", 0)), {int(o): REPLAYED for o in raw.get("open", [])},
                   list(raw.get("prompts", [])), {p: int(a) for p, a, _ in lines},
                   {p: int(n) for p, _, n in lines if n is not None})


def prompt_reached(prompt_id: Any, mark: Mark, written: int) -> bool:
    """Whether a prompt the mark says was sent reached the agent, given the last gateway line its host took
    (`written`, from its welcome): LD-7, LD-8, LD-9."""
    if prompt_id in mark.seq:
        return written >= mark.seq[prompt_id]  # LD-7
    return written > mark.after.get(prompt_id, 0)  # LD-8 (False) / LD-9 (True)


class Ledger:
    def __init__(self, mark: Mark | None = None) -> None:
        start = mark or Mark()
        self.seen = start.seen
        self.replay_until = start.seen  # LD-5 applies to lines up to here
        self.open: dict[int, str] = dict(start.open)
        self.prompts: list[Any] = list(start.prompts)
        self.after: dict[Any, int] = dict(start.after)
        self.seq: dict[Any, int] = dict(start.seq)
        self.last_sent = 0  # the gateway's last line sent (its sequence number), or the host's `written` at attach
        self._requests: dict[Any, int] = {}  # the agent's open requests: id -> offset
        self._answers: dict[int, int] = {}  # gateway line seq -> offset of the request it answers
        self.version = 0  # changes with every change of the mark
        self.stored = -1  # the version last handed to a group commit

    # -- the replay -----------------------------------------------------------------------------------------------
    def committed(self) -> int:
        """LD-4: the offset to attach with."""
        return min(self.open) - 1 if self.open else self.seen

    def skip(self, offset: int) -> bool:
        """LD-5/LD-6: whether a replayed line is skipped."""
        return offset <= self.replay_until and offset not in self.open

    # -- what happens to lines ------------------------------------------------------------------------------------
    def read(self, offset: int, message: dict[str, Any]) -> None:
        """A line the peer is handed (its decoded message): requests and the prompt's response open (LD-1, LD-2)."""
        if offset <= 0:
            return
        self.seen = max(self.seen, offset)
        msg_id = message.get("id")
        if "method" in message and msg_id is not None:
            self._requests[msg_id] = offset
            self.open[offset] = f"request:{msg_id}"
        elif msg_id is not None and msg_id in self.prompts and ("result" in message or "error" in message):
            self.open[offset] = f"prompt:{msg_id}"
        else:
            self.open.pop(offset, None)  # a replayed open line that turned out to need nothing more
        self.version += 1

    def attached(self, written: int) -> None:
        """The host took the gateway's lines up to `written` (its welcome): the next line sent comes after it."""
        self.last_sent = max(self.last_sent, written)

    def sent(self, seq: int, line: bytes) -> None:
        """A line the gateway sent (its sequence number): an answer to an open request is remembered (LD-1), a
        prompt's number kept for the mark (LD-7)."""
        self.last_sent = max(self.last_sent, seq)
        if self.prompts and b'"session/prompt"' in line and self.prompts[-1] not in self.seq:
            with contextlib.suppress(orjson.JSONDecodeError):
                message = orjson.loads(line)
                if isinstance(message, dict) and message.get("id") in self.prompts:
                    self.seq[message["id"]] = seq
                    self.version += 1
        if not self._requests or (b'"result"' not in line and b'"error"' not in line):
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return
        if isinstance(message, dict) and "method" not in message:
            offset = self._requests.pop(message.get("id"), None)
            if offset is not None:
                self._answers[seq] = offset

    def taken(self, seq: int) -> None:
        """The host took the gateway's lines up to `seq`: the requests they answer are closed (LD-1)."""
        done = [s for s in self._answers if s <= seq]
        for s in done:
            self.open.pop(self._answers.pop(s), None)
        if done:
            self.version += 1

    def expect_prompt(self, prompt_id: Any) -> None:
        """A prompt is about to be sent with this id: a reattach waits for its answer (LD-2)."""
        self.prompts.append(prompt_id)
        self.after[prompt_id] = self.last_sent
        self.seq.pop(prompt_id, None)
        self.version += 1

    def resend_prompt(self, prompt_id: Any) -> None:
        """LD-8: the prompt never reached the agent and goes again, after the lines sent since."""
        self.after[prompt_id] = self.last_sent
        self.seq.pop(prompt_id, None)
        self.version += 1

    def reached(self, prompt_id: Any, written: int) -> bool:
        """Whether that prompt reached the agent, its host having taken the gateway's lines up to `written`."""
        return prompt_reached(prompt_id, self.mark(), written)

    def settle_prompt(self, prompt_id: Any) -> None:
        """The turn of that prompt is over (its end is queued with this group): its answer is no longer needed."""
        if prompt_id in self.prompts:
            self.prompts.remove(prompt_id)
        self.after.pop(prompt_id, None)
        self.seq.pop(prompt_id, None)
        for offset in [o for o, what in self.open.items() if what == f"prompt:{prompt_id}"]:
            del self.open[offset]
        self.version += 1

    # -- the group commit -----------------------------------------------------------------------------------------
    def mark(self) -> Mark:
        return Mark(self.seen, dict(self.open), list(self.prompts), dict(self.after), dict(self.seq))

    def changed(self) -> bool:
        return self.version != self.stored
