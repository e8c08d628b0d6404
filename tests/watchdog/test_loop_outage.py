"""The watchdog as a service outlives an outage of its ledger: a file that cannot be read (here
replaced by bytes that are no database) is said once, each scan tries again, and when the
ledger is back the loop goes on where it was, reporting nothing twice. A single scan (``watch
--once``) still fails at once: it has nothing to report but the error. Real files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import until
from tests.watchdog.helpers import pinned_ledger
from turnwatch import names
from turnwatch.runtime.events import MemorySink
from turnwatch.tracing.ledger import LedgerError
from turnwatch.watchdog.loop import Cycle, Watchdog
from turnwatch.watchdog.scan import Config

CFG = Config(grace_s=0.5, slack_s=0.5, rpc_stuck_s=0.5)


async def test_the_loop_says_an_unreadable_ledger_once_and_goes_on_when_it_is_back(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    pinned_ledger(path)
    sink = MemorySink()
    said: list[str] = []
    dog = Watchdog(path, sink, lambda: None, cfg=CFG, recover=False, say=said.append)
    cycles: list[Cycle] = []
    stop = asyncio.Event()
    loop = asyncio.ensure_future(dog.run(0.05, stop, cycles.append))
    try:
        await until(lambda: len(cycles) >= 2 or loop.done(), what="two scans")
        aside = tmp_path / "aside.sqlite3"
        path.rename(aside)
        path.write_bytes(b"this is no database " * 400)  # replaced under the service
        n = len(cycles)
        await until(lambda: len(cycles) >= n + 4 or loop.done(), what="scans of the bad file")
        assert not loop.done(), loop.exception()
        assert all(c.findings == [] for c in cycles[n + 1 :])
        path.unlink()
        aside.rename(path)  # back
        n = len(cycles)
        await until(lambda: len(cycles) >= n + 3 or loop.done(), what="scans after it is back")
        assert not loop.done(), loop.exception()
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
    outage = [m for m in said if "cannot read the ledger" in m]
    assert len(outage) == 1, said
    assert str(path) in outage[0]
    assert "reading it again" in outage[0]
    assert [m for m in said if "readable again" in m] == [
        f"watchdog: the ledger is readable again ({path})"
    ]
    assert {f.kind for f in cycles[-1].findings} == {"pinned_session", "abort_rpc_stuck"}
    reported = [e.attrs[names.K_FINDING] for e in sink if e.kind == names.WATCHDOG_FINDING]
    assert sorted(reported) == ["abort_rpc_stuck", "pinned_session"]  # not again after it


async def test_a_single_scan_of_an_unreadable_ledger_fails(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    path.write_bytes(b"this is no database " * 400)
    dog = Watchdog(path, MemorySink(), lambda: None, cfg=CFG, recover=False)
    with pytest.raises(LedgerError, match=r"ledger\.sqlite3: unreadable ledger"):
        await dog.cycle()
