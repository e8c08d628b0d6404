"""Summary tables the ledger writer maintains: one row per session, one per call.

They are derived from the events and updated in the same transaction, so a reader never sees one
without the other; the view and the watchdog read them instead of replaying every event.
"""

from __future__ import annotations

import operator
import sqlite3
from collections.abc import Iterable
from typing import Any, ClassVar

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import POLICY_OF, class_of
from turnwatch.tracing import batchsql, codec

_SESSION_COLS = (
    "session",
    "runtime_pid",
    "runtime_create_time",
    "control",
    "mode",
    "turn",
    "turn_started",
    "processing",
    "stop_ts",
    "stop_source",
    "rpc_pending",
    "settled_ts",
    "outcome",
    "cleared_ts",
    "last_ts",
)
_CALL_COLS = (
    "session",
    "call",
    "turn",
    "tool",
    "class",
    "policy",
    "requested_ts",
    "started_ts",
    "pid",
    "create_time",
    "abort_ts",
    "ended_ts",
    "outcome",
    "last_progress_ts",
    "prompt_open",
    "reaped_ts",
    "late_ts",
    "granted_ts",
    "containment",
    "cgroup",
    "lingering",
    "procs_live",
)
#: Columns added after schema 1: a writer adds them to an older ledger (see ledger.connect).
CALL_COLS_SINCE_2 = ("containment", "cgroup", "lingering", "procs_live")


#: Rows kept between batches (a row is about a kilobyte); past this, the writer drops them all
#: and reads what the next batch touches from the file again.
MAX_CACHED_ROWS = 4096


class Summary:
    """Applies events to the summary rows; the writer thread owns it."""

    SCHEMA: ClassVar[str] = f"""
CREATE TABLE IF NOT EXISTS sessions ({", ".join(_SESSION_COLS)}, PRIMARY KEY (session));
CREATE TABLE IF NOT EXISTS calls ({", ".join(_CALL_COLS)}, PRIMARY KEY (session, call));
CREATE INDEX IF NOT EXISTS calls_live_pids ON calls (pid) WHERE pid IS NOT NULL;
CREATE INDEX IF NOT EXISTS calls_procs_live ON calls (session) WHERE procs_live = 1;
CREATE INDEX IF NOT EXISTS sessions_processing ON sessions (processing);
"""

    def __init__(self, max_rows: int = MAX_CACHED_ROWS) -> None:
        # Rows as this writer last wrote them, kept across batches so a batch reads only the rows
        # it has not seen. They are valid while no other connection has committed: another
        # writer (the watchdog beside the runtime) may change a row, and ``PRAGMA data_version``,
        # read inside the batch's write transaction, says whether one did.
        self._sessions: dict[str, dict[str, Any]] = {}
        self._calls: dict[tuple[str, str], dict[str, Any]] = {}
        self._version: int | None = None
        self.max_rows = max_rows

    def forget(self) -> None:
        """Drop every kept row: the next batch reads what it touches afresh."""
        self._sessions.clear()
        self._calls.clear()
        self._version = None

    def apply(self, conn: sqlite3.Connection, events: Iterable[Event]) -> None:
        """Update the rows ``events`` touch; call inside the batch's write transaction.

        If the transaction is then rolled back, call :meth:`forget`: the kept rows would be ahead
        of the file.
        """
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        if version != self._version or len(self._calls) + len(self._sessions) > self.max_rows:
            self.forget()
        events = list(events)
        self._prefetch(conn, events)
        sessions, calls = self._sessions, self._calls
        touched_sessions: dict[str, dict[str, Any]] = {}
        touched_calls: dict[tuple[str, str], dict[str, Any]] = {}
        for ev in events:
            s = sessions.get(ev.session) or self._session(ev.session)
            touched_sessions[ev.session] = s
            if s["last_ts"] is None or ev.ts_unix > s["last_ts"]:
                s["last_ts"] = ev.ts_unix
            if ev.call is not None:
                key = (ev.session, ev.call)
                c = calls.get(key) or self._call(ev)
                touched_calls[key] = c
                _apply_call(c, ev, s)
            if ev.kind in _SESSION_KINDS:
                _apply_session(s, ev)
        # Write each touched row once, however many events it saw.
        _SESSION_UPSERT(conn, map(_session_values, touched_sessions.values()))
        _CALL_UPSERT(conn, map(_call_values, touched_calls.values()))
        # Our own commit does not move our data_version; another connection's does.
        self._version = version

    def _prefetch(self, conn: sqlite3.Connection, events: list[Event]) -> None:
        """Read the rows the batch touches that are not kept: one query per table."""
        sids = list({ev.session for ev in events} - self._sessions.keys())
        for r in _SESSIONS_OF(conn, sids):
            self._sessions[r["session"]] = dict(r)
        pairs = {(ev.session, ev.call) for ev in events if ev.call is not None}
        for r in _CALLS_OF(conn, [p for p in pairs if p not in self._calls]):
            self._calls[(r["session"], r["call"])] = dict(r)

    def _session(self, session: str) -> dict[str, Any]:
        row = self._sessions.get(session)
        if row is None:  # not prefetched: a new session
            row = dict.fromkeys(_SESSION_COLS)
            row.update(session=session, processing=0, rpc_pending=0)
            self._sessions[session] = row
        return row

    def _call(self, ev: Event) -> dict[str, Any]:
        assert ev.call is not None
        key = (ev.session, ev.call)
        row = self._calls.get(key)
        if row is None:  # not prefetched: a new call
            row = dict.fromkeys(_CALL_COLS)
            row.update(session=ev.session, call=ev.call, turn=ev.turn, tool=ev.tool, prompt_open=0)
            self._calls[key] = row
        return row


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
# A row dict → its values in column order (itemgetter: a tuple, built in C).
_session_values = operator.itemgetter(*_SESSION_COLS)
_call_values = operator.itemgetter(*_CALL_COLS)


_SESSION_KINDS = frozenset(
    {
        names.RUNTIME_STARTED,
        names.TURN_STARTED,
        names.STOP_CLICKED,
        names.ABORT_RPC_RECEIVED,
        names.ABORT_RPC_RETURNED,
        names.TURN_SETTLED,
        names.PROCESSING_CLEARED,
    }
)


def _apply_session(s: dict[str, Any], ev: Event) -> None:
    kind, ts = ev.kind, ev.ts_unix
    if kind == names.RUNTIME_STARTED:
        s["runtime_pid"] = ev.attrs.get("pid")
        s["runtime_create_time"] = ev.attrs.get("create_time")
        s["control"] = ev.attrs.get("control")
        s["mode"] = ev.attrs.get("mode") or s["mode"]
        return
    if ev.turn is not None and kind != names.TURN_STARTED and s["turn"] not in (None, ev.turn):
        return  # an event of an older turn (a late result) does not move the session
    if kind == names.TURN_STARTED:
        s.update(
            turn=ev.turn,
            turn_started=ts,
            processing=1,
            stop_ts=None,
            stop_source=None,
            rpc_pending=0,
            settled_ts=None,
            outcome=None,
            cleared_ts=None,
        )
    elif kind in (names.STOP_CLICKED, names.ABORT_RPC_RECEIVED):
        if s["stop_ts"] is None:
            s["stop_ts"] = ts
            s["stop_source"] = ev.attrs.get("source")
        if kind == names.ABORT_RPC_RECEIVED:
            s["rpc_pending"] = 1
    elif kind == names.ABORT_RPC_RETURNED:
        s["rpc_pending"] = 0
    elif kind == names.TURN_SETTLED:
        if s["settled_ts"] is None:
            s["settled_ts"] = ts
            s["outcome"] = ev.attrs.get("outcome")
    elif kind == names.PROCESSING_CLEARED:
        s["processing"] = 0
        s["cleared_ts"] = ts


_ENDS = {names.TOOL_FINISHED, names.TOOL_RESULT_DISCARDED, names.TOOL_REFUSED}


def _apply_call(c: dict[str, Any], ev: Event, s: dict[str, Any]) -> None:
    kind, ts = ev.kind, ev.ts_unix
    if kind == names.TOOL_REQUESTED:
        cls = class_of(ev.tool or "", ev.attrs.get("class"))
        c.update(requested_ts=ts, **{"class": cls.value}, policy=POLICY_OF[cls].value)
    elif kind == names.PERMISSION_REQUESTED:
        c["prompt_open"] = 1
    elif kind in (names.PERMISSION_GRANTED, names.PERMISSION_DENIED, names.PERMISSION_CANCELLED):
        c["prompt_open"] = 0
        if kind == names.PERMISSION_GRANTED:
            c["granted_ts"] = ts
    elif kind == names.TOOL_STARTED:
        c["started_ts"] = ts
        if ev.attrs.get("pid") is not None:
            c["pid"] = ev.attrs.get("pid")
            c["create_time"] = ev.attrs.get("create_time")
            c["procs_live"] = 1
        c["containment"] = ev.attrs.get("containment")
        c["cgroup"] = ev.attrs.get("cgroup")
        if c["cgroup"] is not None:
            c["procs_live"] = 1
    elif kind == names.TOOL_PROGRESS:
        c["last_progress_ts"] = ts
    elif kind == names.TOOLS_ABORT_SENT:
        c["abort_ts"] = c["abort_ts"] or ts
    elif kind in _ENDS:
        if kind == names.TOOL_FINISHED and "status" in ev.attrs:
            # The host's own answer: it returned once its processes were gone, except those
            # it names as lingering (they belong to the call until someone ends them).
            left = ev.attrs.get("lingering")
            c["lingering"] = codec.dumps_rows(list(left)) if left else None
            c["procs_live"] = 1 if left else 0
        if c["ended_ts"] is None:
            c["ended_ts"] = ts
            c["outcome"] = ev.attrs.get("outcome") or (
                "refused" if kind == names.TOOL_REFUSED else None
            )
        elif kind == names.TOOL_FINISHED:
            c["late_ts"] = ts  # a second end: a result that outlived the runtime's wait
    elif kind == names.PROCESS_REAPED:
        c["reaped_ts"] = ts
        c["procs_live"] = 0
    if c["class"] is None:  # a foreign stream that never sent tool.requested
        cls = class_of(ev.tool or "")
        c["class"], c["policy"] = cls.value, POLICY_OF[cls].value
    if (
        s["settled_ts"] is not None
        and c["turn"] == s["turn"]
        and kind in (names.TOOL_STARTED, names.TOOL_PROGRESS, names.TOOL_FINISHED)
        and ts > s["settled_ts"]
    ):
        c["late_ts"] = c["late_ts"] or ts
