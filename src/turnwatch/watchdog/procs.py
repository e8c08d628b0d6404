"""Process identity for the watchdog: the runtime's ``/proc`` table, and our own ancestry.

A recorded process is alive only if its pid *and* start time match. One pass over ``/proc`` per
scan builds the table; candidates from the ledger are joined against it, instead of one psutil
call per recorded pid, so a scan over tens of thousands of dead recorded processes stays cheap.
"""

from __future__ import annotations

import os

import psutil

from turnwatch.runtime.procfs import Proc, ProcessTable, read, same_start

__all__ = ["Proc", "ProcessTable", "ancestors", "read", "same_start"]


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
        try:
            cur = psutil.Process(cur).ppid()
        except psutil.Error:
            break
    return out
