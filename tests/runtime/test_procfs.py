"""Process identity read from ``/proc`` agrees with psutil's, which the rest of the world uses,
and survives a wall-clock step through the kernel's own start ticks.

procfs reads the boot time itself (psutil's own source line) so the triage commands need not
import psutil; a recorded start time must still match what psutil says of the same process.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import psutil
import pytest

from tests.watchdog.helpers import STEP_S, step_clock
from turnwatch import names
from turnwatch.runtime import procfs


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "30"])
    yield child
    child.kill()
    child.wait()
    assert procfs.read(child.pid) is None


def test_start_times_from_proc_are_psutils(sleeper: subprocess.Popen[bytes]) -> None:
    seen = procfs.read(sleeper.pid)
    assert seen is not None
    # Each against its own boot time (a clock step between the two reads moves one of them).
    boot = psutil.boot_time()
    since_boot = psutil.Process(sleeper.pid).create_time() - boot
    assert procfs.same_start(seen.create_time - procfs._boot_time(), since_boot)  # noqa: SLF001
    assert seen.ticks is not None
    assert procfs.same_start(seen.ticks / procfs._ticks(), since_boot)  # noqa: SLF001
    assert procfs.ProcessTable.scan({sleeper.pid}).alive(sleeper.pid, seen.create_time)
    assert not procfs.ProcessTable.scan({sleeper.pid}).alive(sleeper.pid, seen.create_time - 1)


def test_a_start_recorded_with_its_ticks_is_read_on_this_clock_after_a_step(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = procfs.read(sleeper.pid)
    assert seen is not None
    kept = procfs.start_attrs(seen)
    assert kept == {names.K_START_TICKS: seen.ticks, names.K_BOOT_ID: procfs.boot_id()}

    step_clock(monkeypatch)
    now = procfs.read(sleeper.pid)
    assert now is not None
    assert now.create_time == pytest.approx(seen.create_time + STEP_S)  # the step, as seen
    assert now.ticks == seen.ticks  # the kernel's own record: unmoved
    # Recorded with its ticks: exactly where a look here puts it, so proved the same.
    start = procfs.local_start(seen.create_time, kept[names.K_START_TICKS], procfs.boot_id())
    assert start == now.create_time
    assert procfs.ProcessTable.scan({sleeper.pid}).alive(sleeper.pid, start)
    # Recorded with its wall time only: as recorded, which no longer proves it.
    assert procfs.local_start(seen.create_time, None, None) == seen.create_time
    assert not procfs.ProcessTable.scan({sleeper.pid}).alive(sleeper.pid, seen.create_time)


def test_a_start_of_another_boot_is_no_process_running_now() -> None:
    assert procfs.boot_id() is not None
    assert procfs.local_start(123.0, 500, "another-boot") is None
    # Ticks of an odd type (a hand-edited ledger) prove nothing beyond the wall time.
    assert procfs.local_start(123.0, "500", procfs.boot_id()) == 123.0
    assert procfs.local_start(123.0, True, procfs.boot_id()) == 123.0
    assert procfs.start_attrs(None) == {}


def test_the_wall_shift_is_none_without_a_step_and_the_step_after_one(
    sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start time plus the shift is where the wall clock puts that start now: this process's
    boot time is whole seconds, so no step reads as none; after one it is minus the step."""
    assert procfs.wall_shift() == 0.0
    seen = procfs.read(sleeper.pid)
    assert seen is not None
    step_clock(monkeypatch, by=30.0)  # the boot time this process read, 30 s ahead of the clock
    after = procfs.read(sleeper.pid)
    assert after is not None
    assert after.create_time == pytest.approx(seen.create_time + 30.0)
    assert after.create_time + procfs.wall_shift() == pytest.approx(seen.create_time, abs=1.0)
