"""The ledger: real SQLite files, real writer processes, a real SIGKILL."""

from __future__ import annotations

import logging
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import wait_until
from turnwatch import names
from turnwatch.runtime.events import now_event
from turnwatch.tracing import view
from turnwatch.tracing.ledger import SCHEMA_VERSION, Ledger, LedgerError, connect, read_events
from turnwatch.tracing.paths import default_path
from turnwatch.watchdog.scan import scan

#: Columns 0.1.0 (schema 1) did not have.
NEW_SINCE_1 = {
    "calls": (
        "containment",
        "cgroup",
        "lingering",
        "procs_live",
        "abort_mono",
        "done_ts",
        "start_ticks",
        "boot_id",
        "cgroup_id",
    ),
    "sessions": ("rpc_ts", "walk_ts", "stop_mono", "runtime_start_ticks", "runtime_boot_id"),
}


def ev(kind: str, session: str = "s", **kw: object) -> object:
    return now_event(kind, session, **kw)  # type: ignore[arg-type]


def test_events_are_committed_in_order_with_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "ledger.sqlite3"
    ledger = Ledger(path)
    for i in range(5):
        ledger.append(
            now_event(names.TOOL_PROGRESS, "s", turn="t", call="c", tool="Grep", attrs={"i": i})
        )
    ledger.close()
    conn = connect(path, readonly=True)
    assert [e.attrs["i"] for _s, e in read_events(conn)] == [0, 1, 2, 3, 4]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )


def test_a_schema_1_ledger_is_read_as_it_is_and_upgraded_by_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    ledger = Ledger(path)
    ledger.append(now_event(names.TURN_STARTED, "s", turn="t"))
    ledger.append(now_event(names.TOOL_STARTED, "s", turn="t", call="c", tool="Bash"))
    ledger.close()
    # What 0.1.0 wrote: no containment columns, schema 1.
    raw = sqlite3.connect(path)
    raw.execute("DROP INDEX calls_procs_live")
    for table, cols in NEW_SINCE_1.items():
        for col in cols:
            raw.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
    raw.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()

    old = connect(path, readonly=True)
    (row,) = view.sessions(old)
    assert row.calls[0].containment is None
    assert row.calls[0].lingering == []
    assert row.calls[0].start_ticks is None
    assert row.calls[0].cgroup_id is None
    assert row.runtime_create_time is None
    # The watchdog's own queries name columns an older ledger lacks: they read as NULL.
    assert scan(old).findings == []
    old.close()

    ledger = Ledger(path)
    ledger.append(
        now_event(
            names.TOOL_FINISHED,
            "s",
            turn="t",
            call="c",
            tool="Bash",
            attrs={"outcome": "completed", "status": "ok", "lingering": [[4242, 1.5]]},
        )
    )
    ledger.close()
    new = connect(path, readonly=True)
    assert new.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    (row,) = view.sessions(new)
    assert row.calls[0].lingering == [(4242, 1.5)]
    assert row.calls[0].procs_live


def test_default_path_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TURNWATCH_LEDGER", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_path() == tmp_path / "turnwatch" / "ledger.sqlite3"
    monkeypatch.setenv("TURNWATCH_LEDGER", str(tmp_path / "x.db"))
    assert default_path() == tmp_path / "x.db"


def test_newer_schema_is_refused_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    Ledger(path).close()
    with sqlite3.connect(path) as c:
        c.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=r"ledger\.sqlite3: written by a newer turnwatch"):
        Ledger(path)
    assert path.read_bytes() == before


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE users (id INTEGER)")
    with pytest.raises(LedgerError, match=r"app\.db: not a turnwatch ledger \(tables: users\)"):
        Ledger(path)


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    path.write_bytes(b"this is not a database, it is a grocery list\n" * 100)
    with pytest.raises(LedgerError, match=r"ledger\.sqlite3: unreadable ledger"):
        Ledger(path)
    with pytest.raises(LedgerError, match="unreadable"):
        connect(path, readonly=True)


def test_a_locked_ledger_says_so_once_and_writes_what_waited_when_the_lock_goes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path, busy_timeout_s=0.05)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with caplog.at_level(logging.WARNING, logger="turnwatch.ledger"):
            ledger.append(now_event(names.TURN_STARTED, "s", turn="t"))
            assert not ledger.flush(timeout=1.0)  # waiting, not lost
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert ledger.lost == 0
    assert "cannot write (database is locked)" in caplog.text
    assert str(path) in caplog.text
    ledger.append(now_event(names.TURN_STARTED, "s", turn="t2"))
    ledger.close()
    assert ledger.written == 2  # what waited, then the next: the ledger works again


WRITER = textwrap.dedent("""
    import sys, time
    from turnwatch.runtime.events import now_event
    from turnwatch.tracing.ledger import Ledger
    ledger = Ledger(sys.argv[1])
    i = 0
    while True:
        for _ in range(50):
            ledger.append(now_event("tool.progress", "s", turn="t", call="c", tool="Bash",
                                    attrs={"i": i}))
            i += 1
        ledger.flush()
        print(i, flush=True)  # every event up to i is committed
        if len(sys.argv) > 2 and i >= int(sys.argv[2]):
            ledger.close()
            break
""")


def _readable(path: Path) -> bool:
    try:
        connect(path, readonly=True).close()
    except LedgerError:
        return False  # not there, or a writer is still creating it
    return True


def test_an_empty_file_is_not_a_ledger_yet(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    sqlite3.connect(path).close()  # what a reader sees while a writer creates the file
    with pytest.raises(LedgerError, match=r"ledger\.sqlite3: not a turnwatch ledger yet"):
        connect(path, readonly=True)


def test_writer_and_reader_processes_share_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "3000"], stdout=subprocess.DEVNULL
    )
    try:
        wait_until(lambda: _readable(path), what="the ledger to be created")
        seen = []
        while writer.poll() is None:
            conn = connect(path, readonly=True)  # readers never block the writer
            seen.append(conn.execute("SELECT count(*) FROM events").fetchone()[0])
            conn.close()
            time.sleep(0.01)
        assert writer.wait(timeout=30) == 0
    finally:
        writer.kill()
        writer.wait()
    assert seen == sorted(seen)  # each read saw a committed prefix
    conn = connect(path, readonly=True)
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 3000


def test_writer_killed_mid_run_keeps_every_committed_event(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    committed = 0
    try:
        while committed < 1000:
            committed = int(writer.stdout.readline())
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        writer.stdout.close()
    conn = connect(path, readonly=False)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    count = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    assert count >= committed
    assert [e.attrs["i"] for _s, e in read_events(conn, limit=committed)] == list(range(committed))


def test_two_writers_ingesting_the_same_events_store_each_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    events = [
        now_event(names.TOOL_PROGRESS, "s", turn="t", call="c", tool="Grep", attrs={"i": i})
        for i in range(3000)
    ]
    a, b = Ledger(path), Ledger(path)
    a.extend(events, dedup=True)  # both race to check and insert the same keys
    b.extend(events, dedup=True)
    a.close()
    b.close()
    assert a.lost == b.lost == 0
    conn = connect(path, readonly=True)
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 3000


def test_rows_written_by_the_stdlib_encoder_still_read(tmp_path: Path) -> None:
    """0.1.0 wrote attributes with json.dumps, which lets NaN and Infinity through."""
    path = tmp_path / "ledger.sqlite3"
    Ledger(path).close()
    conn = connect(path)
    conn.execute(
        "INSERT INTO events (ts_unix, session, kind, attrs_json) "
        "VALUES (1.0, 's', 'tool.progress', '{\"progress\": NaN, \"total\": Infinity}')"
    )
    ((_seq, event),) = read_events(conn)
    assert math.isnan(event.attrs["progress"])
    assert event.attrs["total"] == math.inf
