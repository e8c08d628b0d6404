"""Scans and views cost what is live, not the ledger's history: every query the watchdog's scan,
``sessions`` (recent, ``--pinned``), ``explain``, the scrape-time gauges and the live page run is
read through an index. A full scan of ``calls``, ``sessions`` or ``events`` fails this test; a
scan of a partial index (rows that are live or anomalous, nothing else) or of the recency index
under a ``LIMIT`` is what is allowed. Real SQLite plans of a real ledger's queries, as run."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from turnwatch import names
from turnwatch.cli import waterfall
from turnwatch.runtime.events import Event
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.watchdog import gauges
from turnwatch.watchdog.scan import DEFAULT_CONFIG, annotate_findings, scan

TABLES = ("calls", "sessions", "events")


def history(path: Path) -> None:
    """Settled sessions, and live ones with every kind of row a scan looks for: a call whose
    recorded pid is alive (ours), an awaited call open after its stop, a late grant, activity
    after settlement, a nested run."""
    me = psutil.Process()
    evs: list[Event] = []
    for i in range(300):
        s, t = f"old{i}", f"old{i}.t1"
        evs += [
            Event(names.TURN_STARTED, s, 1.0 + i, turn=t),
            Event(names.TOOL_REQUESTED, s, 1.1 + i, turn=t, call=f"{t}.c1", tool="Read"),
            Event(names.TOOL_FINISHED, s, 1.2 + i, turn=t, call=f"{t}.c1", tool="Read"),
            Event(names.TURN_SETTLED, s, 1.3 + i, turn=t, attrs={"outcome": "completed"}),
            Event(names.PROCESSING_CLEARED, s, 1.4 + i, turn=t),
        ]
    t = "live.t1"
    evs += [
        Event(names.RUNTIME_STARTED, "live", 900.0, attrs={"pid": 1, "create_time": 1.0}),
        Event(names.TURN_STARTED, "live", 900.0, turn=t),
        Event(names.TOOL_REQUESTED, "live", 900.1, turn=t, call="p", tool="Bash"),
        Event(
            names.TOOL_STARTED,
            "live",
            900.2,
            turn=t,
            call="p",
            tool="Bash",
            attrs={"pid": os.getpid(), "create_time": me.create_time()},
        ),
        Event(names.TOOL_REQUESTED, "live", 900.3, turn=t, call="w", tool="Write"),
        Event(names.TOOL_STARTED, "live", 900.4, turn=t, call="w", tool="Write"),
        Event(names.TOOL_REQUESTED, "live", 900.5, turn=t, call="g", tool="Write"),
        Event(names.PERMISSION_REQUESTED, "live", 900.6, turn=t, call="g", tool="Write"),
        Event(names.ABORT_RPC_RECEIVED, "live", 901.0, turn=t),
        Event(names.TOOLS_ABORT_SENT, "live", 901.1, turn=t, call="w", tool="Write"),
        Event(names.PERMISSION_GRANTED, "live", 902.0, turn=t, call="g", tool="Write"),
        Event(
            names.TURN_STARTED, "child", 900.5, turn="child.t1", attrs={"parent_session": "live"}
        ),
    ]
    ledger = Ledger(path)
    ledger.extend(evs)
    ledger.close()


@pytest.fixture
def traced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[sqlite3.Connection, list[str]]]:
    path = tmp_path / "ledger.sqlite3"
    history(path)
    said: list[str] = []

    def opened(*args: object, **kw: object) -> sqlite3.Connection:
        conn = connect(path, readonly=True)
        conn.set_trace_callback(said.append)
        return conn

    monkeypatch.setattr(gauges, "connect", opened)
    conn = opened()
    yield conn, said
    conn.close()


def plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    return [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]


def partial_indexes(conn: sqlite3.Connection) -> set[str]:
    return {
        r[0]
        for r in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'")
        if r[1] and " WHERE " in r[1].upper()
    }


def full_scans(conn: sqlite3.Connection, sql: str) -> list[str]:
    partial = partial_indexes(conn)
    bad = []
    for step in plan(conn, sql):
        m = re.match(r"SCAN (\w+)(?: AS \w+)?(?: USING (?:COVERING )?INDEX (\w+))?", step)
        if m is None:
            continue
        table = m.group(1)
        index = m.group(2)
        aliases = {"c": "calls", "s": "sessions"}
        if aliases.get(table, table) not in TABLES:
            continue
        if index in partial or (index == "sessions_recent" and " LIMIT " in sql.upper()):
            continue
        bad.append(step)
    return bad


def test_every_query_of_a_scan_and_the_views_reads_through_an_index(
    traced: tuple[sqlite3.Connection, list[str]],
) -> None:
    conn, said = traced
    result = scan(conn, cfg=DEFAULT_CONFIG, now=1000.0)
    assert {f.kind for f in result.findings} >= {"await_overdue", "permission_after_stop"}
    view.sessions(conn, limit=50)
    view.sessions(conn, processing=True)
    view.live_and_recent(conn, 50)
    annotate_findings(conn, processing=True)
    annotate_findings(conn, limit=50)
    found = view.find_turn(conn, "live.t1")
    assert found == ("live", "live.t1")
    waterfall.build(conn, "live", "live.t1", now=1000.0)
    gauges.live_state(Path("unused"))
    queries = {q for q in said if q.lstrip().upper().startswith("SELECT")}
    assert len(queries) > 10  # the test saw the queries it means to judge
    bad = {q: steps for q in sorted(queries) if (steps := full_scans(conn, q))}
    assert bad == {}
