"""``turnwatch watch`` as a service outlives its ledger being unreadable for a while (replaced by
bytes that are no database, then put back): each reader says so once, the scans go on, and
when the file is back the watch goes on from where it was and exits 0 on SIGTERM. Before, its
first failed read ended it with exit 2, and a unit that restarts it would log that each time."""

from __future__ import annotations

from pathlib import Path

from tests.cli.watch_service import WatchService
from tests.watchdog.helpers import pinned_ledger


def test_the_watch_service_outlives_an_unreadable_ledger(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    pinned_ledger(ledger)
    watch = WatchService(ledger, "--no-recover")
    try:
        watch.scanned(3, "three scans")
        aside = tmp_path / "aside.sqlite3"
        ledger.rename(aside)
        ledger.write_bytes(b"this is no database " * 400)
        watch.scanned(watch.scans() + 5, "five scans of the bad file")
        ledger.unlink()
        aside.rename(ledger)
        watch.scanned(watch.scans() + 3, "three scans after it is back")
    finally:
        code, err = watch.stop()
    assert code == 0, err
    lines = err.splitlines()
    down = [ln for ln in lines if "no database" in ln or "not a database" in ln]
    assert len([ln for ln in down if ln.startswith("watchdog: cannot read the ledger")]) == 1, err
    assert len([ln for ln in down if ln.startswith("following the ledger")]) <= 1, err
    assert "watchdog: the ledger is readable again" in err
    # Unread is not cleared: the log never says a finding it could not see went away.
    assert not [ln for ln in lines if ln.startswith("cleared ")], err
    assert len([ln for ln in lines if ln.startswith("found pinned_session s")]) == 1, err
    assert not any("Traceback" in ln for ln in lines), err
