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
from typing import Any

import psutil
import pytest

from tests.conftest import Procs, require_cgroups, wait_until
from tests.watchdog.helpers import Recorder
from tests.watchdog.test_cross_process import CFG
from turnwatch.runtime import procfs
from turnwatch.runtime.cgroup import PREFIX, CallCgroup, cgroup_ino, own_cgroup
from turnwatch.runtime.model import FindingKind
from turnwatch.tracing.ledger import Ledger
from turnwatch.watchdog.findings import Action, Finding
from turnwatch.watchdog.loop import Watchdog

OTHER_BOOT = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def reused_path(procs: Procs) -> Iterator[tuple[CallCgroup, psutil.Process, int]]:
    """``turnwatch-<pid>/call-1`` made, removed and made again with a process in it (what a
    runtime with that pid made for a call of its own); and the inode number the first one had.

    The pid is a live process's (not the recorded runtime: its start differs): a runtime starting
    meanwhile in another test worker removes the empty parents of dead pids (``sweep_dead``)."""
    require_cgroups()
    own = own_cgroup()
    assert own is not None
    holder = procs.spawn(["sleep", "300"])
    parent = own / f"{PREFIX}{holder.pid}"
    parent.mkdir()
    (parent / "call-1").mkdir()
    first = cgroup_ino(parent / "call-1")
    assert first is not None
    (parent / "call-1").rmdir()
    (parent / "call-1").mkdir()
    cg = CallCgroup.at(parent / "call-1")
    assert cg is not None
    assert cgroup_ino(cg.path) != first
    proc = subprocess.Popen(cg.wrap(["sleep", "300"]))
    member = procs.track(proc.pid)
    wait_until(lambda: cg.holds(proc.pid), what="the process to enter its cgroup")
    try:
        yield cg, member, first
    finally:
        proc.kill()
        proc.wait()
        wait_until(lambda: not cg.populated(), what="the cgroup to empty")
        for d in (parent / "call-1", parent):
            with contextlib.suppress(OSError):
                d.rmdir()


def stopped_call_in(rec: Recorder, cg: CallCgroup, member: psutil.Process, **start: Any) -> None:
    """A runtime (of the pid the path names, gone: its recorded start is no live process's)
    whose stopped call ran in the cgroup at ``cg``'s path: what its ``tool.started`` said, and
    ``start``."""
    runtime_pid = int(cg.path.parent.name[len(PREFIX) :])
    rec("runtime.started", ago=7200, attrs={"pid": runtime_pid, "create_time": 1.0, **start})
    t, c = "s.t1", "s.c1"
    rec("turn.started", ago=7000, turn=t)
    rec("tool.requested", ago=7000, turn=t, call=c, tool="Bash")
    attrs = {"pid": member.pid, "create_time": 2.0, "containment": "cgroup", "cgroup": str(cg.path)}
    rec("tool.started", ago=6999, turn=t, call=c, tool="Bash", attrs={**attrs, **start})
    rec("stop.clicked", ago=6990, turn=t)
    rec("abort.rpc.received", ago=6990, turn=t, attrs={"source": "ui"})
    rec("tools.abort.sent", ago=6990, turn=t, call=c, tool="Bash")
    rec("tool.finished", ago=6989, turn=t, call=c, tool="Bash", attrs={"outcome": "aborted"})
    rec("turn.settled", ago=6989, turn=t, attrs={"outcome": "aborted"})
    rec("processing.cleared", ago=6989, turn=t)
    rec.close()


async def test_a_cgroup_recorded_in_another_boot_is_not_the_one_at_its_path_now(
    tmp_path: Path, reused_path: tuple[CallCgroup, psutil.Process, int]
) -> None:
    cg, member, _first = reused_path
    path = tmp_path / "ledger.sqlite3"
    # The last boot: a runtime (its pid, the one the path names) and a stopped call in a cgroup.
    stopped_call_in(Recorder(path), cg, member, boot_id=OTHER_BOOT, start_ticks=1234)
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


async def test_a_cgroup_made_again_at_its_path_in_this_boot_is_not_the_recorded_one(
    tmp_path: Path, reused_path: tuple[CallCgroup, psutil.Process, int]
) -> None:
    """The runtime's pid was reused in this boot: the call's cgroup was removed once empty,
    and the pid's next runtime made its own call's at the same path."""
    cg, member, first = reused_path
    path = tmp_path / "ledger.sqlite3"
    stopped_call_in(
        Recorder(path), cg, member, boot_id=procfs.boot_id(), start_ticks=1, cgroup_id=first
    )

    ledger = Ledger(path)
    try:
        dog = Watchdog(path, ledger, ledger.flush, cfg=CFG)
        cycle = await dog.cycle()
        # A finding made before the path was made again, recovered after: judged again.
        late = Finding(
            FindingKind.ORPHAN_TOOL_PROCESS,
            "s",
            "s.t1",
            call="s.c1",
            tool="Bash",
            action=Action.CGROUP_KILL,
            policy="grace",
            cgroup=str(cg.path),
            cgroup_id=first,
        )
        done = await dog.recoverer.recover(late)
    finally:
        ledger.close()

    assert [f.kind for f in cycle.findings if f.cgroup] == []
    assert [a.words for a in cycle.actions] == []
    assert done.result == "refused"
    assert "another cgroup than the call's" in done.detail
    assert member.is_running()
    assert cg.holds(member.pid)
