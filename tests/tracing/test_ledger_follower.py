"""Following a ledger across a rotation: the file moved away and a new one written at its
path is followed from its first event (the place in the old file means nothing in the new one).
Real files, the real writer."""

from __future__ import annotations

from pathlib import Path

from tests.tracing.test_ledger_faults import events
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger
from turnwatch.tracing.ledger_follower import LedgerFollower


def write(path: Path, n: int) -> None:
    ledger = Ledger(path)
    try:
        ledger.extend(events(n))
        assert ledger.flush(timeout=10)
    finally:
        ledger.close()


def test_a_rotated_ledger_is_followed_from_the_new_files_first_event(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    write(path, 30)
    seen: list[Event] = []
    follower = LedgerFollower(path, seen.append)
    assert follower.poll() == 30
    path.rename(tmp_path / "ledger.1.sqlite3")  # a log rotation
    write(path, 5)  # fewer than were seen: their seqs are all below the old place
    assert follower.poll() == 5
    assert len(seen) == 35
    write(path, 2)  # the same file goes on: only what is new
    assert follower.poll() == 2
