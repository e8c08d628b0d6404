"""A ledger's writer shares its file with other processes through SQLite's POSIX locks, which a
process loses whole when it closes any descriptor of the file. Real processes, real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from turnwatch.runtime.events import now_event
from turnwatch.tracing.ledger import Ledger, connect

_CLOSE = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
    "print(c.execute('SELECT count(*) FROM events').fetchone()[0]); c.close()"
)


def elsewhere(path: Path) -> int:
    """What another process reads of the ledger (it then closes its connection, as every
    ``turnwatch sessions`` does)."""
    out = subprocess.run(
        [sys.executable, "-c", _CLOSE, str(path)], check=True, text=True, capture_output=True
    )
    return int(out.stdout)


def test_a_look_beside_the_writer_keeps_what_the_writer_commits_visible(tmp_path: Path) -> None:
    """``watch`` writes its findings and scans the ledger from one process (so do
    ``serve-metrics --events`` and a runtime with its watchdog beside it). The scan's look
    opened the file to check it could be read, and closing that descriptor dropped the writer's
    locks: the next process to close its connection took itself for the last one and deleted
    the WAL from under the writer. Everything committed after went to an unlinked file: no
    other process saw it, and a writer killed then lost it."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    try:
        ledger.append(now_event("turn.started", "a", turn="a.t1"))
        assert ledger.flush()
        connect(path, readonly=True).close()  # a scan's look, in the writer's process
        assert elsewhere(path) == 1
        ledger.append(now_event("turn.started", "b", turn="b.t1"))
        assert ledger.flush()
        assert Path(f"{path}-wal").exists()
        assert elsewhere(path) == 2
    finally:
        ledger.close()
