"""The watchdog as a service outlives an outage of its ledger: a file that cannot be read (here
replaced by bytes that are no database) is said once, each scan tries again, and when the
ledger is back the loop goes on where it was, reporting nothing twice. A single scan (``watch
--once``) still fails at once: it has nothing to report but the error. Real files."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.conftest import Procs, until
from tests.watchdog.helpers import Recorder, pinned_ledger
from turnwatch import names
from turnwatch.runtime.events import MemorySink
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, LedgerError, connect
from turnwatch.watchdog.loop import Cycle, Watchdog
from turnwatch.watchdog.scan import Config, Finding

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


async def test_a_scan_that_could_not_read_the_ledger_prunes_nothing(
    tmp_path: Path, procs: Procs
) -> None:
    """With ``retain``, a prune keeps the sessions of open findings. A scan that could not read
    the ledger found none: pruning after it (the file readable again by then) deleted a session
    whose recorded process still lives (a mutating call's, its runtime gone: reported, never
    signalled), and with it the only record that proves the process is that call's: the finding
    was gone for good while the process ran on."""
    path = tmp_path / "ledger.sqlite3"
    proc = procs.spawn(["sleep", "300"])
    gone = subprocess.Popen(["true"])  # its runtime, gone
    created = psutil.Process(gone.pid).create_time()
    gone.wait()
    rec = Recorder(path)
    rec("runtime.started", ago=200, attrs={"pid": gone.pid, "create_time": created})
    call = {"turn": "s.t1", "call": "s.c1", "tool": "Write"}
    rec("turn.started", turn="s.t1", ago=190)
    rec("tool.requested", ago=190, **call)
    rec("tool.started", ago=190, **call, attrs={"pid": proc.pid, "create_time": proc.create_time()})
    rec("stop.clicked", turn="s.t1", ago=180)
    rec("abort.rpc.received", turn="s.t1", ago=180)
    rec("tools.abort.sent", ago=180, **call)
    # The runtime said its processes were gone: they were not.
    rec("tool.finished", ago=179, **call, attrs={"outcome": "aborted", "status": 0})
    rec("turn.settled", turn="s.t1", ago=179, attrs={"outcome": "aborted"})
    rec("abort.rpc.returned", turn="s.t1", ago=179)
    rec("processing.cleared", turn="s.t1", ago=179)
    rec.close()
    aside = tmp_path / "aside.sqlite3"
    path.rename(aside)
    path.write_bytes(b"this is no database " * 400)  # an outage at the scan

    def back() -> list[Finding]:  # ... over by the time the cycle prunes
        if aside.exists():
            path.unlink()
            aside.rename(path)
        return []

    ledger = Ledger(path.with_name("own.sqlite3"))
    dog = Watchdog(path, ledger, ledger.flush, cfg=CFG, retain_s=60, also=back)
    cycles: list[Cycle] = []
    stop = asyncio.Event()
    loop = asyncio.ensure_future(dog.run(0.05, stop, cycles.append))
    try:
        await until(lambda: len(cycles) >= 3 or loop.done(), what="three scans")
    finally:
        stop.set()
        await asyncio.wait_for(loop, 10)
        ledger.close()
    assert cycles[0].unread is not None
    found = {f.kind for f in cycles[-1].findings}
    assert names.F_ORPHAN_TOOL_PROCESS in found, cycles[-1].findings
    conn = connect(path, readonly=True)
    assert [r.session for r in view.sessions(conn)] == ["s"]
    conn.close()
    assert proc.is_running()  # a mutating call's process: reported, never signalled


async def test_a_look_is_the_cycle_of_a_watchdog_that_recovers_nothing(tmp_path: Path) -> None:
    """``Watchdog.look`` (``watch --once --no-recover``, no event loop) finds what a cycle of
    the same watchdog finds, reports each finding once, acts on none, and fails as it does on a
    ledger it cannot read."""
    path = tmp_path / "ledger.sqlite3"
    pinned_ledger(path)
    sink = MemorySink()
    dog = Watchdog(path, sink, lambda: None, cfg=CFG, recover=False)
    first, second = dog.look(), dog.look()
    cycled = await Watchdog(path, MemorySink(), lambda: None, cfg=CFG, recover=False).cycle()

    assert {f.key for f in first.findings} == {f.key for f in cycled.findings}
    assert {f.key for f in second.findings} == {f.key for f in cycled.findings}
    assert {f.kind for f in first.findings} == {"pinned_session", "abort_rpc_stuck"}
    assert first.actions == second.actions == []
    reported = [e.attrs[names.K_FINDING] for e in sink if e.kind == names.WATCHDOG_FINDING]
    assert sorted(reported) == ["abort_rpc_stuck", "pinned_session"]  # once, not at each look
    bad = tmp_path / "bad.sqlite3"
    bad.write_bytes(b"this is no database " * 400)
    with pytest.raises(LedgerError, match=r"bad\.sqlite3: unreadable ledger"):
        Watchdog(bad, MemorySink(), lambda: None, cfg=CFG, recover=False).look()
