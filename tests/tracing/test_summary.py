"""The summary rows a writer keeps between batches never overwrite another writer's changes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import connect, write_batch
from turnwatch.tracing.summary import Summary


def batch(*events: Event) -> list[tuple[Event, str | None]]:
    return [(e, None) for e in events]


def test_another_writers_commit_is_read_before_the_next_batch(tmp_path: Path) -> None:
    """The runtime's writer keeps a processing session; the watchdog's writer clears it."""
    path = tmp_path / "ledger.sqlite3"
    runtime, watchdog = connect(path), connect(path)
    kept, other = Summary(), Summary()
    write_batch(runtime, kept, batch(Event(names.TURN_STARTED, "s", 1.0, turn="t")))
    write_batch(
        watchdog,
        other,
        batch(
            Event(names.TURN_SETTLED, "s", 2.0, turn="t", attrs={"outcome": "aborted"}),
            Event(names.PROCESSING_CLEARED, "s", 2.5, turn="t"),
        ),
    )
    # A late progress event of the same session, written by the first writer again.
    write_batch(
        runtime,
        kept,
        batch(Event(names.TOOL_PROGRESS, "s", 3.0, turn="t", call="c", tool="Grep")),
    )
    row = runtime.execute("SELECT processing, outcome, last_ts FROM sessions").fetchone()
    assert tuple(row) == (0, "aborted", 3.0)


def test_kept_rows_spare_the_reads(tmp_path: Path) -> None:
    """With no other writer, a batch reads no row it wrote itself."""
    conn = connect(tmp_path / "ledger.sqlite3")
    summary = Summary()
    statements: list[str] = []
    write_batch(conn, summary, batch(Event(names.TURN_STARTED, "s", 1.0, turn="t")))
    conn.set_trace_callback(statements.append)
    write_batch(conn, summary, batch(Event(names.PROCESSING_CLEARED, "s", 2.0, turn="t")))
    assert not [s for s in statements if s.startswith("SELECT * FROM sessions")]
    assert conn.execute("SELECT processing FROM sessions").fetchone()[0] == 0


def test_a_failed_batch_leaves_nothing_kept_ahead_of_the_file(tmp_path: Path) -> None:
    conn = connect(tmp_path / "ledger.sqlite3")
    summary = Summary()
    write_batch(conn, summary, batch(Event(names.TURN_STARTED, "s", 1.0, turn="t")))
    # The calls upsert fails, after the session's row was updated and written: rolled back.
    conn.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON calls WHEN NEW.call = 'boom' "
        "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
    )
    with pytest.raises(sqlite3.IntegrityError, match="disk on fire"):
        write_batch(
            conn,
            summary,
            batch(
                Event(names.PROCESSING_CLEARED, "s", 2.0, turn="t"),
                Event(names.TOOL_PROGRESS, "s", 2.5, turn="t", call="boom", tool="Grep"),
            ),
        )
    write_batch(conn, summary, batch(Event(names.TOOL_PROGRESS, "s", 3.0, turn="t", call="c")))
    assert conn.execute("SELECT processing FROM sessions").fetchone()[0] == 1
