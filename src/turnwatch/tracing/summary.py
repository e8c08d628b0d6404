"""Summary tables the ledger writer maintains: one row per session, one per call.

They are derived from the events and updated in the same transaction, so a reader never sees one
without the other; the view and the watchdog read them instead of replaying every event.
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import ClassVar

from turnwatch.runtime.events import Event, storable_text
from turnwatch.runtime.fold import (
    CALL_COLUMNS,
    SESSION_COLUMNS,
    CallState,
    Fold,
    SessionState,
    Step,
    Store,
)
from turnwatch.tracing import batchsql
from turnwatch.tracing.rows import read_events, row_damage

_SESSION_COLS = SESSION_COLUMNS
_CALL_COLS = CALL_COLUMNS
#: Columns added after schema 1: a writer adds what an older ledger lacks (see ledger.connect).
COLUMNS = {"sessions": _SESSION_COLS, "calls": _CALL_COLS}


#: Rows kept between batches (a row is about a kilobyte); past this, the writer drops them all
#: and reads what the next batch touches from the file again.
MAX_CACHED_ROWS = 4096


class Summary:
    """Applies events to the summary rows; the writer thread owns it.

    The rows are the :class:`~turnwatch.runtime.fold.Fold`'s state: the same rules that build
    spans and metrics decide what a row says.
    """

    SCHEMA: ClassVar[str] = f"""
CREATE TABLE IF NOT EXISTS sessions ({", ".join(_SESSION_COLS)}, PRIMARY KEY (session));
CREATE TABLE IF NOT EXISTS calls ({", ".join(_CALL_COLS)}, PRIMARY KEY (session, call));
CREATE INDEX IF NOT EXISTS calls_live_pids ON calls (pid) WHERE pid IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_procs_live ON calls (session) WHERE procs_live = 1;
CREATE INDEX IF NOT EXISTS sessions_processing ON sessions (processing);
-- What scans and views read, each bounded by what is live or recent, never by history:
-- the most recent sessions (`sessions`), a turn's session (`explain <turn>`), a session's
-- nested runs (`explain`), awaited calls
-- still open after their stop, calls with activity after their turn settled or a grant after
-- their stop.
CREATE INDEX IF NOT EXISTS sessions_recent ON sessions (last_ts);
CREATE INDEX IF NOT EXISTS sessions_by_turn ON sessions (turn);
CREATE INDEX IF NOT EXISTS sessions_children ON sessions (parent_session)
    WHERE parent_session IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_open_stopped ON calls (session)
    WHERE abort_ts IS NOT NULL AND ended_ts IS NULL;
CREATE INDEX IF NOT EXISTS calls_late ON calls (late_ts) WHERE late_ts IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_late_grant ON calls (late_grant_ts)
    WHERE late_grant_ts IS NOT NULL;
"""

    def __init__(self, max_rows: int = MAX_CACHED_ROWS) -> None:
        # Rows as this writer last wrote them, kept across batches so a batch reads only the rows
        # it has not seen. They are valid while no other connection has committed: another
        # writer (the watchdog beside the runtime) may change a row, and ``PRAGMA data_version``,
        # read inside the batch's write transaction, says whether one did.
        self._rows = Store()
        self._fold = Fold(self._rows)
        self._version: int | None = None
        self.max_rows = max_rows

    def forget(self) -> None:
        """Drop every kept row: the next batch reads what it touches afresh."""
        self._rows.sessions.clear()
        self._rows.calls.clear()
        self._version = None

    def apply(
        self,
        conn: sqlite3.Connection,
        events: Iterable[Event],
        read: Callable[[Step], Event] | None = None,
    ) -> list[Event]:
        """Update the rows ``events`` touch; call inside the batch's write transaction. Each
        event's step goes to ``read`` (spans, metrics), whose event (stamped with its span ids)
        is what this returns for the batch to record.

        If the transaction is then rolled back, call :meth:`forget`: the kept rows would be ahead
        of the file.
        """
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        rows = self._rows
        if version != self._version or len(rows.calls) + len(rows.sessions) > self.max_rows:
            self.forget()
        events = list(events)
        sids, pairs = self._prefetch(conn, events)
        fold = self._fold
        if read is None:
            for ev in events:
                fold(ev)
        else:
            events = [read(fold(ev)) for ev in events]
        # Write each row the batch touched once, however many events it saw. Every event's
        # session is folded; a call may not be (a session event naming one), and then has no
        # row unless it had one already, which is written back as it was.
        sessions, calls = rows.sessions, rows.calls
        _SESSION_UPSERT(conn, [_session_values(sessions[sid]) for sid in sids])
        _CALL_UPSERT(conn, [_call_values(calls[p]) for p in pairs if p in calls])
        # Our own commit does not move our data_version; another connection's does.
        self._version = version
        return events

    def _prefetch(
        self, conn: sqlite3.Connection, events: list[Event]
    ) -> tuple[set[str], set[tuple[str, str]]]:
        """Read the rows the batch touches that are not kept: one query per table. Returns
        the sessions and the calls the batch names."""
        rows = self._rows
        # Built in C (map, zip, attrgetter): these run per event.
        named = list(map(_SESSION_OF, events))
        sids = set(named)
        named_calls = set(zip(named, map(_CALL_OF, events), strict=True))
        pairs = {(sid, call) for sid, call in named_calls if call is not None}
        want_sessions = list(sids - rows.sessions.keys())
        want_calls = [p for p in pairs if p not in rows.calls]
        if not want_sessions and not want_calls:
            return sids, pairs
        raw = _raw_of(events)
        damaged: dict[str, str] = {}
        for r in _SESSIONS_OF(conn, want_sessions):
            d = dict(r)
            if (why := row_damage("sessions", d)) is not None:
                damaged.setdefault(d["session"], why)
                continue
            if raw:
                _restore(d, raw, _SESSION_TEXT)
            rows.sessions[d["session"]] = SessionState(**d)
        for r in _CALLS_OF(conn, want_calls):
            d = dict(r)
            if (why := row_damage("calls", d)) is not None:
                damaged.setdefault(d["session"], why)
                continue
            d["tool_class"] = d.pop("class")
            if raw:
                _restore(d, raw, _CALL_TEXT)
            rows.calls[(d["session"], d["call"])] = CallState(**d)
        for sid, why in damaged.items():
            self._fold_again(conn, sid, why, raw)
        return sids, pairs

    def _fold_again(
        self, conn: sqlite3.Connection, sid: str, why: str, raw: dict[str, str]
    ) -> None:
        """A session whose row (or a call's) is damaged (``tracing.rows``): its rows made again
        from its events, as they were made (the rows are the fold of the events), and written
        whole with the batch. Folded as they were, the batch raised, and every event of the
        session was lost from then on."""
        store = Store()
        fold = Fold(store)
        for _seq, ev in read_events(conn, session=sid, on_bad=lambda _bad: None):
            fold(ev)
        for s in store.sessions.values():  # its own: a fold makes a state of its event's only
            _restore_state(s, raw, _SESSION_TEXT)
            self._rows.sessions[s.session] = s
        for c in store.calls.values():
            _restore_state(c, raw, _CALL_TEXT)
            self._rows.calls[(c.session, c.call)] = c
        import logging  # here: the commands that only look import this module, never logging

        logging.getLogger("turnwatch.ledger").warning(
            "turnwatch ledger: %s: folded again from its events", why
        )


#: The ids a row holds that the fold compares with an event's (a session's turn, a call's tool).
_SESSION_TEXT = ("session", "turn", "parent_session")
_CALL_TEXT = ("session", "call", "turn", "tool")


def _raw_of(events: list[Event]) -> dict[str, str]:
    """The batch's ids that UTF-8 cannot carry (a lone surrogate), by the escaped text the file
    keeps of them (``storable_text``). A row read back holds the escaped text: folded as it is,
    its session would be another than its events' (a fresh state, the turn lost, written over
    the row) and its turn or tool another than theirs."""
    ids = {*map(_SESSION_OF, events), *map(_TURN_OF, events), *map(_CALL_OF, events)}
    ids.update(map(_TOOL_OF, events))
    ids.discard(None)
    out: dict[str, str] = {}
    for x in ids:
        if not x.isascii() and (kept := storable_text(x)) != x:
            out[kept] = x
    return out


def _restore(row: dict[str, object], raw: dict[str, str], cols: tuple[str, ...]) -> None:
    for col in cols:
        value = row[col]
        if isinstance(value, str) and value in raw:
            row[col] = raw[value]


def _restore_state(
    state: SessionState | CallState, raw: dict[str, str], cols: tuple[str, ...]
) -> None:
    """:func:`_restore` of a state folded from events read back."""
    for col in cols:
        value = getattr(state, col)
        if isinstance(value, str) and value in raw:
            setattr(state, col, raw[value])


_SESSION_UPSERT = batchsql.Insert("sessions", _SESSION_COLS, replace=True)
_CALL_UPSERT = batchsql.Insert("calls", _CALL_COLS, replace=True)
_SESSIONS_OF = batchsql.Lookup(
    "SELECT * FROM sessions WHERE session IN (SELECT value FROM json_each(?))",
    "SELECT * FROM sessions WHERE session = ?",
)
# A join on the pairs, not ``(session, call) IN (...)``: SQLite answers a row-value IN with a
# scan of the whole table, the join with a primary-key lookup per pair.
_CALLS_OF = batchsql.Lookup(
    "SELECT calls.* FROM json_each(?) AS k JOIN calls ON "
    "calls.session = json_extract(k.value, '$[0]') AND calls.call = json_extract(k.value, '$[1]')",
    "SELECT * FROM calls WHERE session = ? AND call = ?",
)
_SESSION_OF = operator.attrgetter("session")
_CALL_OF = operator.attrgetter("call")
_TURN_OF = operator.attrgetter("turn")
_TOOL_OF = operator.attrgetter("tool")
# A state → its values in column order (attrgetter: a tuple, built in C).
_session_values = operator.attrgetter(*_SESSION_COLS)
_call_values = operator.attrgetter(*(f.name for f in fields(CallState)))
