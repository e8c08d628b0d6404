"""``turnwatch watch`` as an on-call engineer runs it: looking never kills, failures are counted
and backed off, and the log says what changed rather than everything again.

Through the real console script (a subprocess), as people run it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tests.cli.watch_service import WatchService
from tests.conftest import Procs, turnwatch
from tests.watchdog.helpers import Recorder, aborted_tree
from turnwatch import names
from turnwatch.exporters.metrics import StopMetrics
from turnwatch.runtime.model import FindingKind, RecoveryResult
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.watchdog.loop import Cycle, Watchdog
from turnwatch.watchdog.report import ChangeLog
from turnwatch.watchdog.scan import Config, Finding


def recorded(path: Path, kind: str) -> list[dict[str, object]]:
    conn = connect(path, readonly=True)
    try:
        return [dict(e.attrs) for _s, e in read_events(conn) if e.kind == kind]
    finally:
        conn.close()


def test_watch_once_only_looks(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "ledger.sqlite3"
    tree = aborted_tree(path, procs)

    looked = turnwatch("watch", "--once", "--json", "--grace", "1", "--ledger", str(path))

    assert looked.returncode == 1, looked.stderr  # findings remain
    rows = json.loads(looked.stdout)
    assert {r["kind"] for r in rows} == {names.F_ABORTED_WITH_LIVE_PROCESS}
    assert {r["result"] for r in rows} == {"proposed"}
    assert all(p.is_running() for p in tree), "watch --once signalled a process"
    assert recorded(path, names.WATCHDOG_RECOVERED) == []

    acted = turnwatch(
        "watch", "--once", "--recover", "--json", "--grace", "1", "--ledger", str(path)
    )
    assert acted.returncode == 0, acted.stderr
    assert procs.alive() == []


def test_watch_help_says_once_does_not_recover() -> None:
    out = turnwatch("watch", "--help").stdout
    assert "--no-recover with --once" in out
    assert "looking never kills" in " ".join(out.split())


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    """A session pinned by a runtime that is alive (this process) but has no control socket."""
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    rec.runtime("u")
    rec("turn.started", "u", 120, turn="u.t1")
    rec("stop.clicked", "u", 100, turn="u.t1")
    rec("abort.rpc.received", "u", 100, turn="u.t1")
    rec.close()
    return path


async def test_a_failed_recovery_is_recorded_counted_and_backed_off(unreachable: Path) -> None:
    ledger = Ledger(unreachable)
    dog = Watchdog(unreachable, ledger, ledger.flush, cfg=Config(grace_s=1.0))
    first = await dog.cycle()
    second = await dog.cycle()
    ledger.close()

    assert {a.result for a in first.actions} == {RecoveryResult.FAILED}
    assert {a.result for a in second.actions} == {RecoveryResult.DEFERRED}
    assert second.unresolved, "a deferred recovery leaves its finding standing"
    (failed,) = recorded(unreachable, names.WATCHDOG_RECOVERED)
    assert failed["result"] == "failed"
    assert "no control endpoint" in str(failed["error"])
    registry = CollectorRegistry()
    metrics = StopMetrics(registry)
    conn = connect(unreachable, readonly=True)
    for _s, e in read_events(conn):
        metrics(e)
    conn.close()
    value = registry.get_sample_value(names.M_RECOVERIES + "_total", {"result": "failed"})
    assert value == 1.0


def test_the_log_says_what_changed() -> None:
    t = [0.0]
    log = ChangeLog(summary_every_s=60, clock=lambda: t[0])
    f = Finding(FindingKind.PINNED_SESSION, "s", "t", detail="the abort RPC is still pending")
    g = Finding(FindingKind.PINNED_SESSION, "s2", "t", detail="its runtime pid 7 is gone")

    assert log.lines(Cycle([f])) == ["found pinned_session s: the abort RPC is still pending"]
    assert log.lines(Cycle([f])) == []  # standing: not news
    assert log.lines(Cycle([f, g])) == ["found pinned_session s2: its runtime pid 7 is gone"]
    t[0] = 61.0
    assert log.lines(Cycle([g])) == [
        "cleared pinned_session s: the abort RPC is still pending",
        "1 finding(s) standing",
    ]


def test_the_watch_service_starts_before_any_ledger_exists(tmp_path: Path) -> None:
    """A unit started at boot, before any runtime wrote a ledger, keeps running (seen: exit 2,
    "unreadable ledger (disk I/O error)", when its own first look removed the -wal its writer
    had just made: tests/tracing/test_ledger_creation.py)."""
    ledger = tmp_path / "state" / "turnwatch" / "ledger.sqlite3"
    watch = WatchService(ledger)
    try:
        # A hang detector, not a speed test: loaded beyond its two cores (a CI run, two
        # burners and a second suite beside it) three scans took more than 30 s once.
        watch.scanned(3, "three scans of the empty ledger")
        assert watch.scans() >= 3, f"last scrape: {watch.last}"
        assert ledger.exists()
        watch.alive()
    finally:
        code, err = watch.stop()
    assert code == 0, err
