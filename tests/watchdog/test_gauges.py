"""The live gauges agree with the watchdog's findings."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Procs
from tests.streams import four_states
from tests.watchdog.helpers import aborted_tree
from turnwatch.tracing.ingest import parse_line
from turnwatch.tracing.ledger import Ledger
from turnwatch.watchdog.gauges import live_state


def test_gauges_count_what_the_watchdog_finds(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    for n, line in enumerate(four_states(), 1):
        ledger.append(parse_line(line.encode(), n))  # type: ignore[arg-type]
    ledger.close()
    aborted_tree(path, procs)  # session "s": stopped 30 s ago, its Bash tree still alive

    state = live_state(path)

    assert state.pinned_sessions == 1  # "pinned"; "stopping" is within its 15 s
    assert state.aborted_with_live_processes == 1  # "s"

    # In flight: the Greps of "busy" and "pinned" (never released), the Write of "stopping".
    assert state.inflight_by_policy == {"race": 2, "await": 1}


def test_gauges_without_a_ledger_are_zero(tmp_path: Path) -> None:
    state = live_state(tmp_path / "none.sqlite3")
    assert (state.pinned_sessions, state.aborted_with_live_processes) == (0, 0)
