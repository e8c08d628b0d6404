"""A tool's process tree: find every member, signal only the recorded ones, reap what we adopt.

A process group is not a tree (``setsid`` leaves the group), so a stop signals the group and also
the tree: the root's descendants, plus escapees the host adopted as child subreaper, recognised
by the call marker in their environment. Concurrent stops share one ``/proc`` scan
(:class:`SharedScan`): a hundred Bash calls stopped together cost one scan, not a hundred.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from turnwatch.runtime.procfs import (
    Proc,
    ProcessTable,
    child_pids,
    children_files,
    environ_has,
    read,
)

if TYPE_CHECKING:
    import asyncio

#: Environment variable every tool process carries: ``session/call_id``.
CALL_MARKER = "TURNWATCH_CALL"
_PR_SET_CHILD_SUBREAPER = 36

#: Tool processes this host spawned and has not reaped: our children that are *not* escapees.
#: Anything else among our direct children was adopted (we are a subreaper).
SPAWNED: set[int] = set()

Members = dict[int, float]  # pid -> start time


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); True if it now is one."""
    if not sys.platform.startswith("linux"):
        return False
    # Imported here: ctypes costs every importer of CALL_MARKER (the watchdog's commands, which
    # never become subreapers) about 2 ms of start-up (#31).
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


class SharedScan:
    """One ``/proc`` scan in a worker thread, shared by every caller that asks meanwhile."""

    def __init__(self, max_age_s: float = 0.005) -> None:
        self.max_age_s = max_age_s
        self._task: asyncio.Future[ProcessTable] | None = None
        self._at = 0.0

    async def table(self) -> ProcessTable:
        import asyncio  # here: the watchdog's look imports this module and runs no loop

        fresh = self._task is not None and (
            not self._task.done() or time.monotonic() - self._at < self.max_age_s
        )
        if not fresh:
            self._at = time.monotonic()
            self._task = asyncio.ensure_future(asyncio.to_thread(ProcessTable.scan))
        assert self._task is not None
        return await asyncio.shield(self._task)


SCAN = SharedScan()


def tree(root: int, marker: str) -> Members:
    """:func:`members` from the kernel's children lists: O(tree), cheap enough for the loop.

    Only while ``root`` is unreaped: its process group id is then still the call's. A kernel
    without the lists (no ``CONFIG_PROC_CHILDREN``; gVisor's ``/proc``) gets one scan of
    ``/proc`` instead: read there, the missing lists found the root and none of its descendants,
    and a stop ended what a finished call left re-parented here but not that one's children.
    """
    if not children_files():
        return members(ProcessTable.scan(), root, marker)
    found: Members = {}

    def walk(pid: int) -> None:
        stack = [pid]
        while stack:
            cur = stack.pop()
            p = read(cur)
            if p is None or cur in found:
                continue
            found[cur] = p.create_time
            stack.extend(child_pids(cur))

    walk(root)
    for child in own_children():
        if child not in found and child not in SPAWNED:
            p = read(child)
            if p is not None and _adopted_member(p, root, marker):
                walk(child)
    return found


def _adopted_member(p: Proc, root: int, marker: str) -> bool:
    """An orphan adopted here is the call's if it is in the call's process group (the root is
    unreaped, so the group id is still the call's; this holds for a zombie too, whose
    environment reads empty) or carries the call's marker."""
    return p.pgrp == root or environ_has(p.pid, CALL_MARKER, marker)


def own_children() -> list[int]:
    """This process's children forked by this thread, plus the orphans it adopted (which the
    kernel gives to the main thread); not the children of every worker thread."""
    me = os.getpid()
    if children_files():
        return child_pids(me, {me, threading.get_native_id()})
    return [p.pid for p in ProcessTable.scan().children(me)]


async def snapshot(root: int, marker: str) -> Members:
    """The call's tree now: via children lists, else one /proc scan shared by concurrent stops."""
    if children_files():
        return tree(root, marker)
    return members(await SCAN.table(), root, marker)


def members(table: ProcessTable, root: int, marker: str) -> Members:
    """The root, its descendants, and adopted escapees carrying ``marker`` (with theirs)."""
    found: Members = {}
    r = table.get(root)
    if r is not None:
        found[root] = r.create_time
        found.update((p.pid, p.create_time) for p in table.descendants(root))
    for child in table.children(os.getpid()):
        if child.pid in found or child.pid in SPAWNED:
            continue
        if _adopted_member(child, root, marker):
            found[child.pid] = child.create_time
            found.update((p.pid, p.create_time) for p in table.descendants(child.pid))
    return found


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group whose leader we have not reaped yet (so its pgid is still ours)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def alive(found: Members) -> Members:
    """The members still running; a zombie counts as dead (and is reaped if it is ours)."""
    left: Members = {}
    me = os.getpid()
    for pid, ct in found.items():
        p = read(pid)  # each member directly: O(members), not a listing of all of /proc
        if p is None or abs(p.create_time - ct) > 0.05:
            continue
        if p.zombie:
            if p.ppid == me and pid not in SPAWNED:
                reap(pid)
            continue
        left[pid] = ct
    return left


def reap(pid: int) -> None:
    """Collect our zombie child ``pid`` (adopted as subreaper); a no-op when it is not ours."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
