"""Retention over any ledger: a prune deletes exactly the sessions settled before its horizon
that nobody keeps (not processing, no open finding, no call a process of which lives), every
row of them (events, calls, dedup keys), and not one byte of any other session; a dry run
says what the prune then does. Real SQLite files; which recorded pids live is the caller's
process table, given here as a set."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.tracing.prune import prune
from turnwatch.tracing.view import CallView

HORIZON = 1e9 + 1000
_SESSION = st.fixed_dictionaries(
    {
        "old": st.booleans(),
        "settled": st.booleans(),
        # A Bash call: none; ended by a host that waited for its processes; or ended saying
        # nothing of them (a foreign runtime), its recorded pid alive or not.
        "call": st.sampled_from(["none", "waited", "silent_dead", "silent_alive", "running"]),
        "kept": st.booleans(),
        "ingested": st.booleans(),
    }
)
ALIVE = 4242


def _events(sid: str, s: dict[str, Any]) -> list[Event]:
    t0 = 1e9 if s["old"] else 1e9 + 2000
    turn = f"{sid}.t1"
    evs = [Event(names.TURN_STARTED, sid, t0, turn=turn)]
    if s["call"] != "none":
        c = f"{sid}.c1"
        pid = ALIVE if s["call"] == "silent_alive" else 99

        def of_call(kind: str, dt: float, attrs: dict[str, Any] | None = None) -> Event:
            return Event(kind, sid, t0 + dt, turn=turn, call=c, tool="Bash", attrs=attrs or {})

        evs += [
            of_call(names.TOOL_REQUESTED, 1),
            of_call(names.TOOL_STARTED, 2, {"pid": pid, "create_time": 5.0}),
        ]
        if s["call"] == "waited":
            evs.append(of_call(names.TOOL_FINISHED, 3, {"outcome": "completed", "status": "ok"}))
        elif s["call"] != "running":
            evs.append(of_call(names.TOOL_FINISHED, 3, {"outcome": "completed"}))
    if s["settled"]:
        done = {"outcome": "completed"}
        evs += [
            Event(names.TURN_SETTLED, sid, t0 + 4, turn=turn, attrs=done),
            Event(names.PROCESSING_CLEARED, sid, t0 + 5, turn=turn),
        ]
    return evs


def _rows(conn: sqlite3.Connection, sid: str) -> list[tuple[Any, ...]]:
    """Every row the ledger holds of one session, its dedup keys included."""
    out: list[tuple[Any, ...]] = []
    for table in ("sessions", "calls", "events"):
        out += [tuple(r) for r in conn.execute(f"SELECT * FROM {table} WHERE session = ?", [sid])]
    return out


def _alive(c: CallView) -> bool:
    return c.pid == ALIVE and c.create_time == 5.0


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sessions=st.lists(_SESSION, min_size=1, max_size=8), dry_first=st.booleans())
def test_a_prune_deletes_exactly_what_nobody_keeps_and_nothing_else(
    sessions: list[dict[str, Any]], dry_first: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite3"
        ledger = Ledger(path)
        ids = [f"s{i}" for i in range(len(sessions))]
        for sid, s in zip(ids, sessions, strict=True):
            ledger.extend(_events(sid, s), dedup=s["ingested"])
        ledger.close()
        conn = connect(path)
        before = {sid: _rows(conn, sid) for sid in ids}
        keys_before = conn.execute("SELECT count(*) FROM ingested").fetchone()[0]
        keep = {sid for sid, s in zip(ids, sessions, strict=True) if s["kept"]}
        # A call nobody saw end whose recorded process is gone keeps nothing: no process of
        # it lives that anyone could prove (or signal).
        gone = {
            sid
            for sid, s in zip(ids, sessions, strict=True)
            if s["old"] and s["settled"] and sid not in keep and s["call"] != "silent_alive"
        }
        dry = prune(conn, HORIZON, keep=keep, dry_run=True, live=_alive) if dry_first else None
        done = prune(conn, HORIZON, keep=keep, live=_alive)
        assert done.sessions == len(gone)
        if dry is not None:
            assert (dry.sessions, dry.calls, dry.events, dry.keys) == (
                done.sessions,
                done.calls,
                done.events,
                done.keys,
            )
        for sid in ids:
            assert _rows(conn, sid) == ([] if sid in gone else before[sid]), sid
        keys_after = conn.execute("SELECT count(*) FROM ingested").fetchone()[0]
        assert keys_before - keys_after == done.keys
        assert done.events == sum(len(before[s]) for s in gone) - done.sessions - done.calls
        conn.close()
