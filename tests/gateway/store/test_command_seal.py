"""The seal of forwarded commands, by table: what runs and why the rest does not."""

from __future__ import annotations

import pytest

from gateway.store.command_seal import SealRefusal, SeenCommands, answer_verifies, judge, key_check, seal, seal_answer

SECRET = b"s" * 32
REQUEST = '{"method":"set_title","owner":"bob","session_id":"s-1","args":{"title":"x"}}'
GOOD = seal(SECRET, "c-1", "node-a", "node-b", REQUEST, 100.0)

# (what the row says, the clock) -> the verdict
CASES: list[tuple[dict[str, object], float, SealRefusal | None]] = [
    ({}, 50.0, None),
    ({"mac": None}, 50.0, SealRefusal.NO_MAC),
    ({"mac": ""}, 50.0, SealRefusal.NO_MAC),
    ({"expires_at": None}, 50.0, SealRefusal.NO_MAC),
    ({"mac": "0" * 64}, 50.0, SealRefusal.BAD_MAC),
    ({"request": REQUEST.replace("bob", "alice")}, 50.0, SealRefusal.BAD_MAC),  # another owner, same MAC
    ({"target": "node-c"}, 50.0, SealRefusal.BAD_MAC),
    ({"sender": "node-c"}, 50.0, SealRefusal.BAD_MAC),
    ({"command_id": "c-2"}, 50.0, SealRefusal.BAD_MAC),
    ({"expires_at": 200.0}, 50.0, SealRefusal.BAD_MAC),  # a later expiry, the old MAC
    ({}, 100.5, SealRefusal.EXPIRED),
    ({}, 100.0 - 60.0 - 5.0 - 0.5, SealRefusal.TOO_LONG),  # sealed further ahead than any node seals (TTL + clocks)
    ({}, 100.0 - 60.0 - 5.0, None),
    ({"secret": b"t" * 32}, 50.0, SealRefusal.BAD_MAC),
]


@pytest.mark.parametrize(("change", "now", "expected"), CASES)
def test_a_command_runs_only_when_its_seal_verifies_in_time(change: dict[str, object], now: float,
                                                            expected: SealRefusal | None) -> None:
    row: dict[str, object] = {"secret": SECRET, "command_id": "c-1", "target": "node-a", "sender": "node-b",
                              "request": REQUEST, "mac": GOOD, "expires_at": 100.0, **change}
    assert judge(now=now, seen=SeenCommands(), **row) is expected  # type: ignore[arg-type]


def test_a_command_runs_once() -> None:
    seen = SeenCommands()
    args = {"secret": SECRET, "command_id": "c-1", "target": "node-a", "sender": "node-b", "request": REQUEST,
            "mac": GOOD, "expires_at": 100.0}
    assert judge(now=50.0, seen=seen, **args) is None  # type: ignore[arg-type]
    assert judge(now=60.0, seen=seen, **args) is SealRefusal.REPLAYED  # type: ignore[arg-type]
    assert judge(now=101.0, seen=seen, **args) is SealRefusal.EXPIRED  # type: ignore[arg-type]
    assert seen.until == {"c-1": 100.0}
    seen.forget_expired(101.0)
    assert seen.until == {}  # bounded: forgotten once it could not verify anyway


ANSWER = '{"result":{"stop_reason":"end_turn"}}'


@pytest.mark.parametrize(("change", "believed"), [
    ({}, True),
    ({"answer": ANSWER.replace("end_turn", "FORGED")}, False),
    ({"runner": "node-c"}, False),  # another node's answer to the same command
    ({"sender": "node-c"}, False),
    ({"command_id": "c-2"}, False),  # the answer to another command
    ({"secret": b"t" * 32}, False),
    ({"mac": None}, False),
    ({"mac": seal(SECRET, "c-1", "node-a", "node-b", ANSWER, 100.0)}, False),  # a command's MAC is no answer's
])
def test_an_answer_is_believed_only_when_its_seal_verifies(change: dict[str, object], believed: bool) -> None:
    row: dict[str, object] = {"secret": SECRET, "command_id": "c-1", "runner": "node-a", "sender": "node-b",
                              "answer": ANSWER, "mac": seal_answer(SECRET, "c-1", "node-a", "node-b", ANSWER),
                              **change}
    assert answer_verifies(**row) is believed  # type: ignore[arg-type]


def test_the_key_check_tells_secrets_apart_and_reveals_neither() -> None:
    assert key_check(SECRET) == key_check(SECRET) != key_check(b"t" * 32)
    assert SECRET.decode() not in key_check(SECRET)
