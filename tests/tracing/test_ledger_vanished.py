"""A ledger deleted, replaced or left without its directory under a running writer: the writer
says so in one line naming the file, keeps what waits, and writes to the path again as soon as
it can, so no event goes to a file no reader will ever open. Real files, a real writer."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from tests.tracing.test_damaged_rows import break_pages
from tests.tracing.test_ledger_faults import events
from turnwatch.tracing.ledger import Ledger, connect, read_events


def stamps(path: Path) -> list[float]:
    return [ev.ts_unix for _seq, ev in read_events(connect(path, readonly=True))]


def remove(path: Path) -> None:
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        p.unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["deleted", "replaced", "moved"])
def test_a_ledger_deleted_or_replaced_under_the_writer_is_written_at_its_path_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    try:
        ledger.extend(events(10))
        assert ledger.flush(timeout=10)
        if how == "deleted":
            remove(path)  # as `rm ledger.sqlite3*` would
        elif how == "moved":
            path.rename(tmp_path / "ledger.1.sqlite3")  # a log rotation
        else:
            other = tmp_path / "restored.sqlite3"
            Ledger(other).close()
            os.replace(other, path)  # a ledger restored from a backup, say
        with caplog.at_level(logging.WARNING, logger="turnwatch.ledger"):
            ledger.extend(events(5, start=10))
            assert ledger.flush(timeout=10)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1, said
        assert str(path) in said[0]
        assert f"was {'deleted' if how == 'moved' else how}" in said[0]
        assert ledger.lost == 0
    finally:
        ledger.close()
    assert stamps(path) == [float(i) for i in range(10, 15)]  # every event since, at the path
    if how == "moved":  # and what was committed before stays with the file moved
        assert stamps(tmp_path / "ledger.1.sqlite3") == [float(i) for i in range(10)]


def test_a_ledger_whose_directory_vanished_waits_and_is_written_when_it_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "ledgers"
    path = folder / "ledger.sqlite3"
    ledger = Ledger(path)
    try:
        assert ledger.flush(timeout=10)
        shutil.rmtree(folder)
        folder.write_text("a file where the directory was")  # so it cannot be made again
        with caplog.at_level(logging.WARNING, logger="turnwatch.ledger"):
            ledger.extend(events(20))
            assert not ledger.flush(timeout=1.0)  # waiting: not written, not lost
            assert ledger.lost == 0
            folder.unlink()  # the operator mends it: the writer makes the directory again
            assert ledger.flush(timeout=20)
        said = [r.getMessage() for r in caplog.records]
        assert "was deleted and cannot be opened again" in said[0]
        assert str(path) in said[0]
    finally:
        ledger.close()
    assert stamps(path) == [float(i) for i in range(20)]


def test_a_ledger_damaged_under_the_writer_keeps_what_comes_until_it_is_moved_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file SQLite finds malformed is the file's fault, as a full disk is: what comes waits in
    the backlog, the cause said once; moved aside, the writer writes it all at the path. Before,
    each event was lost alone ("could not be written"), one log line each."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    try:
        ledger.extend(events(10))
        assert ledger.flush(timeout=10)
        break_pages(path)
        with caplog.at_level(logging.WARNING, logger="turnwatch.ledger"):
            ledger.extend(events(20, start=10))
            assert not ledger.flush(timeout=1.5)  # waiting: not written, not lost
            assert ledger.lost == 0
            path.rename(tmp_path / "damaged.sqlite3")  # the operator keeps it, and starts afresh
            assert ledger.flush(timeout=20)
        said = [r.getMessage() for r in caplog.records]
        assert len([m for m in said if "cannot write (database disk image is malformed" in m]) == 1
        assert "writing again" in said[-1], said
        assert ledger.lost == 0
    finally:
        ledger.close()
    assert stamps(path) == [float(i) for i in range(10, 30)]
