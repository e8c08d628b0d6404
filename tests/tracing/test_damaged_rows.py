"""A damaged ledger, row by row. An event row no event can be made of (its attributes not a
JSON object, its time not a number, an id that is no text: a disk's damage, a hand's edit) is
left out and said, with its place; every other row is read. A summary row of other types than
the writer writes is skipped by every reader and said; the writer folds that session's events
again. Before, one such row raised from every reader (the services would not start, the watch
service ended, explain printed a traceback, prune could never run), and the writer lost every
later event of a session whose row was damaged.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from pathlib import Path

import pytest

from tests.watchdog.helpers import Recorder, pinned_ledger
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing import view
from turnwatch.tracing.arc import read_arc
from turnwatch.tracing.dedup import ingested_keys
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.tracing.ledger_follower import LedgerFollower
from turnwatch.tracing.prune import prune
from turnwatch.tracing.rows import UnreadableRow, damaged_summaries, lingering_of
from turnwatch.tracing.view import producer
from turnwatch.watchdog.scan import scan

#: Each way a row can be damaged, as SQL setting the columns of one row.
DAMAGE = {
    "attrs not JSON": "attrs_json = 'not json'",
    "attrs a list": "attrs_json = '[1, 2]'",
    "ts text": "ts_unix = 'yesterday'",
    "session a blob": "session = x'00ff'",
    "kind a blob": "kind = x'07'",
    "turn a blob": "turn = x'ff'",
    "mono_ns text": "mono_ns = 'soon'",
    "trace_id a blob": "trace_id = x'01'",
}


def damage(path: Path, what: str, seq: int) -> None:
    """Set one row's columns as no writer of turnwatch ever does (the file, as SQLite sees
    it, is sound: only the row's content is not an event)."""
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE events SET {DAMAGE[what]} WHERE seq = ?", (seq,))
    conn.close()


#: Objects whose pages stay whole: the file still opens as a ledger (its schema and meta).
_KEPT = ("sqlite_schema", "meta", "sqlite_autoindex_meta_1")


def break_pages(path: Path) -> None:
    """Overwrite every page of every table and index but the schema's and meta's with bytes
    that are no b-tree page: the file opens, and any read of its rows finds it malformed."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [
            p
            for (p,) in conn.execute(
                f"SELECT pageno FROM dbstat WHERE name NOT IN ({','.join('?' * len(_KEPT))})",
                _KEPT,
            )
        ]
    conn.close()
    with path.open("r+b") as f:
        for p in pages:
            f.seek((p - 1) * size)
            f.write(b"\xa5" * size)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite3"
    pinned_ledger(path)  # four events: runtime.started, turn.started, stop.clicked, rpc
    return path


@pytest.mark.parametrize("what", DAMAGE)
def test_read_events_says_which_row_and_why_then_reads_the_rest(ledger: Path, what: str) -> None:
    damage(ledger, what, 2)
    conn = connect(ledger, readonly=True)
    with pytest.raises(UnreadableRow) as raised:
        list(read_events(conn))
    assert raised.value.seq == 2
    assert "event 2" in str(raised.value)
    bad: list[UnreadableRow] = []
    seqs = [seq for seq, _ev in read_events(conn, on_bad=bad.append)]
    assert seqs == [1, 3, 4]
    assert [b.seq for b in bad] == [2]
    conn.close()


def test_a_mono_ns_past_64_bits_is_read_as_the_writer_stored_it(tmp_path: Path) -> None:
    """Not damage: the writer keeps one past 64 bits as a real (one past a double, as SQLite's
    JSON reader reads it, infinity)."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    for mono in (1 << 70, 10**400, 5):
        ledger.append(Event(names.TURN_STARTED, "s", 1.0, mono_ns=mono, turn="t"))
    ledger.close()
    conn = connect(path, readonly=True)
    assert [ev.mono_ns for _seq, ev in read_events(conn)] == [float(1 << 70), math.inf, 5]
    conn.close()


@pytest.mark.parametrize("what", ["attrs not JSON", "ts text", "kind a blob"])
def test_a_follower_reads_past_a_damaged_row_and_says_it_once(ledger: Path, what: str) -> None:
    damage(ledger, what, 3)
    seen: list[str] = []
    said: list[str] = []
    follower = LedgerFollower(ledger, lambda ev: seen.append(ev.kind), said.append)
    assert follower.poll() == 3
    assert seen == [names.RUNTIME_STARTED, names.TURN_STARTED, names.ABORT_RPC_RECEIVED]
    assert follower.unread is None  # the ledger is readable: one row of it is not
    assert len(said) == 1, said
    assert "event 3" in said[0], said
    assert str(ledger) in said[0], said
    assert follower.poll() == 0  # past it: not read, nor said, again
    assert len(said) == 1, said


def test_a_follower_without_a_voice_still_reads_past_it(ledger: Path) -> None:
    damage(ledger, "attrs not JSON", 1)
    seen: list[str] = []
    assert LedgerFollower(ledger, lambda ev: seen.append(ev.kind)).poll() == 3


def test_the_arc_and_the_keys_leave_a_damaged_row_out(ledger: Path) -> None:
    conn = connect(ledger, readonly=True)
    whole = read_arc(conn, "s")
    conn.close()
    assert [st.event for st in whole.steps] == [names.RUNTIME_STARTED, names.TURN_STARTED]
    assert whole.stops == 1
    damage(ledger, "attrs not JSON", 2)  # the turn.started
    damage(ledger, "ts text", 3)  # the stop.clicked
    conn = connect(ledger, readonly=True)
    arc = read_arc(conn, "s")  # read, not raised, without the two rows
    assert [st.event for st in arc.steps] == [names.RUNTIME_STARTED]
    assert arc.stops == 0
    assert len(ingested_keys(conn, ["s"])["s"]) == 2
    conn.close()


def test_who_wrote_a_session_is_asked_past_attributes_that_are_not_json(ledger: Path) -> None:
    damage(ledger, "attrs not JSON", 1)  # the runtime.started producer() reads
    conn = connect(ledger, readonly=True)
    assert producer(conn, "s") is None
    conn.close()


#: Each way a summary row can be damaged: (table, SQL setting its columns, what is said).
SUMMARY_DAMAGE = {
    "stop_ts text": ("sessions", "stop_ts = 'yesterday'", "its stop_ts is 'yesterday', not a"),
    "processing a blob": ("sessions", "processing = x'01'", "its processing is b'\\x01'"),
    "mode a number": ("sessions", "mode = 3", "its mode is 3, not text"),
    "pid text": ("calls", "pid = 'x'", "call 'c1': its pid is 'x', not an integer"),
    "lingering not JSON": ("calls", "lingering = 'x'", "its lingering is 'x', not JSON"),
}


def damage_summary(path: Path, what: str) -> str:
    table, change, said = SUMMARY_DAMAGE[what]
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {table} SET {change} WHERE session = 's'")
    conn.close()
    return said


def two_sessions(path: Path) -> None:
    """``s`` pinned, with a call (c1), and ``t`` pinned beside it."""
    pinned_ledger(path)
    rec = Recorder(path)
    rec.runtime("t")
    rec("turn.started", "t", 100, turn="t.t1")
    rec("stop.clicked", "t", 90, turn="t.t1")
    rec("tool.requested", "s", 95, turn="s.t1", call="c1", tool="Bash")
    rec.close()


@pytest.mark.parametrize("what", SUMMARY_DAMAGE)
def test_a_damaged_summary_row_is_skipped_by_every_reader_and_said(
    tmp_path: Path, what: str
) -> None:
    path = tmp_path / "ledger.sqlite3"
    two_sessions(path)
    said = damage_summary(path, what)
    conn = connect(path, readonly=True)
    shown = {r.session: r for r in view.sessions(conn)}
    table = SUMMARY_DAMAGE[what][0]
    if table == "sessions":
        assert set(shown) == {"t"}
    else:  # the session is read; the call is not
        assert set(shown) == {"s", "t"}
        assert shown["s"].calls == []
    found = scan(conn).findings  # a text stop_ts ended the scan with a TypeError
    assert "t" in {f.session for f in found}
    # A processing that is no integer does not say the session is processing.
    processing = [] if what == "processing a blob" else [{"processing": True}]
    for kw in ({}, *processing, {"session": "s"}):
        damaged = damaged_summaries(conn, **kw)  # type: ignore[arg-type]
        assert len(damaged) == 1, (kw, damaged)
        assert damaged[0].startswith("session 's'"), damaged
        assert said in damaged[0], damaged
    assert damaged_summaries(conn, session="t") == []
    conn.close()


def test_a_lingering_list_of_another_shape_keeps_its_pairs_only() -> None:
    assert lingering_of('[[12, 3.5], [1], ["x", 2], 7, [13, 4]]') == [(12, 3.5), (13, 4.0)]
    assert lingering_of("{}") == []
    assert lingering_of(None) == []


def test_prune_neither_judges_nor_deletes_a_damaged_session(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    then = 1_000_000.0
    for session in ("old", "bad"):
        ledger.append(Event(names.TURN_STARTED, session, then, turn=f"{session}.t1"))
        ledger.append(
            Event(
                names.TURN_SETTLED,
                session,
                then + 1,
                turn=f"{session}.t1",
                attrs={"outcome": "completed"},
            )
        )
        ledger.append(Event(names.PROCESSING_CLEARED, session, then + 2, turn=f"{session}.t1"))
    ledger.close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE sessions SET settled_ts = 'long ago' WHERE session = 'bad'")
    raw.close()
    conn = connect(path)
    done = prune(conn, then + 100)
    conn.close()
    assert done.sessions == 1
    with sqlite3.connect(path) as raw:
        left = [r[0] for r in raw.execute("SELECT session FROM sessions")]
    raw.close()
    assert left == ["bad"]  # kept whole: what cannot be read is not judged settled


@pytest.mark.parametrize("what", ["stop_ts text", "pid text", "lingering not JSON"])
def test_the_writer_folds_a_damaged_session_again_from_its_events(
    tmp_path: Path, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The summary rows are the fold of the events: a writer that meets a damaged one folds the
    session's events again and writes its rows whole, as a ledger never damaged has them.
    Before, the fold raised on it, and every event of that session was lost from then on, one
    log line each."""
    path, whole = tmp_path / "ledger.sqlite3", tmp_path / "whole.sqlite3"
    two_sessions(path)
    with sqlite3.connect(path) as src, sqlite3.connect(whole) as dst:
        src.backup(dst)  # the same ledger, never damaged
    src.close()
    dst.close()
    damage_summary(path, what)
    more = [
        Event(names.ABORT_RPC_RECEIVED, "s", 5.0, turn="s.t1"),
        Event(names.TOOL_STARTED, "s", 6.0, turn="s.t1", call="c1", tool="Bash"),
        Event(names.TOOL_FINISHED, "t", 7.0, turn="t.t1", call="c9", tool="Read"),
    ]
    for target in (whole, path):
        with caplog.at_level(logging.WARNING, logger="turnwatch.ledger"):
            caplog.clear()
            ledger = Ledger(target)
            ledger.extend(more)
            assert ledger.flush(timeout=20)
            ledger.close()
        assert (ledger.written, ledger.lost) == (3, 0)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert "session 's'" in said[0], said
    assert "folded again from its events" in said[0], said
    rows = {}
    for target in (whole, path):
        conn = connect(target, readonly=True)
        assert damaged_summaries(conn) == []
        rows[target] = [r.to_json() for r in view.sessions(conn)]
        conn.close()
    assert rows[path] == rows[whole]


def test_a_damaged_session_of_an_id_not_utf8_is_folded_again_as_one_session(
    tmp_path: Path,
) -> None:
    """Its rows keep the id escaped (``storable_text``); the batch's events carry it raw: folded
    again, the session is the batch's, not a second one beside it."""
    path = tmp_path / "ledger.sqlite3"
    sid = "x\udcff"
    ledger = Ledger(path)
    ledger.append(Event(names.TURN_STARTED, sid, 1.0, turn="t"))
    ledger.append(Event(names.STOP_CLICKED, sid, 2.0, turn="t"))
    ledger.close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE sessions SET stop_ts = 'x'")
    raw.close()
    ledger = Ledger(path)
    ledger.append(Event(names.ABORT_RPC_RECEIVED, sid, 3.0, turn="t"))
    ledger.close()
    assert ledger.lost == 0
    conn = connect(path, readonly=True)
    assert damaged_summaries(conn) == []
    (row,) = view.sessions(conn)
    conn.close()
    assert (row.stop_ts, row.last_ts) == (2.0, 3.0)
