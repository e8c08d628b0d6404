"""Process identity: a recorded process is alive only if its pid *and* start time match.

One pass over ``/proc`` per scan builds a table of live processes; candidates from the ledger are
joined against it, instead of one psutil call per recorded pid, so a scan over tens of thousands
of dead recorded processes stays cheap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

import psutil

#: Start times are compared to this tolerance (psutil derives them from clock ticks).
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


@cache
def _boot_time() -> float:
    return float(psutil.boot_time())


@cache
def _ticks() -> int:
    return int(os.sysconf("SC_CLK_TCK"))


def _read_stat(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        st = os.stat(f"/proc/{pid}")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    state, ppid, pgrp, sid, start_ticks = (
        rest[0],
        int(rest[1]),
        int(rest[2]),
        int(rest[3]),
        int(rest[19]),
    )
    return Proc(
        pid, ppid, _boot_time() + start_ticks / _ticks(), st.st_uid, state == b"Z", pgrp, sid
    )


def read(pid: int) -> Proc | None:
    """One process, read now (``None`` if there is none)."""
    return _read_stat(pid)


class ProcessTable:
    """A snapshot of the live processes, keyed by pid."""

    def __init__(self, procs: dict[int, Proc]) -> None:
        self.procs = procs

    @classmethod
    def scan(cls, pids: set[int] | None = None) -> ProcessTable:
        """Read ``/proc`` once (only ``pids`` when given); elsewhere, fall back to psutil."""
        procs: dict[int, Proc] = {}
        if os.path.isdir("/proc/self"):
            # One listing of /proc, joined with the candidates: cheap however many are recorded.
            live = {int(n) for n in os.listdir("/proc") if n.isdigit()}
            for pid in live if pids is None else live & pids:
                p = _read_stat(pid)
                if p is not None:
                    procs[pid] = p
            return cls(procs)
        for ps in psutil.process_iter(["pid", "ppid", "create_time", "uids", "status"]):
            info = ps.info
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


def same_start(a: float, b: float) -> bool:
    """Two start times of the same process (clock-tick resolution)."""
    return abs(a - b) <= START_TIME_TOLERANCE_S


def ancestors(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and all its ancestors."""
    out: set[int] = set()
    cur = pid if pid is not None else os.getpid()
    while cur > 0 and cur not in out:
        out.add(cur)
        p = _read_stat(cur)
        if p is None:
            try:
                cur = psutil.Process(cur).ppid()
            except psutil.Error:
                break
        else:
            cur = p.ppid
    return out
