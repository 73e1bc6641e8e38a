"""Commands one node forwards to another on a PostgreSQL store (docs/architecture.md: Cluster), and their answers.

A command is a row (any size of request: a prompt may carry images), sent with a NOTIFY to its target in the same
transaction; the target claims its pending rows with `FOR UPDATE SKIP LOCKED` (two of its tasks never run one
command twice), writes the answer into the row, sealed (`command_seal.seal_answer`: `{"answer": JSON, "by": node,
"mac": …}`), and NOTIFYs the sender, who reads it, deletes the row and believes it only when the seal verifies.
Notifications are wake-ups only: both sides also poll. bench/pg_forwarding.py measured this at ~4 ms a round trip.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, NamedTuple

import orjson

from .command_seal import TTL, answer_verifies, seal, seal_answer
from .sql import Database

COMMANDS_CHANNEL = "acp_gateway_commands"  # payload: "command <target>" or "answer <sender> <id>"


class Claimed(NamedTuple):
    """A command as its row says it: what the seal is checked against before anything of it is believed."""

    id: str
    target: str
    sender: str
    request: str  # the JSON as stored (the seal covers these bytes)
    mac: str | None
    expires_at: float | None


class Answer(NamedTuple):
    """What the sender finds of its command: `state` pending, running, done or missing (its row gone: refused by
    its target, or deleted by someone else); when done, the answer and whether its seal verified."""

    state: str
    answer: dict[str, Any] | None = None
    sealed: bool = False


class CommandRepo:
    def __init__(self, store: Database) -> None:
        self.store = store

    async def submit(self, target: str, sender: str, request: dict[str, Any], secret: bytes) -> str:
        command_id = f"c-{uuid.uuid4().hex}"
        body = orjson.dumps(request).decode()
        expires_at = time.time() + TTL
        mac = seal(secret, command_id, target, sender, body, expires_at)
        async with self.store.transaction() as tx:
            await tx.execute("INSERT INTO commands (id, target, sender, request, state, mac, expires_at) "
                             "VALUES (?, ?, ?, ?, 'pending', ?, ?)",
                             (command_id, target, sender, body, mac, expires_at))
            await tx.execute("SELECT pg_notify(?, ?)", (COMMANDS_CHANNEL, f"command {target}"))
        return command_id

    async def claim(self, target: str, limit: int = 16) -> list[Claimed]:
        """The pending commands for `target`, now running: each is claimed once."""
        async with self.store.transaction() as tx:
            rows = await tx.fetchall(
                "UPDATE commands SET state = 'running' WHERE id IN (SELECT id FROM commands WHERE target = ? AND "
                "state = 'pending' ORDER BY created_at FOR UPDATE SKIP LOCKED LIMIT ?) "
                "RETURNING id, target, sender, request, mac, expires_at", (target, limit))
        return [Claimed(*row) for row in rows]

    async def discard(self, command_id: str) -> None:
        """A command refused (its seal did not verify): removed, never answered."""
        await self.store.write("DELETE FROM commands WHERE id = ?", (command_id,))

    async def answer(self, command_id: str, runner: str, sender: str, answer: dict[str, Any], secret: bytes) -> None:
        body = orjson.dumps(answer).decode()
        sealed = {"answer": body, "by": runner, "mac": seal_answer(secret, command_id, runner, sender, body)}
        async with self.store.transaction() as tx:
            await tx.execute("UPDATE commands SET state = 'done', answer = ? WHERE id = ?",
                             (orjson.dumps(sealed).decode(), command_id))
            await tx.execute("SELECT pg_notify(?, ?)", (COMMANDS_CHANNEL, f"answer {sender} {command_id}"))

    async def take_answer(self, command_id: str, target: str, sender: str, secret: bytes) -> Answer:
        """Where the command is; once done, its answer (the row is deleted with it), `sealed` when it verifies as
        `target`'s answer to `sender`'s command."""
        async with self.store.transaction() as tx:
            row = await tx.fetchone("DELETE FROM commands WHERE id = ? AND state = 'done' RETURNING answer",
                                    (command_id,))
            if row is None:
                state = await tx.fetchone("SELECT state FROM commands WHERE id = ?", (command_id,))
                # answered between the two statements: taken at the next look
                return Answer("running" if state and state[0] == "done" else str(state[0]) if state else "missing")
        try:
            stored = orjson.loads(row[0])
            body = stored["answer"]
            sealed = stored.get("by") == target and answer_verifies(secret, command_id, target, sender, body,
                                                                     stored.get("mac"))
            answer = orjson.loads(body)
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return Answer("done", None, False)
        return Answer("done", answer if isinstance(answer, dict) else None, sealed)

    async def withdraw(self, command_id: str) -> bool:
        """The sender stops waiting: a command not claimed yet is gone (True); one already running is left to
        finish, its answer unread (and swept with the target's other rows when it restarts)."""
        return await self.store.write("DELETE FROM commands WHERE id = ? AND state = 'pending'", (command_id,)) == 1

    async def sweep(self) -> int:
        """Rows nobody waits for any more: a day old (a sender that died, a target that died before it answered;
        a forwarded turn may run long, but not that long)."""
        return await self.store.write("DELETE FROM commands WHERE created_at < now() - interval '1 day'")
