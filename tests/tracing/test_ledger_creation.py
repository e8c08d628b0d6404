"""A reader that looks while a writer is creating the ledger: it is told "not a ledger yet" and
takes nothing from the writer. Real SQLite files and the real writer; the interleaving (the
reader's look landing between the writer's switch to WAL and its schema commit) is forced
by running the writer's first steps inside the reader's open, as a loaded machine schedules
them (seen: `watch` started before any ledger, two CPU burners beside it, exit 2 with
"unreadable ledger (disk I/O error)" in 4 runs of 8)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tracing.test_ledger_faults import events
from turnwatch.tracing import ledger_file
from turnwatch.tracing.ledger import Ledger, LedgerError, LedgerNotReady, connect, read_events


@pytest.fixture
def creating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, list[sqlite3.Connection]]]:
    """A path whose reader's open lands inside a writer's creating transaction: WAL on, the
    first of its schema written and not yet committed (the writer's -wal open, and used)."""
    path = tmp_path / "ledger.sqlite3"
    sqlite3.connect(path).close()  # the empty file a writer's connect leaves first
    real = ledger_file._open_readonly  # noqa: SLF001 - the seam the interleaving needs
    held: list[sqlite3.Connection] = []

    def open_while_a_writer_creates(p: Path, busy_timeout_s: float) -> sqlite3.Connection:
        conn = real(p, busy_timeout_s)
        if not held:
            writer = sqlite3.connect(p, isolation_level=None)
            writer.execute("PRAGMA journal_mode=WAL")  # makes -wal and -shm beside the file
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            writer.execute("INSERT INTO meta VALUES ('application', 'turnwatch')")
            held.append(writer)
        return conn

    monkeypatch.setattr(ledger_file, "_open_readonly", open_while_a_writer_creates)
    yield path, held
    for c in held:
        c.close()


def test_a_look_during_creation_is_not_ready_and_removes_nothing(
    creating: tuple[Path, list[sqlite3.Connection]],
) -> None:
    path, _ = creating
    with pytest.raises(LedgerNotReady, match=r"ledger\.sqlite3: not a turnwatch ledger yet"):
        connect(path, readonly=True)
    # The -wal and -shm are the writer's: a reader that removed them as "made by its look"
    # would take the writer's log from under it.
    assert Path(f"{path}-wal").exists()
    assert Path(f"{path}-shm").exists()


def test_the_writer_that_was_creating_the_file_loses_nothing_to_a_look(
    creating: tuple[Path, list[sqlite3.Connection]],
) -> None:
    path, held = creating
    with pytest.raises(LedgerNotReady):
        connect(path, readonly=True)
    (writer,) = held
    writer.execute("COMMIT")  # the writer's transaction ends, into its -wal
    ledger = Ledger(path)  # and a ledger's writer goes on in the file (before: disk I/O error)
    try:
        ledger.extend(events(50))
        assert ledger.flush(timeout=10)
    finally:
        ledger.close()
    assert ledger.lost == 0
    conn = connect(path, readonly=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert len(list(read_events(conn))) == 50
    finally:
        conn.close()


def test_an_empty_file_is_not_ready_and_a_foreign_one_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    with pytest.raises(LedgerNotReady):
        connect(empty, readonly=True)
    foreign = tmp_path / "foreign.sqlite3"
    c = sqlite3.connect(foreign)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    with pytest.raises(LedgerError, match="not a turnwatch ledger") as caught:
        connect(foreign, readonly=True)
    assert not isinstance(caught.value, LedgerNotReady)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite3", "foreign.sqlite3"]
