"""The subscription machine's tables (gateway/journal/phases.py): every move with its rule, every illegal move
refused, the feeder's next step, a page cut from the journal, the gap the horizon explains, and the retention pin."""

from __future__ import annotations

import pytest

from gateway.journal.phases import (
    MOVES,
    WAKE,
    FeedAction,
    GapVerdict,
    IllegalMove,
    Move,
    SubscriptionPhase,
    Wake,
    cut_page,
    explain_gap,
    move,
    next_feed_step,
    prune_floor,
)

P, M = SubscriptionPhase, Move

LEGAL = [
    ("SUB-1", P.REPLAY, M.PAGE_SENT, P.REPLAY),
    ("SUB-2", P.REPLAY, M.CAUGHT_UP, P.FED),
    ("SUB-3", P.FED, M.PAGE_SENT, P.FED),
    ("SUB-4", P.FED, M.AT_HEAD, P.LIVE),
    ("SUB-5", P.LIVE, M.GROUP_TAKEN, P.LIVE),
    ("SUB-6", P.LIVE, M.SINK_FULL, P.FED),
    ("SUB-7", P.REPLAY, M.OVERTAKEN, P.ENDED),
    ("SUB-7", P.FED, M.OVERTAKEN, P.ENDED),
    ("SUB-8", P.REPLAY, M.FEED_FAILED, P.ENDED),
    ("SUB-8", P.FED, M.FEED_FAILED, P.ENDED),
    ("SUB-9", P.REPLAY, M.UNSUBSCRIBED, P.ENDED),
    ("SUB-9", P.FED, M.UNSUBSCRIBED, P.ENDED),
    ("SUB-9", P.LIVE, M.UNSUBSCRIBED, P.ENDED),
    ("SUB-9", P.ENDED, M.UNSUBSCRIBED, P.ENDED),
]


@pytest.mark.parametrize(("rule", "phase", "what", "after"), LEGAL)
def test_each_move_of_the_table_has_its_rule_and_next_phase(rule: str, phase: SubscriptionPhase, what: Move,
                                                            after: SubscriptionPhase) -> None:
    assert move(phase, what) == (rule, after)


def test_the_table_is_exactly_the_listed_moves() -> None:
    assert {(phase, what): (rule, after) for rule, phase, what, after in LEGAL} == MOVES


@pytest.mark.parametrize(("phase", "what"), [(p, m) for p in SubscriptionPhase for m in Move if (p, m) not in MOVES])
def test_a_move_the_table_lacks_raises(phase: SubscriptionPhase, what: Move) -> None:
    with pytest.raises(IllegalMove):
        move(phase, what)


def test_no_phase_of_a_subscription_behind_the_head_is_without_a_feeder() -> None:
    # Whatever ends a move in REPLAY or FED (the only phases in which it can be behind), its feeder brings it on.
    assert WAKE == {P.REPLAY: Wake.FEEDER, P.FED: Wake.FEEDER, P.LIVE: Wake.COMMIT, P.ENDED: Wake.NOTHING}
    for _, after in MOVES.values():
        assert after in WAKE


def test_a_live_subscription_is_never_overtaken_nor_fed() -> None:
    # Live means at the head: pruning never removes the newest row, so nothing it is owed can be pruned.
    for what in (M.OVERTAKEN, M.FEED_FAILED, M.PAGE_SENT, M.CAUGHT_UP, M.AT_HEAD):
        with pytest.raises(IllegalMove):
            move(P.LIVE, what)


@pytest.mark.parametrize(("phase", "last_id", "until", "head", "rule", "action", "target"), [
    (P.REPLAY, 3, 10, 20, "FEED-1", FeedAction.READ, 10),  # its replay ends at the head it subscribed at
    (P.REPLAY, 10, 10, 20, "FEED-2", FeedAction.SEND_CAUGHT_UP, 10),
    (P.REPLAY, 0, 0, 0, "FEED-2", FeedAction.SEND_CAUGHT_UP, 0),  # an empty journal: caught up at once
    (P.FED, 10, 10, 20, "FEED-3", FeedAction.READ, 20),  # what came during the replay, after `caught_up`
    (P.FED, 20, 10, 20, "FEED-4", FeedAction.GO_LIVE, 20),
    (P.FED, 162_790, 9, 200_015, "FEED-3", FeedAction.READ, 200_015),  # the subscriber: still fed
])
def test_the_feeders_next_step(phase: SubscriptionPhase, last_id: int, until: int, head: int, rule: str,
                               action: FeedAction, target: int) -> None:
    step = next_feed_step(phase, last_id, until, head)
    assert (step.rule, step.action, step.target) == (rule, action, target)


@pytest.mark.parametrize("phase", [P.LIVE, P.ENDED])
def test_nothing_feeds_a_live_or_ended_subscription(phase: SubscriptionPhase) -> None:
    with pytest.raises(IllegalMove):
        next_feed_step(phase, 0, 0, 0)


def entries(ids: range | list[int], session: str = "s") -> list[tuple[int, str | None, bytes]]:
    return [(i, session, f"frame-{i}".encode()) for i in ids]


@pytest.mark.parametrize(("rows", "since", "covered", "session", "max_bytes", "frames", "through", "gap"), [
    (entries(range(4, 8)), 3, 7, None, 1 << 20, [4, 5, 6, 7], 7, False),
    (entries(range(4, 8)), 3, 9, None, 1 << 20, [4, 5, 6, 7], 9, False),  # a window past the last row read
    (entries(range(4, 8)), 3, 7, None, 14, [4, 5], 5, False),  # cut by bytes: the cursor stops at what was sent
    (entries(range(4, 5)), 3, 4, None, 1, [4], 4, False),  # one event even when larger than a page
    (entries(range(4, 8)) + entries(range(8, 10), "other"), 3, 9, "s", 1 << 20, [4, 5, 6, 7], 9, False),
    (entries(range(9, 12)), 3, 11, None, 1 << 20, [9, 10, 11], 11, True),  # the rows of 4..8 are gone
    ([], 3, 11, None, 1 << 20, [], 11, True),  # nothing at all in a window that had events
    (entries([4, 6]), 3, 6, None, 1 << 20, [4, 6], 6, True),  # a hole in the middle (a failed write's)
    ([], 5, 5, None, 1 << 20, [], 5, False),  # an empty window is no gap
])
def test_a_page_cut_from_journal_entries(rows: list[tuple[int, str | None, bytes]], since: int, covered: int,
                                         session: str | None, max_bytes: int, frames: list[int], through: int,
                                         gap: bool) -> None:
    page = cut_page(rows, since, covered, session, max_bytes)
    assert page.frames == [f"frame-{i}".encode() for i in frames]
    assert (page.through, page.gap) == (through, gap)


@pytest.mark.parametrize(("last_id", "horizon", "read_again", "rule", "verdict"), [
    (10, 11, False, "FEED-5", GapVerdict.OVERTAKEN),  # event 11 was pruned: the subscription is told, never skipped
    (10, 50, True, "FEED-5", GapVerdict.OVERTAKEN),
    (10, 10, False, "FEED-6", GapVerdict.READ_AGAIN),  # event 11 is still kept: a read is not trusted at once
    (10, 0, False, "FEED-6", GapVerdict.READ_AGAIN),
    (10, 10, True, "FEED-7", GapVerdict.HOLE),  # still there on a fresh read: ids a failed write gave nobody
])
def test_a_gap_is_explained_before_a_cursor_moves_over_it(last_id: int, horizon: int, read_again: bool, rule: str,
                                                          verdict: GapVerdict) -> None:
    assert explain_gap(last_id, horizon, read_again) == (rule, verdict)


@pytest.mark.parametrize(("target", "cursors", "floor"), [
    (100_000, [], 100_000),
    (100_000, [22_894], 22_894),  # the flood: retention waits for the subscriber fed from the journal
    (100_000, [150_000, 99_999], 99_999),
    (0, [5], 0),
])
def test_the_count_retention_never_prunes_past_a_fed_cursor(target: int, cursors: list[int], floor: int) -> None:
    assert prune_floor(target, cursors) == floor
