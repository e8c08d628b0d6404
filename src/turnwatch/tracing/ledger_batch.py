"""One batch of events into the ledger: one write transaction, the ingested ones' dedup keys
checked inside it, the summaries folded, one statement per table (:mod:`batchsql`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Step
from turnwatch.tracing import batchsql, codec
from turnwatch.tracing.dedup import legacy_key
from turnwatch.tracing.ledger_file import META_DEDUP_LEGACY, get_meta
from turnwatch.tracing.summary import Summary

__all__ = ["write_batch"]


def _rows(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """The ``events`` rows of ``events``, in :data:`_EVENT_COLS` order."""
    # One expression, no call per event but the attributes' encoding: this runs per event.
    dumps = codec.dumps_attrs
    return [
        (
            ev.ts_unix,
            ev.mono_ns,
            ev.session,
            ev.turn,
            ev.call,
            ev.tool,
            ev.kind,
            dumps(ev.attrs) if ev.attrs else "{}",
            ev.trace_id,
            ev.span_id,
        )
        for ev in events
    ]


_EVENT_COLS = (
    "ts_unix",
    "mono_ns",
    "session",
    "turn",
    "call",
    "tool",
    "kind",
    "attrs_json",
    "trace_id",
    "span_id",
)
_INSERT_EVENTS = batchsql.Insert("events", _EVENT_COLS)
_INSERT_KEYS = batchsql.Insert("ingested", ("key",))
# Keys are hex digests: never a NUL, and one aggregated row answers the whole batch.
_SEEN_KEYS = (
    "SELECT json_group_array(key) FROM ingested WHERE key IN (SELECT value FROM json_each(?))"
)


def write_batch(
    conn: sqlite3.Connection,
    summary: Summary,
    batch: list[tuple[Event, str | None]],
    read: Callable[[Step], Event] | None = None,
) -> int:
    """Insert a batch and update the summaries in one transaction; returns rows added.

    Ingested events (with a dedup key) already in the ledger are skipped. The check runs inside
    the write transaction, so two writers ingesting the same lines cannot both pass it. Only the
    events it accepts are folded and given to ``read`` (spans, metrics: it returns the event to
    record, stamped): a file ingested twice builds its spans once. Each table gets one statement
    per batch (see :mod:`batchsql`).
    """
    # One pass in C: the events, and whether any carries a key (native events carry none).
    evs, keys = zip(*batch, strict=True) if batch else ((), ())
    native = keys.count(None) == len(keys)
    events: list[Event] = list(evs)
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Native events: nothing to check, the whole batch is fresh.
        if not native:
            events = _unseen(conn, batch, [k for k in keys if k is not None])
        if events:
            events = summary.apply(conn, events, read)
            _INSERT_EVENTS(conn, _rows(events))
        conn.execute("COMMIT")
    except BaseException:
        summary.forget()  # its rows are ahead of the file now
        # SQLite ends the transaction itself on some errors (a full disk): a ROLLBACK then
        # raises "no transaction is active" and hides the real cause.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return len(events)


def _unseen(
    conn: sqlite3.Connection, batch: list[tuple[Event, str | None]], keys: list[str]
) -> list[Event]:
    """The batch's events not in the ledger yet; records the new keys."""
    legacy = get_meta(conn, META_DEDUP_LEGACY) is not None
    asked = [*keys, *map(legacy_key, keys)] if legacy else keys
    (found,) = conn.execute(_SEEN_KEYS, (codec.dumps_rows(asked),)).fetchone()
    seen: set[str] = set(codec.loads(found))
    fresh: list[Event] = []
    new_keys: list[tuple[str]] = []
    for ev, key in batch:
        if key is not None:
            if key in seen or (legacy and legacy_key(key) in seen):
                continue
            seen.add(key)  # the same line twice in one batch counts once too
            new_keys.append((key,))
        fresh.append(ev)
    # In key order: each page of the index is changed once, in one pass, not visited back and
    # forth (a batch of many sessions' lines spreads its keys over the index). The writer with
    # keys, sorted against not, on a throttled 2-core VM: faster in five of six pairs, -3 % to
    # +41 %, median +25 % (#31).
    _INSERT_KEYS(conn, sorted(new_keys))
    return fresh
