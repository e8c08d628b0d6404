"""Summary tables the ledger writer maintains: one row per session, one per call.

They are derived from the events and updated in the same transaction, so a reader never sees one
without the other; the view and the watchdog read them instead of replaying every event.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any, ClassVar

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import POLICY_OF, class_of

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
)


class Summary:
    """Applies events to the summary rows; the writer thread owns it."""

    SCHEMA: ClassVar[str] = f"""
CREATE TABLE IF NOT EXISTS sessions ({", ".join(_SESSION_COLS)}, PRIMARY KEY (session));
CREATE TABLE IF NOT EXISTS calls ({", ".join(_CALL_COLS)}, PRIMARY KEY (session, call));
CREATE INDEX IF NOT EXISTS calls_live_pids ON calls (pid) WHERE pid IS NOT NULL;
CREATE INDEX IF NOT EXISTS sessions_processing ON sessions (processing);
"""

    def __init__(self) -> None:
        # Rows touched by the current batch only. Nothing is kept between batches: another
        # writer (the watchdog beside the runtime) may have changed a row since, and the batch's
        # transaction (BEGIN IMMEDIATE) is what makes the fresh read consistent.
        self._sessions: dict[str, dict[str, Any]] = {}
        self._calls: dict[tuple[str, str], dict[str, Any]] = {}

    def forget(self) -> None:
        """Drop the rows of the last batch."""
        self._sessions.clear()
        self._calls.clear()

    def apply(self, conn: sqlite3.Connection, events: Iterable[Event]) -> None:
        """Update the rows ``events`` touch; call inside the batch's write transaction."""
        self.forget()
        events = list(events)
        self._prefetch(conn, events)
        sessions, calls = self._sessions, self._calls
        for ev in events:
            s = sessions.get(ev.session) or self._session(ev.session)
            if ev.ts_unix > (s["last_ts"] or 0.0):
                s["last_ts"] = ev.ts_unix
            if ev.call is not None:
                c = calls.get((ev.session, ev.call)) or self._call(ev)
                _apply_call(c, ev, s)
            if ev.kind in _SESSION_KINDS:
                _apply_session(s, ev)
        # Every row touched is in the two dicts: write each once, however many events it saw.
        conn.executemany(
            _upsert("sessions", _SESSION_COLS),
            [tuple(r[c] for c in _SESSION_COLS) for r in sessions.values()],
        )
        conn.executemany(
            _upsert("calls", _CALL_COLS), [tuple(r[c] for c in _CALL_COLS) for r in calls.values()]
        )
        self.forget()

    def _prefetch(self, conn: sqlite3.Connection, events: list[Event]) -> None:
        """Read every row the batch touches in a few queries, not one query per row."""
        sids = list({ev.session for ev in events})
        for i in range(0, len(sids), 500):
            part = sids[i : i + 500]
            for r in conn.execute(
                f"SELECT * FROM sessions WHERE session IN ({','.join('?' * len(part))})", part
            ):
                self._sessions[r["session"]] = dict(r)
        keys = list({(ev.session, ev.call) for ev in events if ev.call is not None})
        for i in range(0, len(keys), 400):
            pairs = keys[i : i + 400]
            sql = (
                "SELECT * FROM calls WHERE (session, call) IN (VALUES "
                + ",".join("(?,?)" for _ in pairs)
                + ")"
            )
            for r in conn.execute(sql, [x for key in pairs for x in key]):
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


def _upsert(table: str, cols: tuple[str, ...]) -> str:
    return (
        f"INSERT OR REPLACE INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    )


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
    elif kind == names.TOOL_PROGRESS:
        c["last_progress_ts"] = ts
    elif kind == names.TOOLS_ABORT_SENT:
        c["abort_ts"] = c["abort_ts"] or ts
    elif kind in _ENDS:
        if c["ended_ts"] is None:
            c["ended_ts"] = ts
            c["outcome"] = ev.attrs.get("outcome") or (
                "refused" if kind == names.TOOL_REFUSED else None
            )
        elif kind == names.TOOL_FINISHED:
            c["late_ts"] = ts  # a second end: a result that outlived the runtime's wait
    elif kind == names.PROCESS_REAPED:
        c["reaped_ts"] = ts
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
