"""The watchdog against recorded wall-clock times a clock step has since contradicted."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil

from tests.conftest import Procs
from tests.watchdog.helpers import Recorder, spawn_tree
from turnwatch import names
from turnwatch.tracing.ledger import Ledger
from turnwatch.watchdog.loop import Watchdog
from turnwatch.watchdog.scan import Config

CFG = Config(grace_s=0.5, slack_s=0.5, rpc_stuck_s=0.3)
#: The runtime's grace window, as its record of the SIGTERM says (kill_at less its own time).
RECORDED_GRACE = 2.0


async def test_a_window_recorded_before_a_clock_step_back_is_not_stretched_by_it(
    tmp_path: Path, procs: Procs
) -> None:
    """A runtime SIGTERMed its call's tree with a 2 s window on a clock an hour fast (a VM
    restored from a snapshot, before NTP stepped it back), and died. The watchdog goes on with
    that window as recorded, 2 s from the SIGTERM's own time at most: not an hour and 2 s, in
    which the call's processes would outlive their grace window and the watchdog, awaiting it,
    would scan and recover nothing else."""
    path = tmp_path / "ledger.sqlite3"
    tree = spawn_tree(procs)
    rec = Recorder(path)
    rec.runtime()
    rec.aborted_turn(tree[0])
    fast = -3600.0  # "ago": an hour ahead of the clock now
    rec(
        names.TOOLS_ABORT_SENT,
        ago=fast,
        turn="s.t1",
        call="s.c1",
        tool="Bash",
        attrs={"policy": "grace", "kill_at": time.time() - fast + RECORDED_GRACE},
    )
    rec.close()
    ledger = Ledger(path)
    started = time.monotonic()
    try:
        cycle = await asyncio.wait_for(Watchdog(path, ledger, ledger.flush, cfg=CFG).cycle(), 30)
    finally:
        ledger.close()

    took = time.monotonic() - started
    assert [a.result for a in cycle.actions if a.finding.pid == tree[0].pid] == ["ok"], cycle
    for p in tree:
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    assert took <= RECORDED_GRACE + 3.0
