"""The watchdog against recorded wall-clock times a clock step has since contradicted."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from prometheus_client import CollectorRegistry

from tests.conftest import Procs, wait_until
from tests.watchdog.helpers import Recorder, spawn_tree, step_clock
from tests.watchdog.test_cross_process import (
    kill_runtime,
    runtime_dies_then_one_cycle,
    spawn_runtime,
    state,
)
from turnwatch import names
from turnwatch.cli.metrics_server import build
from turnwatch.runtime import procfs
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.watchdog.loop import Cycle, Watchdog
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


# --- process identity across a wall-clock step ---
#
# /proc/stat's btime is the wall clock less the time since boot, so a step (NTP, a VM paused,
# restored or forked: seen here, 2.00 s) moves every start time computed after it. A runtime that
# recorded its processes before the step and a watchdog that looks after it must still agree on
# which process is which: turnwatch's runtimes record the kernel's start ticks and the boot beside
# the wall time, and the watchdog proves by those.


def far_call_running(
    tmp_path: Path, procs: Procs, command: str
) -> tuple[Path, subprocess.Popen[str], psutil.Process]:
    """A real runtime in another process whose call runs ``command`` in process-group
    containment (pid and start time are the only proof): its ledger, the runtime, and the
    call's process, tracked."""
    path = tmp_path / "ledger.sqlite3"
    args: dict[str, object] = {"command": command}
    sock = tmp_path / "rt.sock"
    proc = spawn_runtime(
        procs, path, sock, "adr", "Bash", args, stop=False, containment="process_group"
    )
    conn = connect(path, readonly=True)
    try:
        (call,) = view.sessions(conn, only="far")[0].calls
    finally:
        conn.close()
    assert call.pid is not None
    return path, proc, procs.track(call.pid)


async def one_cycle(path: Path) -> Cycle:
    ledger = Ledger(path)
    try:
        return await Watchdog(path, ledger, ledger.flush, cfg=CFG).cycle()
    finally:
        ledger.close()


async def test_a_live_runtime_recorded_before_a_clock_step_is_not_taken_for_dead(
    tmp_path: Path, procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime in another process runs a turn; the wall clock steps; a watchdog looks. The
    runtime is alive and its turn is running: no finding, nothing settled for it, its call's
    process untouched (taken for dead, its turn would be settled by the watchdog under it)."""
    path, proc, sleeper = far_call_running(tmp_path, procs, "sleep 300")

    step_clock(monkeypatch)
    try:
        cycle = await one_cycle(path)

        assert cycle.findings == [], cycle
        assert state(path, "far") == "processing"
        assert sleeper.is_running()
        assert sleeper.status() != psutil.STATUS_ZOMBIE
        assert proc.poll() is None
    finally:
        kill_runtime(proc)


async def test_an_orphan_recorded_before_a_clock_step_is_still_proved_and_ended(
    tmp_path: Path, procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime records its call's process (process-group containment: pid and start time are
    the only proof) and dies; the wall clock steps; the watchdog finds the orphan and ends it,
    a child that ignores SIGTERM included."""
    script = "trap '' TERM; sleep 300 & sleep 300"
    path, proc, bash = far_call_running(tmp_path, procs, script)
    wait_until(lambda: bash.children(), what="the child sleep")
    child = procs.track(bash.children()[0].pid)

    step_clock(monkeypatch)
    cycle = await runtime_dies_then_one_cycle(path, proc)

    assert names.F_ORPHAN_TOOL_PROCESS in {f.kind for f in cycle.findings}, cycle
    for p in (bash, child):
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE


async def test_a_process_a_finished_call_left_running_before_a_step_is_ended_after_it(
    tmp_path: Path, procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a finished call left running is recorded pid by pid (``lingering``), each with its
    start ticks: after a step, the stop's recovery still proves and ends it."""
    path = tmp_path / "ledger.sqlite3"
    left = procs.spawn(["sleep", "300"], start_new_session=True)
    bystander = procs.spawn(["sleep", "300"], start_new_session=True)
    seen = procfs.read(left.pid)
    assert seen is not None
    assert seen.ticks is not None
    gone, created = dead_process()  # the runtime and its call's own process
    rec = Recorder(path)
    rec("runtime.started", ago=60, attrs={"pid": gone, "create_time": created, "mode": "adr"})
    rec("turn.started", turn="s.t1", ago=41)
    rec("tool.requested", turn="s.t1", call="s.c1", tool="Bash", ago=41)
    # As a runtime records a call whose first process is gone before it is read: the boot.
    first = {"pid": gone, "create_time": created, "boot_id": procfs.boot_id()}
    rec("tool.started", turn="s.t1", call="s.c1", tool="Bash", ago=40, attrs=first)
    lingering = [[left.pid, seen.create_time, seen.ticks]]
    rec(
        names.TOOL_FINISHED,
        turn="s.t1",
        call="s.c1",
        tool="Bash",
        ago=35,
        attrs={"outcome": "completed", "status": "ok", "lingering": lingering},
    )
    rec.close()

    step_clock(monkeypatch)
    cycle = await one_cycle(path)

    assert [f.pid for f in cycle.findings if f.kind == names.F_ORPHAN_TOOL_PROCESS] == [left.pid], (
        cycle
    )
    assert procs.alive() == [bystander.pid]


async def test_a_process_recorded_with_its_wall_start_only_is_never_signalled_after_a_step(
    tmp_path: Path, procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A foreign runtime records ``pid`` and ``create_time`` only, and dies; the clock steps.
    The watchdog can no longer prove the process is the recorded one, so it signals nothing
    (invariant 5): the limit of a wall-clock proof, which the docs name. (Without the step the
    same ledger gets its orphan ended: the other tests of the watchdog.)"""
    path = tmp_path / "ledger.sqlite3"
    tree = spawn_tree(procs)
    pid, created = dead_process()
    rec = Recorder(path)
    rec("runtime.started", ago=60, attrs={"pid": pid, "create_time": created, "mode": "adr"})
    rec("turn.started", turn="s.t1", ago=40)
    rec("tool.requested", turn="s.t1", call="s.c1", tool="Bash", ago=40)
    wall = {"pid": tree[0].pid, "create_time": tree[0].create_time()}
    rec("tool.started", turn="s.t1", call="s.c1", tool="Bash", ago=39, attrs=wall)
    rec.close()

    step_clock(monkeypatch)
    cycle = await one_cycle(path)

    assert all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree), cycle


async def test_a_foreign_runtime_that_sends_the_kernel_s_start_is_proved_after_a_step(
    tmp_path: Path, procs: Procs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A foreign runtime's lines, through ``turnwatch ingest``, carry ``start_ticks`` and
    ``boot_id`` beside ``create_time``; it dies; the clock steps. Its orphan is proved and
    ended as turnwatch's own runtimes' are."""
    path = tmp_path / "ledger.sqlite3"
    orphan = procs.spawn(["sleep", "300"], start_new_session=True)
    seen = procfs.read(orphan.pid)
    assert seen is not None
    gone, created = dead_process()
    turn, call = {"turn": "s.t1"}, {"turn": "s.t1", "call": "s.c1", "tool": "Bash"}
    process = {"pid": orphan.pid, "create_time": seen.create_time, **procfs.start_attrs(seen)}
    lines: list[dict[str, object]] = [
        {"kind": "runtime.started", "attrs": {"pid": gone, "create_time": created}},
        {"kind": "turn.started", **turn},
        {"kind": "tool.requested", **call},
        {"kind": "tool.started", **call, "attrs": process},
    ]
    src = tmp_path / "events.jsonl"
    now = time.time() - 30
    src.write_text("".join(json.dumps({"ts": now, "session": "s", **x}) + "\n" for x in lines))
    done = subprocess.run(
        [sys.executable, "-m", "turnwatch", "ingest", str(src), "--ledger", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    step_clock(monkeypatch)
    cycle = await one_cycle(path)

    assert names.F_ORPHAN_TOOL_PROCESS in {f.kind for f in cycle.findings}, cycle
    assert procs.alive() == []
