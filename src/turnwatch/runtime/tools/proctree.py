"""A tool's process tree: find every member, signal only the recorded ones, reap what we adopt.

A process is ``(pid, create_time)``, never a pid alone: psutil's ``Process`` checks the start time
before it signals. A process group is not a tree (``setsid`` leaves the group), so a stop snapshots
the tree as well as signalling the group, and finds escapees by the call marker in their
environment. On Linux the host is a child subreaper, so escapees re-parent to it and stay findable.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

import psutil

#: Environment variable every tool process carries: ``session/call_id``.
CALL_MARKER = "TURNWATCH_CALL"
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux); True if it now is one."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _has_marker(proc: psutil.Process, marker: str) -> bool:
    try:
        return proc.environ().get(CALL_MARKER) == marker
    except (psutil.Error, OSError):
        return False


def snapshot(root_pid: int, marker: str) -> dict[int, psutil.Process]:
    """Every live member of the call's tree: the root's descendants and marked escapees."""
    members: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(root_pid)
        members[root.pid] = root
        for child in root.children(recursive=True):
            members[child.pid] = child
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children(recursive=True):
            if child.pid not in members and _has_marker(child, marker):
                members[child.pid] = child
    return members


def signal_group(pgid: int, sig: int) -> None:
    """Signal a process group whose leader we have not reaped yet (so its pgid is still ours)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_members(members: dict[int, psutil.Process], sig: int) -> None:
    """Signal each member; psutil refuses a pid whose start time no longer matches."""
    for proc in members.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def alive(members: dict[int, psutil.Process]) -> dict[int, psutil.Process]:
    """The members still running; a zombie counts as dead (and is reaped if it is ours)."""
    left: dict[int, psutil.Process] = {}
    me = os.getpid()
    for pid, proc in members.items():
        try:
            if not proc.is_running():
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                if proc.ppid() == me:
                    reap(pid)
                continue
        except psutil.Error:
            continue
        left[pid] = proc
    return left


def reap(pid: int) -> None:
    """Collect our zombie child ``pid`` (adopted as subreaper); a no-op when it is not ours."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def kill_all(members: dict[int, psutil.Process]) -> None:
    """SIGKILL every member still alive."""
    signal_members(alive(members), signal.SIGKILL)
