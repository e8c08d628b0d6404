"""Signalling only what we can prove is the recorded process (invariant 5).

A recorded process is proven by its pid *and* start time, a cgroup's member by its membership; a
call's environment marker proves nothing (it can be copied). Every signal goes through a pidfd
opened first and verified second (:class:`turnwatch.runtime.terminate.Pidfds`, with
:meth:`Guard.check` as the verdict): once the pidfd is open it names one process for good, so a
start time read afterwards that matches the record proves the pidfd is the recorded process, and
the signal cannot reach a reused pid. Never pid <= 1, never this process or its ancestors, never
our own process group or session, never another user's.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from turnwatch.runtime.procfs import (
    Proc,
    ProcessTable,
    ancestors,
    environ_has,
    identity,
    same_start,
)
from turnwatch.runtime.tools.proctree import CALL_MARKER


@dataclass(frozen=True, slots=True)
class Target:
    """A process as the ledger recorded it."""

    pid: int
    create_time: float


@dataclass
class Guard:
    """Refuses unsafe targets and counts each refusal by reason."""

    me: int = field(default_factory=os.getpid)
    refusals: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._ancestors = ancestors(self.me)
        self._pgrp = os.getpgrp()
        self._sid = os.getsid(0)
        self._uid = os.getuid()

    @property
    def protected(self) -> set[int]:
        """This process and its ancestors: never signalled, never in a cgroup we kill."""
        return set(self._ancestors) | {self.me}

    def refuse(self, target: Target, seen: Proc | None) -> str | None:
        """Why ``target`` must not be signalled, or None if it may be."""
        reason = self._reason(target, seen)
        if reason is not None:
            self.refusals[reason] += 1
        return reason

    def _reason(self, target: Target, seen: Proc | None) -> str | None:
        if target.pid <= 1:
            return "pid_le_1"
        if target.pid == self.me:
            return "self"
        if target.pid in self._ancestors:
            return "ancestor"
        if (mismatch := identity(seen, target.create_time)) is not None:
            return mismatch
        assert seen is not None
        if seen.pgrp == self._pgrp:
            return "own_process_group"
        if seen.sid == self._sid:
            return "own_session"
        if seen.uid != self._uid:
            return "other_user"
        return None

    def check(self, pid: int, create_time: float, seen: Proc | None) -> str | None:
        """:meth:`refuse` as a :data:`~turnwatch.runtime.terminate.Refuse`, for ``Pidfds``."""
        return self.refuse(Target(pid, create_time), seen)


def members(leader: Target, table: ProcessTable) -> list[Target]:
    """The recorded process, its process group and its descendants: what the record proves.

    Only while the leader itself is alive with its recorded start time: then its group id and
    its children are still its own.
    """
    lead = table.get(leader.pid)
    if lead is None or not same_start(lead.create_time, leader.create_time):
        return []
    found: dict[int, Proc] = {lead.pid: lead}
    # Same group (the group id is the leader's pid: process tools run in their own session).
    found.update((p.pid, p) for p in table.procs.values() if p.pgrp == leader.pid)
    found.update((p.pid, p) for p in table.descendants(leader.pid))
    return [Target(p.pid, p.create_time) for p in found.values() if not p.zombie]


def candidates(marker: str, table: ProcessTable, proven: Iterable[Target]) -> list[int]:
    """Processes carrying the call's marker outside what the record proves: a marker can be
    copied (a user's shell, ``env``), so these are reported, never signalled."""
    uid = os.getuid()
    known = {t.pid for t in proven}
    return [
        p.pid
        for p in table.procs.values()
        if p.pid not in known
        and p.uid == uid
        and not p.zombie
        and environ_has(p.pid, CALL_MARKER, marker)
    ]
