"""A ledger's writer shares its file with other processes through SQLite's POSIX locks, which a
process loses whole when it closes any descriptor of the file. Real processes, real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from turnwatch.runtime import LocalHost, Runtime
from turnwatch.runtime.events import now_event
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.tracing.pipeline import Telemetry

_CLOSE = (
    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
    "print(c.execute('SELECT count(*) FROM events').fetchone()[0]); c.close()"
)


def read_all(path: Path) -> list[object]:
    """Every event this process reads of the ledger (through its own, separate connection)."""
    conn = connect(path, readonly=True)
    try:
        return [ev for _seq, ev in read_events(conn)]
    finally:
        conn.close()


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


@pytest.mark.parametrize("tool", ["Grep", "Read", "Edit"])
async def test_the_runtimes_own_file_tools_leave_its_ledger_unopened(
    tmp_path: Path, tool: str
) -> None:
    """An agent greps its home directory, the ledger beside its files, with the runtime's own
    Grep (a thread of the runtime's process): closing the ledger after reading it dropped the
    writer's locks, with the same end. The file tools pass the ledger and its WAL by: Grep
    skips them, Read and Edit refuse them, saying why."""
    path = tmp_path / "state" / "ledger.sqlite3"
    (tmp_path / "notes.txt").write_text("needle\n")
    ledger = Ledger(path)
    rt = Runtime(LocalHost(subreaper=False), sink=Telemetry(ledger=ledger))
    try:
        turn = rt.start_turn("a")
        assert ledger.flush()
        args = {
            "Grep": {"pattern": "needle|turn", "path": str(tmp_path)},
            "Read": {"path": str(path)},
            "Edit": {"path": f"{path}-wal", "old": "a", "new": "b"},
        }[tool]
        result = await turn.request(tool, args).result()
        if tool == "Grep":
            assert result.output.splitlines() == [f"{tmp_path / 'notes.txt'}:1:needle"]
        else:
            assert "turnwatch ledger" in (result.error or ""), result
        assert ledger.flush()
        assert elsewhere(path) >= 1
        await turn.finish()
        assert ledger.flush()
        assert Path(f"{path}-wal").exists()
        assert elsewhere(path) == len(read_all(path))
    finally:
        ledger.close()
