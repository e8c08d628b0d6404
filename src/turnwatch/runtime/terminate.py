"""One terminator: SIGTERM, the grace window, SIGKILL for what is left; (gone, alive).

The runtime's process tools and the watchdog's recoverer both use :func:`terminate`. It waits on
events, never on a clock: a pidfd becomes readable when its process exits, whether it is our
child or a re-parented stranger; a cgroup's ``cgroup.events`` changes when the cgroup empties.

A target is one of:

- :class:`Pidfds`: processes named by ``(pid, start time)``. Each is opened as a pidfd and then
  verified once (the start time read *after* opening matches the record); from then on the pidfd
  names that one process for good, so a signal can never reach a reused pid.
- :class:`CgroupTarget`: every process in a call's cgroup. Membership is the proof: each pid
  listed is opened as a pidfd and checked to still be in the cgroup before it is signalled, and
  the final blow is ``cgroup.kill``, which the kernel applies to members only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from turnwatch.runtime.cgroup import CallCgroup
from turnwatch.runtime.clock import REAL, Clock
from turnwatch.runtime.model import Signalled
from turnwatch.runtime.procfs import Proc, identity, read

#: How long after SIGKILL (or ``cgroup.kill``) we wait to see every member gone: a process call is
#: released once its end is seen (every pidfd readable, the cgroup's ``populated 0``), at most this
#: long after its grace window. A killed process still has to be scheduled to exit: on a machine
#: whose cores are kept busy, 1 s was not always enough (#35). Past it, the call is released with
#: its survivors recorded, and the watchdog finds them.
KILL_WAIT_S = 5.0

#: Why a process must not be signalled (None: it may be). Sees the process as read after the
#: pidfd was opened. The default is the identity check; the watchdog passes a stricter one.
Refuse = Callable[[int, float, Proc | None], str | None]


def _same_process(pid: int, create_time: float, seen: Proc | None) -> str | None:
    return identity(seen, create_time)


class Target(Protocol):
    """What :func:`terminate` ends."""

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every member that is proven to be one."""

    def kill(self) -> None:
        """The final blow: SIGKILL to every member, late forks included."""

    async def wait_gone(self, timeout: float) -> bool:
        """Until every member is gone (True), or ``timeout`` seconds (False)."""

    def members(self) -> dict[int, float]:
        """The members alive now, ``pid -> start time``."""


@dataclass
class Ended:
    """What :func:`terminate` achieved."""

    gone: list[int]
    alive: list[int]
    by: Signalled


class Pidfds:
    """Processes held by verified pidfds; exits observed by the event loop."""

    def __init__(
        self, members: Mapping[int, float] | None = None, refuse: Refuse | None = None
    ) -> None:
        self.refuse = refuse or _same_process
        #: pid -> (pidfd, start time), for members proven and not yet seen gone.
        self.fds: dict[int, tuple[int, float]] = {}
        #: pid -> why it was not taken (``gone`` included).
        self.refused: dict[int, str] = {}
        #: Every pid ever taken: one that exited is not taken again (its pid may be reused).
        self.taken: set[int] = set()
        self.add(members or {})

    def add(self, members: Mapping[int, float]) -> None:
        """Open and verify pidfds for members not held yet."""
        for pid, create_time in members.items():
            if pid in self.taken:
                continue
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                self.refused[pid] = "gone"
                continue
            except OSError:
                self.refused[pid] = "pidfd_unavailable"
                continue
            reason = self.refuse(pid, create_time, read(pid))
            if reason is not None:
                os.close(fd)
                self.refused[pid] = reason
                continue
            self.fds[pid] = (fd, create_time)
            self.taken.add(pid)

    def signal(self, sig: int, *, unless: Callable[[int], bool] | None = None) -> None:
        """Send ``sig`` to each member held, but those ``unless`` says already got it."""
        for pid, (fd, _ct) in self.fds.items():
            if unless is not None and unless(pid):
                continue
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def _drop_exited(self) -> None:
        """Close the pidfds of members that exited (a pidfd is readable once its process is)."""
        if not self.fds:
            return
        poll = select.poll()  # not select(): it cannot take an fd past 1023
        by_fd = {fd: pid for pid, (fd, _ct) in self.fds.items()}
        for fd in by_fd:
            poll.register(fd, select.POLLIN)
        for fd, _events in poll.poll(0):
            os.close(self.fds.pop(by_fd[fd])[0])

    async def wait_gone(self, timeout: float) -> bool:
        self._drop_exited()
        if not self.fds:
            return True
        import asyncio  # here: the watchdog's look imports this module and runs no loop

        loop = asyncio.get_running_loop()
        all_gone = asyncio.Event()

        def exited(pid: int, fd: int) -> None:
            loop.remove_reader(fd)  # a pidfd stays readable: one callback, not a busy spin
            if self.fds.get(pid, (None,))[0] == fd:
                os.close(self.fds.pop(pid)[0])
            if not self.fds:
                all_gone.set()

        watched = list(self.fds.items())
        for pid, (fd, _ct) in watched:
            loop.add_reader(fd, exited, pid, fd)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_gone.wait(), max(timeout, 0.0))
        finally:
            for _pid, (fd, _ct) in watched:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(fd)
        return not self.fds

    def members(self) -> dict[int, float]:
        self._drop_exited()
        return {pid: ct for pid, (_fd, ct) in self.fds.items()}

    def close(self) -> None:
        for fd, _ct in self.fds.values():
            os.close(fd)
        self.fds.clear()


@dataclass
class CgroupTarget:
    """Every process of one call's cgroup."""

    cgroup: CallCgroup

    def signal(self, sig: int) -> None:
        for pid in self.cgroup.members():
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue  # gone meanwhile
            try:
                # Opened first, checked second: a pid reused after it left the cgroup fails here.
                if self.cgroup.holds(pid):
                    with contextlib.suppress(ProcessLookupError):
                        signal.pidfd_send_signal(fd, sig)
            finally:
                os.close(fd)

    def kill(self) -> None:
        self.cgroup.kill()

    async def wait_gone(self, timeout: float) -> bool:
        return await self.cgroup.wait_empty(timeout)

    def members(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for pid in self.cgroup.members():
            p = read(pid)
            if p is not None and not p.zombie:
                out[pid] = p.create_time
        return out


async def terminate(
    target: Target,
    grace_s: float,
    *,
    kill_wait_s: float = KILL_WAIT_S,
    term: bool = True,
    clock: Clock = REAL,
) -> Ended:
    """SIGTERM every member, wait up to ``grace_s`` (on ``clock``) for all to go, then SIGKILL
    the rest and wait ``kill_wait_s`` (real time: the kernel's) to see them gone.

    ``term=False`` skips the SIGTERM: a termination resumed after its SIGTERM went out (the
    watchdog's journal) only waits out the rest of the window.
    """
    first = set(target.members())
    if not first:
        return Ended([], [], Signalled.NONE)
    if term:
        target.signal(signal.SIGTERM)
    if await clock.limit(target.wait_gone, grace_s):
        return Ended(sorted(first), [], Signalled.SIGTERM)
    target.kill()
    await target.wait_gone(kill_wait_s)
    alive = target.members()
    return Ended(sorted(first - alive.keys()), sorted(alive), Signalled.SIGKILL)
