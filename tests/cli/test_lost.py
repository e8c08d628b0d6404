"""A program says what its ledger lost as it ends: the count, the file, the cause, exit 1."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import turnwatch
from tests.tracing.test_ledger_faults import fill, small_fs  # noqa: F401 - the fixture
from turnwatch.tracing.ledger import Ledger


def test_ingest_onto_a_full_disk_says_what_it_lost_and_exits_1(
    small_fs: Path,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    ledger = small_fs / "ledger.sqlite3"
    Ledger(ledger).close()  # a ledger, then no room left beside it
    lines = tmp_path / "events.jsonl"
    lines.write_text(
        "".join(
            json.dumps(
                {
                    "ts": 1.0 + i,
                    "kind": "tool.progress",
                    "session": "s",
                    "turn": "t",
                    "call": "c",
                    "tool": "Bash",
                    "attrs": {"text": "x" * 200},
                }
            )
            + "\n"
            for i in range(3000)
        )
    )
    room = small_fs / "room"
    room.write_bytes(b"\0" * 96 * 1024)
    fill(small_fs / "filler")
    room.unlink()  # room enough to open the ledger, not to write the events
    done = turnwatch("ingest", str(lines), "--ledger", str(ledger))
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ")
    assert "event(s) could not be written to" in last
    assert str(ledger) in last
    assert "database or disk is full" in last
    assert "Traceback" not in done.stderr
    # None of the lines was there before: what was lost is not "already there" (it said so).
    assert "already there" not in done.stderr, done.stderr


def test_the_demo_on_a_full_disk_is_recovered_in_process_and_says_what_it_lost(
    small_fs: Path,  # noqa: F811 - the fixture
) -> None:
    """The operator's bad day of #35: the ledger fails from the start, yet the in-process
    watchdog finds demo-legacy pinned from its runtime's own state and recovers it, and the
    demo ends by saying what the ledger lost (exit 1)."""
    ledger = small_fs / "ledger.sqlite3"
    Ledger(ledger).close()
    room = small_fs / "room"
    room.write_bytes(b"\0" * 96 * 1024)
    fill(small_fs / "filler")
    room.unlink()  # room enough to open the ledger, not to write the demo's events
    started = time.monotonic()
    done = turnwatch("demo", "--grace", "1", "--ledger", str(ledger), "--json", timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert report["sessions"]["demo-legacy"]["recovered_by_watchdog"] is True
    assert report["leftover_pids"] == []
    # The legacy Grep runs about 75 s on its own: recovered, the demo ends long before.
    assert took < 45, took
    last = done.stderr.strip().splitlines()[-1]
    assert "event(s) could not be written to" in last
    assert "database or disk is full" in last
