"""A recorded call cgroup proves its members are the call's only while it is the same cgroup.

A cgroup is named by its path, ``<our cgroup>/turnwatch-<runtime pid>/call-<n>``, and a path
is made again: a service started at boot often has the same pid every boot, and its calls are
numbered from 1 again. A ledger that outlives a reboot holds the last boot's stopped calls with
their cgroups; the watchdog read the members of the path as theirs and ended them, another
runtime's calls made at the same path this boot.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import Procs, require_cgroups, wait_until
from tests.watchdog.helpers import Recorder
from tests.watchdog.test_cross_process import CFG
from turnwatch.runtime import procfs
from turnwatch.runtime.cgroup import PREFIX, CallCgroup, own_cgroup
from turnwatch.tracing.ledger import Ledger
from turnwatch.watchdog.loop import Watchdog

OTHER_BOOT = "00000000-0000-4000-8000-000000000000"


def dead_pid() -> int:
    """A pid no process has now (a short-lived child's, waited for)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture
def reused_path(procs: Procs) -> Iterator[tuple[CallCgroup, psutil.Process]]:
    """``turnwatch-<pid>/call-1`` of a runtime pid that is not alive, made now, a process in it:
    what a runtime with that pid made this boot for a call of its own."""
    require_cgroups()
    own = own_cgroup()
    assert own is not None
    parent = own / f"{PREFIX}{dead_pid()}"
    parent.mkdir()
    (parent / "call-1").mkdir()
    cg = CallCgroup.at(parent / "call-1")
    assert cg is not None
    proc = subprocess.Popen(cg.wrap(["sleep", "300"]))
    member = procs.track(proc.pid)
    wait_until(lambda: cg.holds(proc.pid), what="the process to enter its cgroup")
    try:
        yield cg, member
    finally:
        proc.kill()
        proc.wait()
        wait_until(lambda: not cg.populated(), what="the cgroup to empty")
        for d in (parent / "call-1", parent):
            with contextlib.suppress(OSError):
                d.rmdir()


async def test_a_cgroup_recorded_in_another_boot_is_not_the_one_at_its_path_now(
    tmp_path: Path, reused_path: tuple[CallCgroup, psutil.Process]
) -> None:
    cg, member = reused_path
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    # The last boot: a runtime (its pid, the one the path names) and a stopped call in a cgroup.
    runtime_pid = int(cg.path.parent.name[len(PREFIX) :])
    boot = {"start_ticks": 1234, "boot_id": OTHER_BOOT}
    rec("runtime.started", ago=7200, attrs={"pid": runtime_pid, "create_time": 1.0, **boot})
    t, c = "s.t1", "s.c1"
    rec("turn.started", ago=7000, turn=t)
    rec("tool.requested", ago=7000, turn=t, call=c, tool="Bash")
    started = {
        "pid": member.pid,
        "create_time": 2.0,
        "containment": "cgroup",
        "cgroup": str(cg.path),
    }
    rec("tool.started", ago=6999, turn=t, call=c, tool="Bash", attrs={**started, **boot})
    rec("stop.clicked", ago=6990, turn=t)
    rec("abort.rpc.received", ago=6990, turn=t, attrs={"source": "ui"})
    rec("tools.abort.sent", ago=6990, turn=t, call=c, tool="Bash")
    rec("tool.finished", ago=6989, turn=t, call=c, tool="Bash", attrs={"outcome": "aborted"})
    rec("turn.settled", ago=6989, turn=t, attrs={"outcome": "aborted"})
    rec("processing.cleared", ago=6989, turn=t)
    rec.close()
    assert procfs.boot_id() != OTHER_BOOT

    ledger = Ledger(path)
    try:
        cycle = await Watchdog(path, ledger, ledger.flush, cfg=CFG).cycle()
    finally:
        ledger.close()

    assert [f.kind for f in cycle.findings if f.cgroup] == []
    assert [a.words for a in cycle.actions] == []
    assert member.is_running()
    assert member.status() != psutil.STATUS_ZOMBIE
    assert cg.holds(member.pid)
