"""What the ledger lost it says where it lost it: past the backlog's bound, a ``ledger.gap`` event
per session (how many, from when to when) once the file can be written again; ``sessions`` and
``explain`` then mark the session, and a state the gap would have made up (a settled stop shown
pinned) is ``unknown``. A real tmpfs, filled and grown."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import turnwatch
from tests.tracing.test_ledger_faults import events, fill, small_fs  # noqa: F401 - the fixture
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold import Fold
from turnwatch.runtime.model import FindingKind, SessionStatus
from turnwatch.tracing import ledger as ledger_module
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.watchdog.scan import scan


def stop_of(session: str, t0: float) -> list[Event]:
    """A turn stopped and settled: its spinner cleared at ``t0 + 2``."""
    return [
        Event(names.TURN_STARTED, session, t0, turn="t1"),
        Event(names.ABORT_RPC_RECEIVED, session, t0 + 1, turn="t1"),
        Event(names.TURN_SETTLED, session, t0 + 1.5, turn="t1", attrs={"outcome": "aborted"}),
        Event(names.PROCESSING_CLEARED, session, t0 + 2, turn="t1"),
    ]


def test_lost_events_leave_a_gap_marked_where_they_were_and_no_state_made_up(
    small_fs: Path,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ledger_module, "BACKLOG_MAX", 500)
    path = small_fs / "ledger.sqlite3"
    ledger = Ledger(path)
    try:
        adr = stop_of("adr", 100.0)
        ledger.extend(adr[:2])  # its turn and its stop, written
        assert ledger.flush(timeout=10)
        fill(small_fs / "filler")
        ledger.extend(adr[2:])  # its settle and its clear: the oldest of what waits
        ledger.extend(events(1500, start=200))  # session "s": its first 1000 go too
        assert not ledger.flush(timeout=1.0)
        assert ledger.lost == 1002
        subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
        assert ledger.flush(timeout=20)
    finally:
        ledger.close()
    conn = connect(path, readonly=True)
    written = [ev for _seq, ev in read_events(conn)]
    gaps = {ev.session: ev for ev in written if ev.kind == names.LEDGER_GAP}
    assert {s: g.attrs[names.K_LOST] for s, g in gaps.items()} == {"adr": 2, "s": 1000}
    assert (gaps["adr"].attrs[names.K_FROM_TS], gaps["adr"].attrs[names.K_TO_TS]) == (101.5, 102)
    assert (gaps["s"].attrs[names.K_FROM_TS], gaps["s"].attrs[names.K_TO_TS]) == (200, 1199)
    # Where the events would have been: after what was written, before what survived.
    kinds = [ev.kind for ev in written]
    assert kinds[:2] == [names.TURN_STARTED, names.ABORT_RPC_RECEIVED]
    assert set(kinds[2:4]) == {names.LEDGER_GAP}
    assert [ev.ts_unix for ev in written[4:]] == [float(i) for i in range(1200, 1700)]

    (adr_row,) = view.sessions(conn, only="adr", now=10_000.0)
    assert adr_row.state is SessionStatus.UNKNOWN  # not pinned: its settle is what was lost
    assert adr_row.gap_lost == 2
    assert not [
        f for f in scan(conn, now=10_000.0).findings if f.kind == FindingKind.PINNED_SESSION
    ]
    listed = turnwatch("sessions", "--ledger", str(path), env={"COLUMNS": "200"})
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if "adr" in ln)
    assert "unknown" in line
    assert "ledger gap: 2" in line
    told = turnwatch("explain", "adr", "--ledger", str(path))
    assert told.returncode == 0, told.stderr
    assert "the ledger lost 2 event(s) of this session" in " ".join(told.stdout.split())


def test_a_turn_after_the_gap_is_known_again() -> None:
    fold = Fold()
    gap = Event(names.LEDGER_GAP, "a", 5.0, attrs={names.K_LOST: 3, names.K_TO_TS: 5.0})
    fold.feed([*stop_of("a", 1.0)[:2], gap])
    s = fold.sessions["a"]
    row = {f: getattr(s, f) for f in s.__slots__}
    assert view.judge(row, 100.0, view.Thresholds())[0] is SessionStatus.UNKNOWN
    fold.feed(stop_of("a", 10.0))  # a turn begun, stopped and cleared after the gap
    row = {f: getattr(s, f) for f in s.__slots__}
    assert view.judge(row, 100.0, view.Thresholds())[0] is SessionStatus.IDLE
    assert s.gap_lost == 3  # the history still has its gap
