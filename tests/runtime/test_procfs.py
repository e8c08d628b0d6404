"""Process identity read from ``/proc`` agrees with psutil's, which the rest of the world uses.

procfs reads the boot time itself (psutil's own source line) so the triage commands need not
import psutil; a recorded start time must still match what psutil says of the same process.
"""

from __future__ import annotations

import subprocess

import psutil

from turnwatch.runtime import procfs


def test_start_times_from_proc_are_psutils() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        seen = procfs.read(child.pid)
        assert seen is not None
        assert procfs.same_start(seen.create_time, psutil.Process(child.pid).create_time())
        assert procfs.ProcessTable.scan({child.pid}).alive(child.pid, seen.create_time)
        assert not procfs.ProcessTable.scan({child.pid}).alive(child.pid, seen.create_time - 1)
    finally:
        child.kill()
        child.wait()
    assert procfs.read(child.pid) is None
