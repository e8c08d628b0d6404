"""The watchdog against recorded wall-clock times a clock step has since contradicted."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import Procs
from tests.watchdog.helpers import Recorder, spawn_tree
from turnwatch import names
from turnwatch.cli.metrics_server import build
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


def dead_process() -> tuple[int, float]:
    """The pid and start time of a process that has exited (a runtime gone with its host)."""
    p = subprocess.Popen(["true"])
    created = psutil.Process(p.pid).create_time()
    p.wait()
    return p.pid, created


#: A stop's monotonic time on clocks that are not this process's: the runtime's, on the boot
#: before this one (up ten days then), or a foreign runtime's own origin (``performance.now()``).
OTHER_CLOCKS = {
    "the boot before": time.monotonic_ns() + 10 * 86_400 * 10**9,
    "a runtime's own origin": 5 * 10**9,
}


@pytest.mark.parametrize("clock", OTHER_CLOCKS)
async def test_a_stop_settled_by_the_watchdog_is_measured_by_the_clock_both_ends_share(
    tmp_path: Path, clock: str
) -> None:
    """A runtime took a stop 90 s ago and died with the turn pinned (its host rebooted; or a
    foreign runtime, whose ``mono_ns`` counts from its own start). The watchdog settles the
    turn. Its monotonic clock is not the one the stop was recorded on: the stop took 90 s to
    settle, not 0 s (the other boot's clock was ahead) nor the hours of this host's uptime."""
    path = tmp_path / "ledger.sqlite3"
    pid, created = dead_process()
    rec = Recorder(path)
    rec("runtime.started", ago=120, attrs={"pid": pid, "create_time": created, "mode": "adr"})
    rec("turn.started", turn="s.t1", ago=100, mono_ns=OTHER_CLOCKS[clock] - 10 * 10**9)
    rec("abort.rpc.received", turn="s.t1", ago=90, mono_ns=OTHER_CLOCKS[clock])
    rec.close()
    ledger = Ledger(path)
    try:
        cycle = await Watchdog(path, ledger, ledger.flush, cfg=CFG).cycle()
    finally:
        ledger.close()
    assert [a.result for a in cycle.actions] == ["ok"], cycle

    registry = CollectorRegistry()
    follower, _ = build(path, registry)
    follower.poll()
    took = registry.get_sample_value(
        f"{names.M_STOP_TO_SETTLE}_sum", {"mode": "adr", "outcome": "aborted"}
    )
    idle = registry.get_sample_value(f"{names.M_STOP_TO_IDLE}_sum", {"mode": "adr"})
    assert took is not None
    assert 89 <= took <= 120, took
    assert idle is not None
    assert 89 <= idle <= 120, idle
