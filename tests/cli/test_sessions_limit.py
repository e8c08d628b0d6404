"""``turnwatch sessions`` on a long-lived ledger: the most recent 50 and every session still
processing, a line saying how many older ones it did not show; ``--limit N``, ``--all``."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import turnwatch
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger


def ledger_of(path: Path, settled: int) -> None:
    evs = [Event(names.TURN_STARTED, "stuck", 0.5, turn="stuck.t1")]  # the oldest: processing
    for i in range(settled):
        s = f"s{i:03d}"
        evs += [
            Event(names.TURN_STARTED, s, 1.0 + i, turn=f"{s}.t1"),
            Event(names.TURN_SETTLED, s, 1.5 + i, turn=f"{s}.t1", attrs={"outcome": "completed"}),
            Event(names.PROCESSING_CLEARED, s, 1.6 + i, turn=f"{s}.t1"),
        ]
    ledger = Ledger(path)
    ledger.extend(evs)
    ledger.close()


def listed(out: str) -> list[str]:
    return [ln.split()[1] for ln in out.splitlines() if ln.startswith("│ s") or "stuck" in ln]


def test_the_most_recent_50_and_every_processing_one_and_what_was_not_shown(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger_of(path, 80)
    env = {"COLUMNS": "160"}
    shown = turnwatch("sessions", "--ledger", str(path), env=env)
    assert shown.returncode == 0, shown.stderr
    rows = listed(shown.stdout)
    assert len(rows) == 51  # 50 recent, and the processing one however old
    assert "stuck" in rows
    assert rows[0] == "s079"
    assert "30 older session(s) not shown (--limit N, or --all)" in shown.stdout
    few = turnwatch("sessions", "--limit", "5", "--ledger", str(path), env=env)
    assert len(listed(few.stdout)) == 6
    assert "75 older session(s) not shown" in few.stdout
    every = turnwatch("sessions", "--all", "--ledger", str(path), env=env)
    assert len(listed(every.stdout)) == 81
    assert "not shown" not in every.stdout


def test_a_limit_that_is_no_count_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger_of(path, 1)
    for bad in ("0", "-3"):
        done = turnwatch("sessions", "--limit", bad, "--ledger", str(path))
        assert done.returncode == 2
        assert done.stderr.strip().count("\n") == 0, done.stderr
        assert "--limit" in done.stderr
