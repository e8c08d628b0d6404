"""A runtime killed (SIGKILL, the OOM killer, a power cut) never removes its parent cgroup,
``turnwatch-<pid>``: on a host that restarts runtimes for months they piled up (661 on this CI
machine after a few days of tests). The next runtime to start removes those of dead runtimes
that are empty, and never one that still holds a process (the watchdog's to end, by its
membership) or whose runtime lives."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import Procs, require_cgroups
from turnwatch.runtime.cgroup import PREFIX, CgroupRoot, own_cgroup


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_starting_runtime_removes_the_empty_cgroups_of_dead_runtimes(procs: Procs) -> None:
    require_cgroups()
    own = own_cgroup()
    assert own is not None
    empty = own / f"{PREFIX}{dead_pid()}"
    (empty / "call-1").mkdir(parents=True)
    (empty / "call-2").mkdir()
    held = own / f"{PREFIX}{dead_pid()}"
    (held / "call-1").mkdir(parents=True)
    sleeper = procs.spawn(["sleep", "60"])
    (held / "call-1" / "cgroup.procs").write_text(str(sleeper.pid))
    alive = own / f"{PREFIX}{sleeper.pid}"  # a live pid's: not ours to judge
    alive.mkdir()
    try:
        root = CgroupRoot.probe()
        assert root is not None
        root.close()
        assert not empty.exists()
        assert (held / "call-1").exists()  # a process in it: left for the watchdog
        assert alive.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        for d in (held / "call-1", held, alive):
            if d.exists():
                d.rmdir()
