"""What the gateway has done with a hosted agent's lines (gateway/agenthost/ledger.py), by rule id: the table
docs/agent-hosts.md ("Exactly once") describes; then the mark as `Hosts.marks` cuts it into the journal's group
commits; then a model of agent, gateway, host and group commits with crashes at any step."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.agenthost import ledger as ledger_rules
from gateway.agenthost.ledger import REPLAYED, Ledger, Mark
from gateway.runtime.hosting import HostedAgent, Hosts
from gateway.store import StoreBase

pytestmark = pytest.mark.unit

SESSION = "s-ledger"


# -- the agent's lines and the gateway's ---------------------------------------------------------------------------
def note(n: int = 0) -> dict[str, Any]:
    """A `session/update` notification."""
    return {"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "a", "update": {"sessionUpdate": "agent_message_chunk", "n": n}}}


def ask(request_id: int) -> dict[str, Any]:
    """A request of the agent's (a permission asked)."""
    return {"jsonrpc": "2.0", "id": request_id, "method": "session/request_permission",
            "params": {"sessionId": "a", "options": [{"optionId": "allow", "kind": "allow_once", "name": "Allow"}]}}


def done(prompt_id: Any) -> dict[str, Any]:
    """The agent's response to a `session/prompt`."""
    return {"jsonrpc": "2.0", "id": prompt_id, "result": {"stopReason": "end_turn"}}


def failed(prompt_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": prompt_id, "error": {"code": -32603, "message": "the agent failed"}}


def answer(request_id: int, error: bool = False) -> bytes:
    """The gateway's answer to a request of the agent's."""
    body: dict[str, Any] = ({"error": {"code": -32603, "message": "no"}} if error
                            else {"result": {"outcome": {"outcome": "selected", "optionId": "allow"}}})
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, **body})


def prompt(prompt_id: int) -> bytes:
    """The gateway's `session/prompt`: a request, whose text says "result" (it answers nothing)."""
    return orjson.dumps({"jsonrpc": "2.0", "id": prompt_id, "method": "session/prompt",
                         "params": {"sessionId": "a", "prompt": [{"type": "text", "text": "what is the \"result\"?"}]}})


def reattached(ledger: Ledger) -> Ledger:
    """What a gateway that starts after a crash builds from the mark the store kept (as `Hosts.reattach` does)."""
    return Ledger(Mark.decode(orjson.loads(ledger.mark().encode())))


Step = tuple[Any, ...]


def play(steps: list[Step]) -> Ledger:
    ledger = Ledger()
    for step in steps:
        kind, args = step[0], step[1:]
        if kind == "read":
            ledger.read(*args)
        elif kind == "sent":
            ledger.sent(*args)
        elif kind == "taken":
            ledger.taken(*args)
        elif kind == "expect":
            ledger.expect_prompt(*args)
        elif kind == "settle":
            ledger.settle_prompt(*args)
        elif kind == "crash":
            ledger = reattached(ledger)
        else:
            raise AssertionError(kind)
    return ledger


def read(offset: int, message: dict[str, Any]) -> Step:
    return ("read", offset, message)


CRASH: Step = ("crash",)
THREE = [read(1, note()), read(2, ask(7)), read(3, note())]  # a request between two notifications

ROWS: list[tuple[str, str, list[Step], int, dict[int, str], list[int], list[Any]]] = [
    # (case, rule, steps, committed(), open, the offsets 1..8 skip() passes over, prompts awaited)
    ("a request opens its line", "LD-1", THREE, 1, {2: "request:7"}, [], []),
    ("an answer sent, not yet taken, leaves it open", "LD-1", [*THREE, ("sent", 1, answer(7))], 1,
     {2: "request:7"}, [], []),
    ("the host took the answer: closed", "LD-1", [*THREE, ("sent", 1, answer(7)), ("taken", 1)], 3, {}, [], []),
    ("an error answer taken closes it too", "LD-1", [*THREE, ("sent", 1, answer(7, error=True)), ("taken", 1)], 3,
     {}, [], []),
    ("the host took only the lines before the answer", "LD-1", [*THREE, ("sent", 4, answer(7)), ("taken", 3)], 1,
     {2: "request:7"}, [], []),
    ("the host took lines past the answer", "LD-1", [*THREE, ("sent", 4, answer(7)), ("taken", 9)], 3, {}, [], []),
    ("an answer to another request closes nothing", "LD-1", [*THREE, ("sent", 1, answer(8)), ("taken", 1)], 1,
     {2: "request:7"}, [], []),
    ("the gateway's own request with the same id answers nothing", "LD-1",
     [*THREE, ("sent", 1, prompt(7)), ("taken", 1)], 1, {2: "request:7"}, [], []),
    ("a gateway line that is no JSON answers nothing", "LD-1",
     [*THREE, ("sent", 1, b'{"result": broken'), ("taken", 1)], 1, {2: "request:7"}, [], []),
    ("an answer not taken before a crash: the request is asked again", "LD-1",
     [*THREE, ("sent", 1, answer(7)), CRASH], 1, {2: REPLAYED}, [1, 3], []),
    ("an answer taken before a crash: nothing is asked again", "LD-1",
     [*THREE, ("sent", 1, answer(7)), ("taken", 1), CRASH], 3, {}, [1, 2, 3], []),
    ("the prompt's response opens its line", "LD-2", [("expect", 5), read(1, note()), read(2, done(5))], 1,
     {2: "prompt:5"}, [], [5]),
    ("an error response to the prompt opens too", "LD-2", [("expect", 5), read(1, failed(5))], 0, {1: "prompt:5"},
     [], [5]),
    ("the turn's end settles it", "LD-2", [("expect", 5), read(1, note()), read(2, done(5)), ("settle", 5)], 2, {},
     [], []),
    ("a response to no prompt awaited opens nothing", "LD-2", [("expect", 5), read(1, done(6))], 1, {}, [], [5]),
    ("the prompt is awaited across a crash", "LD-2", [("expect", 5), read(1, note()), CRASH], 1, {}, [1], [5]),
    ("a response read, its turn not ended, before a crash: read again", "LD-2",
     [("expect", 5), read(1, note()), read(2, done(5)), CRASH], 1, {2: REPLAYED}, [1], [5]),
    ("notifications open nothing: the mark is past them", "LD-3", [read(1, note()), read(2, note()), read(3, note())],
     3, {}, [], []),
    ("a line at offset 0 (none yet) changes nothing", "LD-3", [read(0, ask(7))], 0, {}, [], []),
    ("nothing read", "LD-4", [], 0, {}, [], []),
    ("the line before the oldest open one", "LD-4",
     [*THREE, read(4, ask(8)), read(5, note()), ("sent", 1, answer(7)), ("taken", 1)], 3, {4: "request:8"}, [], []),
    ("nothing open: the last line seen", "LD-4",
     [*THREE, read(4, ask(8)), ("sent", 1, answer(8)), ("sent", 2, answer(7)), ("taken", 2)], 4, {}, [], []),
    ("after a reattach, what is committed up to seen is skipped", "LD-5", [*THREE, read(4, note()), CRASH], 1,
     {2: REPLAYED}, [1, 3, 4], []),
    ("a reattach with nothing open skips up to seen", "LD-5", [read(1, note()), read(2, note()), CRASH], 2, {},
     [1, 2], []),
    ("a second crash before the replay keeps the mark", "LD-5", [*THREE, CRASH, CRASH], 1, {2: REPLAYED}, [1, 3], []),
    ("a replayed open line re-registers as the request it is", "LD-6", [*THREE, CRASH, read(2, ask(7))], 1,
     {2: "request:7"}, [1, 3], []),
    ("the re-asked request closes when its new answer is taken", "LD-6",
     [*THREE, CRASH, read(2, ask(7)), ("sent", 1, answer(7)), ("taken", 1)], 3, {}, [1, 2, 3], []),
    ("a replayed open line re-registers as the prompt's response", "LD-6",
     [("expect", 5), read(1, done(5)), CRASH, read(1, done(5))], 0, {1: "prompt:5"}, [], [5]),
    ("a replayed open line that needs nothing more is closed", "LD-6", [*THREE, CRASH, read(2, note())], 3, {},
     [1, 2, 3], []),
    ("lines after seen go through", "LD-6", [read(1, note()), read(2, note()), CRASH, read(3, ask(9))], 2,
     {3: "request:9"}, [1, 2], []),
]


@pytest.mark.parametrize("case,rule,steps,committed,open_,skipped,prompts", ROWS, ids=[row[0] for row in ROWS])
def test_ledger_rules(case: str, rule: str, steps: list[Step], committed: int, open_: dict[int, str],
                      skipped: list[int], prompts: list[Any]) -> None:
    ledger = play(steps)
    assert (ledger.committed(), ledger.open, [o for o in range(1, 9) if ledger.skip(o)], ledger.prompts) == (
        committed, open_, skipped, prompts)


# Whether a prompt the mark names reached the agent, from where its line stands and the host's `written` (welcome).
PROMPT_ROWS: list[tuple[str, str, list[Step], int, bool]] = [
    ("its line's number is kept and the host took it", "LD-7",
     [("sent", 3, answer(1)), ("expect", 5), ("sent", 4, prompt(5))], 4, True),
    ("its line's number is kept and the host stopped short of it", "LD-7",
     [("sent", 3, answer(1)), ("expect", 5), ("sent", 4, prompt(5))], 3, False),
    ("recorded, never sent, the host took nothing after the line before it", "LD-8",
     [("sent", 3, answer(1)), ("expect", 5)], 3, False),
    ("recorded, never sent, on a fresh agent", "LD-8", [("expect", 1)], 0, False),
    ("recorded, the host took a line after the one before it: taken as reached", "LD-9",
     [("sent", 3, answer(1)), ("expect", 5)], 4, True),
]


@pytest.mark.parametrize("case,rule,steps,written,reached", PROMPT_ROWS, ids=[row[0] for row in PROMPT_ROWS])
def test_prompt_reached_rules(case: str, rule: str, steps: list[Step], written: int, reached: bool) -> None:
    prompt_id = next(step[1] for step in steps if step[0] == "expect")
    ledger = play(steps)
    assert ledger.reached(prompt_id, written) is reached
    assert reattached(ledger).reached(prompt_id, written) is reached  # as the next gateway reads the mark


def test_a_prompt_sent_again_is_placed_after_the_lines_sent_since() -> None:
    ledger = reattached(play([("expect", 5)]))  # recorded by a gateway that died before sending it
    ledger.attached(0)
    assert not ledger.reached(5, 0)  # LD-8: it goes again
    ledger.sent(1, answer(3))  # another line went first
    ledger.resend_prompt(5)
    assert not ledger.reached(5, 1) and ledger.reached(5, 2)
    ledger.sent(2, prompt(5))
    assert orjson.loads(ledger.mark().encode())["prompt_lines"] == [[5, 1, 2]]
    assert not ledger.reached(5, 1) and ledger.reached(5, 2)  # LD-7 from here


def test_every_rule_has_a_row() -> None:
    assert sorted({row[1] for row in ROWS} | {row[1] for row in PROMPT_ROWS}) == sorted(ledger_rules.RULES)


def test_every_rule_id_is_in_the_docs() -> None:
    from tests.support.paths import REPO

    text = (REPO / "docs" / "agent-hosts.md").read_text()
    assert [rule for rule in ledger_rules.RULES if f"| {rule} |" not in text] == []


def test_the_mark_is_kept_as_the_store_keeps_it() -> None:
    """Offsets and prompt ids in JSON; what each open line was is not kept: a reattach learns it again (LD-6)."""
    ledger = play([("expect", "p-1"), *THREE, read(4, done(9)), read(5, failed("p-1"))])
    raw = orjson.loads(ledger.mark().encode())
    assert raw == {"seen": 5, "open": [2, 5], "prompts": ["p-1"], "prompt_lines": [["p-1", 0, None]]}
    assert Mark.decode(raw) == Mark(5, {2: REPLAYED, 5: REPLAYED}, ["p-1"], {"p-1": 0})
    assert Mark.decode(None) == Mark.decode({}) == Mark()


# -- the mark in the journal's group commits (`Hosts.marks`, `Hosts.failed`, `Hosts.write_marks`) -------------------
class Carrier:
    """All `Hosts.marks` and `Hosts.failed` read of a hosted agent: its ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger


def hosts_of(ledger: Ledger) -> Hosts:
    hosts = Hosts(cast(StoreBase, None), Path("/nonexistent"), 1.0)  # neither store nor state directory is touched
    hosts.agents[SESSION] = cast(HostedAgent, Carrier(ledger))
    return hosts


def cut(hosts: Hosts) -> bytes | None:
    """The mark that goes with the group being cut, if any (the bus calls `marks` as it cuts a group)."""
    return (hosts.marks() or {}).get(SESSION)


def test_a_new_agents_mark_goes_with_the_next_group_and_then_only_changes() -> None:
    ledger = Ledger()
    hosts = hosts_of(ledger)
    assert ledger.changed()
    assert cut(hosts) == Mark().encode()
    assert not ledger.changed() and cut(hosts) is None
    ledger.read(1, ask(7))
    assert ledger.changed()
    assert orjson.loads(cut(hosts) or b"") == {"seen": 1, "open": [1], "prompts": [], "prompt_lines": []}
    ledger.sent(1, answer(7))  # an answer on its way changes no mark: the request stays open until it is taken
    ledger.taken(0)
    assert not ledger.changed() and cut(hosts) is None
    ledger.taken(1)
    assert orjson.loads(cut(hosts) or b"") == {"seen": 1, "open": [], "prompts": [], "prompt_lines": []}
    ledger.expect_prompt(3)
    assert orjson.loads(cut(hosts) or b"")["prompts"] == [3]
    ledger.settle_prompt(3)
    assert orjson.loads(cut(hosts) or b"")["prompts"] == []


def test_a_failed_group_leaves_its_mark_for_the_next_one() -> None:
    ledger = Ledger()
    hosts = hosts_of(ledger)
    ledger.read(1, note())
    marks = hosts.marks()
    assert marks is not None and not ledger.changed()
    hosts.failed(marks)
    assert ledger.changed()
    assert cut(hosts) == marks[SESSION]


def test_a_change_after_the_cut_goes_with_the_next_group() -> None:
    """A line read while a group is being committed: that group's mark does not cover it, the next one does."""
    ledger = Ledger()
    hosts = hosts_of(ledger)
    ledger.read(1, note())
    first = cut(hosts)
    ledger.read(2, note())
    second = cut(hosts)
    assert first is not None and second is not None
    assert (orjson.loads(first)["seen"], orjson.loads(second)["seen"]) == (1, 2)


# -- the model ------------------------------------------------------------------------------------------------------
class ExactlyOnce(RuleBasedStateMachine):
    """An agent writes notifications, requests and its prompts' responses into its host's spool; a gateway reads
    them in order, queuing a notification's event, asking a request (and later answering it: a line the host takes,
    and says so), awaiting its prompt's response and ending the turn; group commits store the events with the mark
    `Hosts.marks` cuts (or fail: their events are lost, as the bus counts them, and the mark goes with the next
    group); an idle journal writes the mark alone; the gateway is killed (or detaches) at any step, and the next one
    attaches with the stored mark's `committed()` and is handed the lines after it but those `skip()` names. The
    agent's request ids and the gateway's prompt ids overlap on purpose: each side numbers its own.

    After every step, were the gateway killed now: no notification whose event is committed would be handled again,
    none whose event is not would be passed over, no request whose answer the host has not taken would be passed
    over, and the turn awaited is one not ended; nothing is in the journal (or queued for it) twice; a stored mark's
    committed offset never goes down (the host may have dropped what is below it). At the end, with everything read,
    answered, taken and committed: every notification's event is in the journal once, every request was answered
    (and asked again after every crash that found it unanswered), every turn ended once; but for what a failed group
    lost.

    A prompt goes out, and its host takes it, as its `turn_started` is committed. In the gateway a crash can fall
    between the two (`turns._run` commits `turn_started`, then sends the prompt): the next gateway would then await
    an answer the agent never owes. That window is the turn runner's, not the ledger's, and is left out here."""

    def __init__(self) -> None:
        super().__init__()
        # the agent, and its host's spool
        self.lines: list[dict[str, Any]] = []  # offset k is lines[k - 1]
        self.next_request = 1
        self.prompts_received: list[int] = []  # in order
        self.prompts_answered: set[int] = set()
        self.answers_received: Counter[int] = Counter()  # request id -> answers the agent got
        self.host_written = 0  # the last gateway line the host took
        # the store
        self.journal: list[tuple[str, int]] = []  # ("note", n) / ("turn_started", p) / ("turn_ended", p)
        self.stored: bytes | None = None  # the mark in agent_hosts
        self.stored_committed = 0
        self.lost: set[tuple[str, int]] = set()  # events of failed groups (the bus counts them)
        # across gateways
        self.handled: Counter[int] = Counter()  # request id -> times a gateway handed it to its broker
        self.must_ask_again: Counter[int] = Counter()  # request id -> times it has to have been handed, at least
        self.prompt_ids: set[int] = set()
        self.incarnation = 0
        self.attach()

    # -- a gateway's life ---------------------------------------------------------------------------------------
    def attach(self) -> None:
        self.incarnation += 1
        mark = Mark.decode(orjson.loads(self.stored) if self.stored is not None else None)
        self.ledger = Ledger(mark)
        self.hosts = hosts_of(self.ledger)
        self.cursor = self.ledger.committed() + 1  # the host replays from here (AH-6)
        self.next_seq = self.host_written + 1  # GatewayLines(welcome.written)
        self.heard = self.host_written
        self.sent: dict[int, tuple[str, int]] = {}  # seq -> ("answer", request id) / ("prompt", prompt id)
        self.queue: list[tuple[str, int]] = []  # events queued for the next group
        self.questions: list[int] = []  # requests asked, not yet answered
        self.turn: int | None = mark.prompts[-1] if mark.prompts else None  # `turns.resume`
        self.turn_answered = False
        self.unsent_prompt: int | None = None  # a turn whose turn_started is not committed yet
        self.check_replay(self.ledger)

    def check_replay(self, ledger: Ledger) -> None:
        """What a gateway attaching with this ledger's mark is handed: nothing committed, nothing else passed over."""
        awaited = ledger.prompts[-1] if ledger.prompts else None
        assert [p for p in ledger.prompts if ("turn_ended", p) in self.journal] == [], "a turn over, awaited again"
        for offset, line in enumerate(self.lines, start=1):
            passed_over = offset <= ledger.committed() or ledger.skip(offset)
            if line["kind"] == "note":
                assert passed_over == (("note", line["n"]) in self.journal) or ("note", line["n"]) in self.lost, (
                    f"the notification at {offset} would be {'lost' if passed_over else 'handled twice'}: "
                    f"{ledger.mark()}")
            elif line["kind"] == "ask" and self.answers_received[line["id"]] == 0:
                assert not passed_over, f"the request at {offset}, never answered, would not be asked again"
            elif line["kind"] == "done" and line["id"] == awaited:
                assert not passed_over, f"the awaited response at {offset} would be passed over"

    def handle(self, offset: int) -> None:
        line = self.lines[offset - 1]
        message = line["message"]
        self.ledger.read(offset, message)  # the observer and the update intake: one step of the read loop
        if line["kind"] == "note":
            self.queue.append(("note", line["n"]))
        elif line["kind"] == "ask":
            self.handled[line["id"]] += 1
            self.questions.append(line["id"])
        elif line["kind"] == "done" and line["id"] == self.turn:
            self.turn_answered = True

    def send(self, what: tuple[str, int], line: bytes) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.sent[seq] = what
        self.ledger.sent(seq, line)
        return seq

    def host_takes(self, upto: int) -> None:
        for seq in range(self.host_written + 1, upto + 1):
            kind, ident = self.sent[seq]
            if kind == "answer":
                self.answers_received[ident] += 1
            else:
                self.prompts_received.append(ident)
        self.host_written = max(self.host_written, upto)

    def commit_group(self, fail: bool = False) -> None:
        marks = self.hosts.marks()
        group, self.queue = self.queue, []
        if fail:
            self.lost.update(group)
            if marks:
                self.hosts.failed(marks)
            if self.unsent_prompt is not None and ("turn_started", self.unsent_prompt) in group:
                self.close_turn()  # its prompt is never sent; the turn ends (`_run`'s except)
            return
        self.journal.extend(group)
        if marks:
            self.store_mark(marks[SESSION])
        if self.unsent_prompt is not None and ("turn_started", self.unsent_prompt) in group:
            p, self.unsent_prompt = self.unsent_prompt, None
            self.host_takes(self.send(("prompt", p), prompt(p)))

    def store_mark(self, mark: bytes) -> None:
        committed = Ledger(Mark.decode(orjson.loads(mark))).committed()
        assert committed >= self.stored_committed, "a stored mark went back below what the host may have dropped"
        self.stored, self.stored_committed = mark, committed

    def close_turn(self) -> None:
        assert self.turn is not None
        self.ledger.settle_prompt(self.turn)  # `turns._close`: settled, then turn_ended queued, no await between
        self.queue.append(("turn_ended", self.turn))
        self.turn, self.turn_answered, self.unsent_prompt = None, False, None

    def crashed(self) -> None:
        """Whatever was not committed is gone with the process; so are its lines the host had not taken."""
        for request_id, times in self.handled.items():
            if self.answers_received[request_id] == 0:  # asked, and no answer of it reached the agent
                self.must_ask_again[request_id] = times + 1
        self.attach()

    # -- the agent ----------------------------------------------------------------------------------------------
    @precondition(lambda self: len(self.lines) < 40)
    @rule(count=st.integers(min_value=1, max_value=3))
    def agent_notifies(self, count: int) -> None:
        for _ in range(count):
            n = len(self.lines) + 1
            self.lines.append({"kind": "note", "n": n, "message": note(n)})

    @precondition(lambda self: len(self.lines) < 40)
    @rule(count=st.integers(min_value=1, max_value=2))
    def agent_asks(self, count: int) -> None:
        for _ in range(count):
            request_id = self.next_request
            self.next_request += 1
            self.lines.append({"kind": "ask", "id": request_id, "message": ask(request_id)})

    @precondition(lambda self: any(p not in self.prompts_answered for p in self.prompts_received))
    @rule(error=st.booleans())
    def agent_ends_its_turn(self, error: bool) -> None:
        p = next(p for p in self.prompts_received if p not in self.prompts_answered)
        self.prompts_answered.add(p)
        self.lines.append({"kind": "done", "id": p, "message": failed(p) if error else done(p)})

    # -- the gateway --------------------------------------------------------------------------------------------
    @precondition(lambda self: self.cursor <= len(self.lines))
    @rule(count=st.integers(min_value=1, max_value=6))
    def gateway_reads(self, count: int) -> None:
        for _ in range(count):
            if self.cursor > len(self.lines):
                return
            offset, self.cursor = self.cursor, self.cursor + 1
            if not self.ledger.skip(offset):
                self.handle(offset)

    @precondition(lambda self: bool(self.questions))
    @rule(which=st.integers(min_value=0, max_value=9), every=st.booleans(), error=st.booleans())
    def gateway_answers(self, which: int, every: bool, error: bool) -> None:
        """One question answered (or `every` one), in any order."""
        for _ in range(len(self.questions) if every else 1):
            request_id = self.questions.pop(which % len(self.questions))
            self.send(("answer", request_id), answer(request_id, error))

    @precondition(lambda self: self.next_seq - 1 > self.host_written)
    @rule(upto=st.integers(min_value=1, max_value=2), said=st.booleans())
    def host_takes_lines(self, upto: int, said: bool) -> None:
        """The host takes the gateway's next lines (the agent gets them); `said`: its `written` reached the gateway."""
        self.host_takes(min(self.host_written + upto, self.next_seq - 1))
        if said:
            self.gateway_hears_written()

    @precondition(lambda self: self.heard < self.host_written)
    @rule()
    def gateway_hears_written(self) -> None:
        self.heard = self.host_written
        self.ledger.taken(self.heard)

    @precondition(lambda self: self.turn is None)
    @rule(same_id=st.sampled_from([True, True, False]))
    def gateway_prompts(self, same_id: bool) -> None:
        """`turns._run`: the prompt's id expected, then its turn_started queued; the prompt goes once that commits.
        `same_id`: the id of a request of the agent's still open, where one is (each side numbers its own)."""
        open_ids = [r for r in self.questions if r not in self.prompt_ids]
        p = open_ids[0] if same_id and open_ids else max(self.prompt_ids | set(self.handled), default=0) + 1
        self.prompt_ids.add(p)
        self.ledger.expect_prompt(p)
        self.queue.append(("turn_started", p))
        self.turn, self.unsent_prompt = p, p

    @precondition(lambda self: self.turn_answered)
    @rule()
    def gateway_ends_the_turn(self) -> None:
        self.close_turn()

    @precondition(lambda self: bool(self.queue))
    @rule(fails=st.sampled_from([False, False, True]))
    def group_commit(self, fails: bool) -> None:
        self.commit_group(fail=fails)

    @precondition(lambda self: not self.queue)
    @rule()
    def marks_written_while_idle(self) -> None:
        """`Hosts.write_marks`: only while no event is queued or being committed."""
        marks = self.hosts.marks()
        if marks:
            self.store_mark(marks[SESSION])

    @rule(kill=st.booleans())
    def gateway_stops(self, kill: bool) -> None:
        """kill -9 (`kill`): the queue, the unanswered questions, the lines the host had not taken, all gone. SIGTERM
        with `on_stop = "detach"`: the bus flushed and the marks written first (`Launcher.detach`)."""
        if not kill:
            if self.queue:
                self.commit_group()
            self.marks_written_while_idle()
        self.crashed()

    # -- what must hold -----------------------------------------------------------------------------------------
    @invariant()
    def a_crash_now_would_lose_nothing_and_repeat_nothing(self) -> None:
        if self.stored is not None:
            self.check_replay(Ledger(Mark.decode(orjson.loads(self.stored))))

    @invariant()
    def nothing_twice(self) -> None:
        counts = Counter(self.journal) + Counter(self.queue)
        twice = {event: n for event, n in counts.items() if n > 1}
        assert twice == {}, f"handled twice: {twice}"

    def teardown(self) -> None:
        for _ in range(50):  # everything read, answered, taken, ended and committed
            before = (len(self.lines), self.cursor, len(self.journal), self.host_written, self.stored)
            if self.cursor <= len(self.lines):
                self.gateway_reads(len(self.lines))
            if self.questions:
                self.gateway_answers(0, True, False)
            if self.next_seq - 1 > self.host_written:
                self.host_takes(self.next_seq - 1)
            if self.heard < self.host_written:
                self.gateway_hears_written()
            while any(p not in self.prompts_answered for p in self.prompts_received):
                self.agent_ends_its_turn(False)
            if self.turn_answered:
                self.close_turn()
            if self.queue:
                self.commit_group()
            self.marks_written_while_idle()
            self.nothing_twice()
            if before == (len(self.lines), self.cursor, len(self.journal), self.host_written, self.stored):
                break
        journal = Counter(self.journal)
        for line in self.lines:
            if line["kind"] == "note":
                assert journal[("note", line["n"])] == 1 or ("note", line["n"]) in self.lost, line
            elif line["kind"] == "ask":
                assert self.answers_received[line["id"]] >= 1, f"request {line['id']} never answered"
        for p in self.prompts_received:
            assert journal[("turn_ended", p)] == 1 or ("turn_ended", p) in self.lost, f"turn {p} never ended"
        assert all(self.handled[r] >= n for r, n in self.must_ask_again.items()), "a request was not asked again"
        assert (self.ledger.open, self.ledger.committed()) == ({}, len(self.lines))


ExactlyOnce.TestCase.settings = settings(max_examples=400, stateful_step_count=30, deadline=None)
test_no_line_is_lost_or_handled_twice_across_crashes = ExactlyOnce.TestCase
