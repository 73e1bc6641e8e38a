"""A subscription's way from its cursor to the live stream: its phases, its moves and the feeder's next step, as tables.

Rules of this file (as `runtime/states.py` and `acp/restore.py`):
- Pure: no sockets, no store, no tasks, no clocks. `gateway.journal` asks it what to do, then does it.
- A move not in `MOVES` for the phase a subscription is in is a bug: `IllegalMove` is raised, nothing is applied.
- Every phase says what brings the subscription forward next (`WAKE`): the feeder while the journal feeds it, the
  bus's next commit once it is live, nothing once it ended. No phase of a subscription that is behind the head is
  without a feeder, and a subscriber is never left behind silently: when the journal no longer holds the events it
  is owed (retention pruned past its cursor), it is ended and told to resubscribe (`SUB-7`), never skipped ahead.
- Rule ids (`SUB-n` for moves, `FEED-n` for the feeder's steps, `PIN-1`) are shared by the code, the docs
  (docs/api.md, "Slow readers") and the test tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class SubscriptionPhase(StrEnum):
    REPLAY = "replay"  # the journal feeds it what came after its cursor, up to the head it subscribed at
    FED = "fed"  # its replay is over (`caught_up` sent) but it is behind the head: the journal feeds it, a page a drain
    LIVE = "live"  # at the head: each group the bus commits is handed to it as it is committed
    ENDED = "ended"  # unsubscribed, or ended and told to resubscribe from its cursor


class Move(StrEnum):
    PAGE_SENT = "page_sent"  # a page of the journal was handed to its sink; the next waits for the sink to drain
    CAUGHT_UP = "caught_up"  # its replay reached the head it subscribed at: re-offers and `caught_up` were sent
    AT_HEAD = "at_head"  # the journal fed it to the bus's head (no await between reading the head and this move)
    GROUP_TAKEN = "group_taken"  # a committed group was handed to it live
    SINK_FULL = "sink_full"  # a committed group found its sink full: nothing was handed over
    OVERTAKEN = "overtaken"  # the journal no longer holds an event it is owed (pruned past its cursor)
    FEED_FAILED = "feed_failed"  # reading the journal for it failed
    UNSUBSCRIBED = "unsubscribed"  # its subscriber (or its connection) went away


class Wake(StrEnum):
    """What brings a subscription in a phase forward next."""

    FEEDER = "feeder"  # its feeder task: reads a page, hands it over, waits for the sink to drain, again
    COMMIT = "commit"  # the bus's next group commit, handed to it in `_fan_out`
    NOTHING = "nothing"  # ended: nothing is owed to it any more


class IllegalMove(RuntimeError):
    pass


P, M = SubscriptionPhase, Move
# (phase, move) -> (rule id, the phase after it)
MOVES: dict[tuple[SubscriptionPhase, Move], tuple[str, SubscriptionPhase]] = {
    (P.REPLAY, M.PAGE_SENT): ("SUB-1", P.REPLAY),
    (P.REPLAY, M.CAUGHT_UP): ("SUB-2", P.FED),  # what was committed during the replay follows `caught_up`
    (P.FED, M.PAGE_SENT): ("SUB-3", P.FED),
    (P.FED, M.AT_HEAD): ("SUB-4", P.LIVE),
    (P.LIVE, M.GROUP_TAKEN): ("SUB-5", P.LIVE),
    (P.LIVE, M.SINK_FULL): ("SUB-6", P.FED),  # not dropped, nothing queued for it: the journal feeds it from its cursor
    (P.REPLAY, M.OVERTAKEN): ("SUB-7", P.ENDED),
    (P.FED, M.OVERTAKEN): ("SUB-7", P.ENDED),
    (P.REPLAY, M.FEED_FAILED): ("SUB-8", P.ENDED),
    (P.FED, M.FEED_FAILED): ("SUB-8", P.ENDED),
    (P.REPLAY, M.UNSUBSCRIBED): ("SUB-9", P.ENDED),
    (P.FED, M.UNSUBSCRIBED): ("SUB-9", P.ENDED),
    (P.LIVE, M.UNSUBSCRIBED): ("SUB-9", P.ENDED),
    (P.ENDED, M.UNSUBSCRIBED): ("SUB-9", P.ENDED),
}

WAKE: dict[SubscriptionPhase, Wake] = {P.REPLAY: Wake.FEEDER, P.FED: Wake.FEEDER, P.LIVE: Wake.COMMIT,
                                       P.ENDED: Wake.NOTHING}
# The phases in which a subscription reads the journal rather than live frames: the journal keeps what they need.
FED_FROM_THE_JOURNAL = frozenset({P.REPLAY, P.FED})

# Moves after which the subscriber must be told its stream ended (close code 4429: reconnect and resubscribe from
# the cursor; a cursor past retention then gets `resync_required` / `too_far_behind`, which the clients handle).
TELL_SUBSCRIBER = frozenset({M.OVERTAKEN, M.FEED_FAILED})


def move(phase: SubscriptionPhase, what: Move) -> tuple[str, SubscriptionPhase]:
    """The rule and the phase after `what` happens to a subscription in `phase`; raises on a move the table lacks."""
    try:
        return MOVES[(phase, what)]
    except KeyError:
        raise IllegalMove(f"a subscription in phase {phase} cannot take move {what}") from None


class FeedAction(StrEnum):
    READ = "read"  # read the next page of the journal after its cursor and hand it over
    SEND_CAUGHT_UP = "send_caught_up"  # re-offer what is pending, send `caught_up` (move CAUGHT_UP)
    GO_LIVE = "go_live"  # move AT_HEAD, in the same step as reading the head


@dataclass(frozen=True)
class FeedStep:
    rule: str
    action: FeedAction
    target: int  # the id the journal feeds it up to in this phase


def next_feed_step(phase: SubscriptionPhase, last_id: int, until: int, head: int) -> FeedStep:
    """What the feeder of a subscription does next. `last_id`: everything it wants up to this id was handed to its
    sink; `until`: the head it subscribed at (its replay ends there); `head`: the bus's head now."""
    if phase is P.REPLAY:
        if last_id < until:
            return FeedStep("FEED-1", FeedAction.READ, until)
        return FeedStep("FEED-2", FeedAction.SEND_CAUGHT_UP, until)
    if phase is P.FED:
        if last_id < head:
            return FeedStep("FEED-3", FeedAction.READ, head)
        return FeedStep("FEED-4", FeedAction.GO_LIVE, head)
    raise IllegalMove(f"nothing feeds a subscription in phase {phase}")


@dataclass(frozen=True)
class Page:
    """What one page of the journal hands a subscription."""

    frames: list[bytes]
    through: int  # its cursor after the page: every event it wants up to here is in `frames` or was before
    gap: bool  # the page did not start at the event right after its cursor: pruned past it, or lost to a failed write


def cut_page(entries: Sequence[tuple[int, str | None, bytes]], since: int, covered: int, session_id: str | None,
             max_bytes: int) -> Page:
    """A page from journal entries (id, session id, frame) in id order with since < id <= covered, read as a window
    that covered ids up to `covered`: the frames of `session_id` (of every session when None), up to `max_bytes` (at
    least one event). Ids are gap-free per owner, so a first entry that is not `since + 1` is a gap the caller must
    explain (FEED-5) before it moves the cursor over it."""
    frames: list[bytes] = []
    size = 0
    through = covered
    expected = since + 1
    gap = False
    for event_id, sid, frame in entries:
        if size >= max_bytes:
            through = event_id - 1
            break
        if event_id != expected:
            gap = True
        expected = event_id + 1
        if session_id is None or sid == session_id:
            frames.append(frame)
            size += len(frame)
    if not entries and covered > since:
        gap = True
    return Page(frames, through, gap)


class GapVerdict(StrEnum):
    OVERTAKEN = "overtaken"  # FEED-5: retention pruned past its cursor: the subscription ends and is told (SUB-7)
    READ_AGAIN = "read_again"  # FEED-6: the same window is read once more, on a fresh snapshot
    HOLE = "hole"  # FEED-7: ids a failed write took and nobody ever got: passed over


def explain_gap(last_id: int, horizon: int, read_again: bool) -> tuple[str, GapVerdict]:
    """A page that did not start right after the cursor (`Page.gap`). The journal's horizon (every event after it
    is kept) past the cursor means events it is owed are gone. Otherwise the read is not trusted at once: it is
    made again (a stale snapshot must never move a cursor over events that exist); a gap that is still there is a
    hole a failed write left (its ids were handed to nobody) and is passed over."""
    if horizon > last_id:
        return "FEED-5", GapVerdict.OVERTAKEN
    if not read_again:
        return "FEED-6", GapVerdict.READ_AGAIN
    return "FEED-7", GapVerdict.HOLE


def prune_floor(count_target: int, cursors: Iterable[int]) -> int:
    """PIN-1: the id the count retention prunes an owner's journal through: its target (the newest minus the
    retention), but never past the cursor of a subscription of that owner that the journal still feeds (pruning
    through id N removes every event up to N, so a cursor of N keeps N + 1 on). The byte retention is not pinned:
    it bounds the disk an owner's slow reader can hold, and what it prunes past a cursor ends that subscription
    (SUB-7)."""
    floor = count_target
    for cursor in cursors:
        if cursor < floor:
            floor = cursor
    return floor
