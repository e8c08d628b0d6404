"""The examples run as a user runs them, and say what the README says they do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from turnwatch import names
from turnwatch.tracing.ledger import connect, read_events

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize(
    "example",
    ["pydantic_ai_stop.py", "openai_agents_stop.py", "langgraph_stop.py", "google_adk_stop.py"],
)
def test_the_framework_examples_stop_their_run_the_adrs_way(tmp_path: Path, example: str) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example), "--ledger", str(ledger)],
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


def test_the_programs_the_tests_start_can_be_interrupted() -> None:
    """Their Ctrl-C is how the tests stop them, as a person does: SIGINT is not ignored in what
    the tests start, even when the run itself was started in the background with SIGINT
    ignored (tests/conftest.py)."""
    shown = subprocess.run(
        [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT).__name__)"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    assert shown == "default_int_handler"
