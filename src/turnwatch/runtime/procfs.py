"""Process identity from ``/proc``: a process is ``(pid, start time)``, never a pid alone.

A start time on the wall clock is only as steady as that clock: ``/proc/stat``'s ``btime`` is
the wall clock less the time since boot, so a clock step (NTP, a VM paused, restored or forked)
moves every start time computed after it. Each process reads ``btime`` once, so its own start
times agree with each other for its life; across processes they agree through the kernel's own
record, the start in clock ticks since boot (:attr:`Proc.ticks`) with the boot's id, which a
recorder keeps beside the wall time and a reader turns into its own clock
(:func:`local_start`).

One listing of ``/proc`` builds a :class:`ProcessTable`; callers join their candidates against it
instead of asking about each pid. Signals go through verified pidfds
(:class:`turnwatch.runtime.terminate.Pidfds`), so one can never reach a process that reused a
recorded pid.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from turnwatch import names

#: Start times are compared to this tolerance (they are derived from clock ticks).
START_TIME_TOLERANCE_S = 0.05


@dataclass(frozen=True, slots=True)
class Proc:
    """A live process as one scan saw it."""

    pid: int
    ppid: int
    create_time: float
    uid: int
    zombie: bool
    pgrp: int = 0
    sid: int = 0
    #: The kernel's start, in clock ticks since boot (``/proc/PID/stat`` field 22): no clock
    #: step moves it. None where it was not read (no ``/proc``).
    ticks: int | None = None


@cache
def _boot_time() -> float:
    # The line psutil.boot_time() reads on Linux, read here so that the triage commands, which
    # only ever read /proc, do not import psutil (~20 ms of their start-up): start times computed
    # here and by psutil agree exactly.
    with contextlib.suppress(OSError), open("/proc/stat", "rb") as fh:
        for line in fh:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    import psutil

    return float(psutil.boot_time())


@cache
def _ticks() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


@cache
def boot_id() -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), or None where there is none."""
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as fh:
        return fh.read().strip() or None
    return None


#: ``btime`` is whole seconds: a process's start times sit up to this far before the wall clock's
#: own reading of the boot without any step.
_BTIME_TRUNCATION_S = 1.0


def wall_shift() -> float:
    """What to add to a start time this process computes to put it on the wall clock as it reads
    now: 0.0 until the clock stepped since this process read ``btime`` (then minus the step).

    A long-lived reader (the watchdog) compares start times with times other programs wrote
    (an agent CLI's log): those follow the clock as it was when written, its own start times the
    clock as it was when it started.
    """
    boottime = getattr(time, "CLOCK_BOOTTIME", None)  # Linux's; elsewhere no /proc to compare
    if boottime is None:
        return 0.0
    shift = time.time() - time.clock_gettime(boottime) - _boot_time()
    return shift if abs(shift) > _BTIME_TRUNCATION_S else 0.0


def local_start(create_time: float | None, ticks: object, boot: object) -> float | None:
    """A recorded start time on this process's clock, where :func:`read` would put it.

    Recorded with the kernel's start (``ticks``) and ``boot``: that start read against this
    boot's time, so that a clock step between the record and now changes nothing; a process of
    another boot is not running now (None: never proved alive, never signalled). Recorded with
    the wall time only (an older turnwatch, a foreign runtime): that time, as recorded.
    """
    if type(ticks) is not int or type(boot) is not str:
        return create_time
    if boot != boot_id():
        return None
    return _boot_time() + ticks / _ticks()  # read()'s very expression: equal, not just close


def read(pid: int) -> Proc | None:
    """One process, read now (``None`` if there is none)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    ticks = int(rest[19])
    return Proc(
        pid,
        int(rest[1]),
        _boot_time() + ticks / _ticks(),
        uid,
        rest[0] == b"Z",
        int(rest[2]),
        int(rest[3]),
        ticks,
    )


def start_attrs(seen: Proc | None) -> dict[str, int | str]:
    """What a record of ``seen`` keeps beside its wall start time, so that a reader in another
    process, after a clock step, still proves it the same (:func:`local_start`): its start in
    ticks and the boot's id; nothing where either is unknown."""
    boot = boot_id()
    if seen is None or seen.ticks is None or boot is None:
        return {}
    return {names.K_START_TICKS: seen.ticks, names.K_BOOT_ID: boot}


def same_start(a: float, b: float) -> bool:
    """Two start times of the same process (clock-tick resolution)."""
    return abs(a - b) <= START_TIME_TOLERANCE_S


class ProcessTable:
    """A snapshot of live processes, keyed by pid."""

    def __init__(self, procs: dict[int, Proc]) -> None:
        self.procs = procs
        self._children: dict[int, list[Proc]] | None = None

    @classmethod
    def scan(cls, pids: set[int] | None = None) -> ProcessTable:
        """Read ``/proc`` once (only ``pids`` when given); elsewhere, fall back to psutil."""
        procs: dict[int, Proc] = {}
        if os.path.isdir("/proc/self"):
            live = {int(n) for n in os.listdir("/proc") if n.isdigit()}
            for pid in live if pids is None else live & pids:
                p = read(pid)
                if p is not None:
                    procs[pid] = p
            return cls(procs)
        import psutil  # no /proc here (not Linux)

        for ps in psutil.process_iter(["pid", "ppid", "create_time", "uids", "status"]):
            info = ps.info
            if pids is not None and info["pid"] not in pids:
                continue
            procs[info["pid"]] = Proc(
                info["pid"],
                info["ppid"] or 0,
                info["create_time"],
                info["uids"].real if info["uids"] else -1,
                info["status"] == psutil.STATUS_ZOMBIE,
            )
        return cls(procs)

    def alive(self, pid: int | None, create_time: float | None) -> bool:
        """The recorded process (pid and start time) is running, and not a zombie."""
        if pid is None or create_time is None:
            return False
        p = self.procs.get(pid)
        return p is not None and not p.zombie and same_start(p.create_time, create_time)

    def get(self, pid: int) -> Proc | None:
        return self.procs.get(pid)

    def children(self, pid: int) -> list[Proc]:
        """Direct children of ``pid`` in this snapshot."""
        if self._children is None:
            self._children = {}
            for p in self.procs.values():
                self._children.setdefault(p.ppid, []).append(p)
        return self._children.get(pid, [])

    def descendants(self, pid: int) -> list[Proc]:
        """Every process below ``pid`` in this snapshot."""
        out: list[Proc] = []
        stack = [pid]
        while stack:
            for child in self.children(stack.pop()):
                out.append(child)
                stack.append(child.pid)
        return out


@cache
def children_files() -> bool:
    """Whether this kernel lists children in ``/proc/PID/task/TID/children``."""
    return os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def child_pids(pid: int, tids: Iterable[int] | None = None) -> list[int]:
    """The direct children of ``pid``, from its threads' ``children`` files (O(children)).

    A child is listed under the thread that forked it; ``tids`` limits the threads read (the
    host passes its own two, not the hundred worker threads it may run). Use only where
    :func:`children_files` is true; a process that is gone has none.
    """
    out: list[int] = []
    if tids is None:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return out
    for tid in tids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as fh:
            out.extend(int(x) for x in fh.read().split())
    return out


def ancestors(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and all its ancestors."""
    out: set[int] = set()
    cur = pid if pid is not None else os.getpid()
    while cur > 0 and cur not in out:
        out.add(cur)
        p = read(cur)
        if p is not None:
            cur = p.ppid
            continue
        import psutil  # no /proc entry to read (not Linux, or a hidden /proc): ask psutil

        try:
            cur = psutil.Process(cur).ppid()
        except psutil.Error:
            break
    return out


def environ_has(pid: int, key: str, value: str) -> bool:
    """``key=value`` is in the process's environment (readable for our own user)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as fh:
        return f"{key}={value}".encode() in fh.read().split(b"\0")
    return False


def identity(seen: Proc | None, create_time: float) -> str | None:
    """Why ``seen`` is not the recorded process, or None if it is."""
    if seen is None:
        return "gone"
    if not same_start(seen.create_time, create_time):
        return "start_time_differs"
    return None
