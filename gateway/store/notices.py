"""What a PostgreSQL journal commit tells the other nodes (NOTIFY), readable by the cluster's nodes only.

Any role that can connect to the database may LISTEN on any channel and NOTIFY on it — PostgreSQL needs no grant for
either, and gives CONNECT to PUBLIC by default. So a notice is encrypted and authenticated (AES-256-GCM, the
`cryptography` package) with a key derived from `cluster_secret`: a listener without it learns nothing but that a
commit happened (not whose, not which session, not a word of it), and a notice it forges or changes is dropped.

The plaintext is "E<last id> <writer id> <owner>", then the commit's events (a line of the journal row's spans and
its frames, newline-joined, as the journal keeps them), so a listener hands them out without reading the journal;
too big for a notification (PostgreSQL refuses 8000 bytes or more), or for an owner whose name holds a newline, it
is "H<last id> <writer id> <owner>" alone, a wake-up, and listeners read the journal. A node with no secret (one
node on PostgreSQL) tells only that first line, in clear: there is no other node to tell.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .journal import JournalEntry, journal_entries

JOURNAL_CHANNEL = "acp_gateway_journal"
NOTICE_MAX_BYTES = 7900  # what a notification may carry, below PostgreSQL's 8000 bytes
SEALED = "2 "  # a sealed notice's prefix: the format's version, then base64(nonce + ciphertext and tag)
AAD = b"acp-gateway journal notice v2"
NONCE_BYTES = 12
# What the plaintext may hold so that its sealed form fits: base64 of nonce + plaintext + 16-byte tag.
PLAIN_MAX_BYTES = (NOTICE_MAX_BYTES - len(SEALED)) // 4 * 3 - NONCE_BYTES - 16


def notice_key(cluster_secret: bytes) -> bytes:
    """The notices' AES-256 key, derived from the cluster secret under a label of its own (no command's MAC key,
    no answer's, is ever it)."""
    return hmac.new(cluster_secret, b"acp-gateway journal notice v2 (AES-256-GCM)", hashlib.sha256).digest()


def commit_notice(last_id: int, writer: str, owner: str, spans: bytes, frames: bytes, key: bytes | None) -> str:
    """The payload of a commit's notification: sealed with `key` (the events along when they fit), else the bare
    head."""
    head = f"{last_id} {writer} {owner}"
    if key is None:
        return head
    plain = b"H" + head.encode()
    if "\n" not in owner and len(plain) + len(spans) + len(frames) + 2 <= PLAIN_MAX_BYTES:
        plain = b"\n".join((b"E" + head.encode(), spans, frames))
    nonce = os.urandom(NONCE_BYTES)
    return SEALED + base64.b64encode(nonce + AESGCM(key).encrypt(nonce, plain, AAD)).decode()


def read_notice(payload: str, key: bytes | None) -> tuple[str, int, str, list[JournalEntry] | None] | None:
    """(owner, last id, writer, the events when they came along) of a `commit_notice`; None when it is not one this
    node may believe: with a key, only a notice sealed with it (anything else is someone's forgery, or another
    cluster's); without one, the bare head. Events that do not read back, or do not end at the last id named, are
    left to the journal (the notice is then a wake-up only)."""
    if key is None:
        return None if payload.startswith(SEALED) else _head(payload)
    if not payload.startswith(SEALED):
        return None
    try:
        sealed = base64.b64decode(payload[len(SEALED):], validate=True)
        plain = AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], AAD).decode()
    except (binascii.Error, InvalidTag, ValueError, UnicodeDecodeError):
        return None
    if plain.startswith("H"):
        return _head(plain[1:])
    head, _, body = plain[1:].partition("\n")
    read = _head(head)
    if read is None or not plain.startswith("E"):
        return None
    owner, last, writer, _ = read
    spans, _, frames = body.partition("\n")
    try:
        entries = journal_entries(spans, frames.encode(), 0, last) or None
    except (ValueError, TypeError, IndexError):
        entries = None
    if entries is not None and entries[-1][0] != last:
        entries = None
    return owner, last, writer, entries


def _head(head: str) -> tuple[str, int, str, None] | None:
    last, _, rest = head.partition(" ")
    writer, _, owner = rest.partition(" ")
    if not last.isdigit() or not writer or not owner:
        return None
    return owner, int(last), writer, None
