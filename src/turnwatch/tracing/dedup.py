"""Ingested events' identities: the dedup key each is kept under (``ingested``), so a line read
twice counts once, and deleted with its event, so retention keeps no key of what it deleted."""

from __future__ import annotations

import hashlib
import sqlite3

from turnwatch.runtime.events import Event
from turnwatch.tracing import codec
from turnwatch.tracing.rows import UnreadableRow, event_of

__all__ = ["dedup_key", "forget_keys", "ingested_keys", "legacy_key"]

#: The millisecond prefix's width, in hex digits (48 bits: past the year 10,000).
_TIME_DIGITS = 12
_TIME_MAX = (1 << (4 * _TIME_DIGITS)) - 1


def dedup_key(ev: Event) -> str:
    """A stable identity for an ingested event: ingesting a file twice adds nothing twice.

    The event's time in milliseconds (hex), then a hash of all it says: a file's lines come in
    time order, so their keys land at the end of the index together. Random keys dirtied a page
    of it per line, and each 2,000-line batch wrote megabytes of WAL (the writer 2.5x slower).
    """
    body = codec.dumps_canonical(
        [ev.ts_unix, ev.kind, ev.session, ev.turn, ev.call, ev.tool, dict(ev.attrs)]
    )
    try:
        ms = min(max(int(ev.ts_unix * 1000), 0), _TIME_MAX)
    except (OverflowError, ValueError):  # inf, nan: no order to keep
        ms = 0
    return f"{ms:0{_TIME_DIGITS}x}{hashlib.blake2b(body, digest_size=16).hexdigest()}"


def legacy_key(key: str) -> str:
    """The key an earlier turnwatch kept for the same event (its hash alone)."""
    return key[_TIME_DIGITS:]


_KEYS_ROWS = (
    "SELECT session, ts_unix, kind, turn, call, tool, attrs_json FROM events WHERE session IN "
)
_KEYS_IN = "FROM ingested WHERE key IN (SELECT value FROM json_each(?))"


def ingested_keys(
    conn: sqlite3.Connection, sessions: list[str], *, legacy: bool = False
) -> dict[str, list[str]]:
    """session → the dedup keys its events were ingested under, recomputed from the rows (prune
    deletes them with the events); ``legacy``: each one's older form too (a ledger holding keys
    from before they led with the time). Native events were kept under no key: theirs match
    nothing. A row that does not give its key back leaves that key behind, and never takes
    another event's: a key names its session."""
    out: dict[str, list[str]] = {}
    for i in range(0, len(sessions), 500):  # under any build's bound on parameters
        part = sessions[i : i + 500]
        sql = f"{_KEYS_ROWS}({','.join('?' * len(part))})"
        rows = conn.execute(sql, codec.storable_rows(part))  # ids as the ledger keeps them
        for session, ts, kind, turn, call, tool, attrs in rows:
            try:
                ev = event_of(0, kind, session, ts, attrs, turn=turn, call=call, tool=tool)
            except UnreadableRow:  # damaged: its key is not known, and is left behind
                continue
            key = dedup_key(ev)
            keys = out.setdefault(session, [])
            keys.append(key)
            if legacy:
                keys.append(legacy_key(key))
    return out


def forget_keys(conn: sqlite3.Connection, keys: list[str], *, dry_run: bool = False) -> int:
    """Delete these dedup keys (or, dry, count them); returns how many there were."""
    if not keys:
        return 0
    text = codec.dumps_rows(keys)
    if dry_run:
        return int(conn.execute(f"SELECT count(*) {_KEYS_IN}", (text,)).fetchone()[0])
    return conn.execute(f"DELETE {_KEYS_IN}", (text,)).rowcount
