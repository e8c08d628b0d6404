"""The examples run as a user runs them, and say what the README says they do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from turnwatch import names
from turnwatch.tracing.ledger import connect, read_events

ROOT = Path(__file__).parents[1]


def test_the_pydantic_ai_example_stops_its_run_the_adrs_way(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "pydantic_ai_stop.py"), "--ledger", str(ledger)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "abort → accepted" in result.stdout
    assert "10 of 10 lines" in result.stdout
    conn = connect(ledger, readonly=True)
    rows = {
        ev.call: ev.attrs.get("outcome")
        for _seq, ev in read_events(conn)
        if ev.kind == names.TOOL_FINISHED
    }
    conn.close()
    assert rows == {"sh-1": "aborted", "save-1": "completed_after_stop"}
