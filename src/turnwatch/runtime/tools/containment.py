"""Where a process call's processes live, what outlives the call, and who reaps the orphans.

Two modes (design §2, invariant 3):

- ``cgroup``: each call runs in a cgroup of its own (:mod:`turnwatch.runtime.cgroup`). Nothing a
  tool does takes a process out of it, so a stop ends every process the call started.
- ``process_group``, where no writable cgroup2 hierarchy can be had: the call's process group,
  its tree, and, this host being a child subreaper, the orphans that re-parent here and still
  carry the call's marker. Its known holes: a process that both leaves the group (``setsid``)
  and drops the marker (``env -i``), or that is orphaned while this host is no subreaper, is not
  found, and so not stopped.

A call that ends while processes it started live on (``cmd &``) leaves them *lingering*: they
belong to the call, the turn's stop ends them (:meth:`Containers.abort_turn`), and the ledger
records them. As a subreaper the host also reaps exactly the orphans it can attribute to a call:
by cgroup (a zombie keeps its cgroup) or because it saw them as members. It never reaps a child
that asyncio or ``subprocess`` waits for.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from turnwatch.runtime import procfs, terminate
from turnwatch.runtime.cgroup import CallCgroup, CgroupRoot, cgroup_of, is_call_cgroup
from turnwatch.runtime.model import TurnwatchError
from turnwatch.runtime.protocol import ExecuteRequest, Reaped, TurnAbortRequest
from turnwatch.runtime.tools import proctree


class Containment(StrEnum):
    """How a process call is kept together (``tool.started``'s ``attrs.containment``)."""

    CGROUP = "cgroup"
    PROCESS_GROUP = "process_group"


#: Process-group mode's known holes, as ``tool.started`` names them (README: Containment).
HOLE_SETSID_AND_SCRUBBED = "setsid_and_env_scrubbed"  # left the group and dropped the marker
HOLE_NO_SUBREAPER = "orphan_without_subreaper"  # orphans re-parent to init, out of sight
HOLE_LATE_FORK = "fork_after_last_scan"  # forked between the last scan and SIGKILL


class ContainmentError(TurnwatchError, RuntimeError):
    """``cgroup`` containment was asked for and cannot be had here."""


class GroupTarget:
    """A process group whose leader is not reaped yet (so its id is still ours), and its tree.

    Every member it takes is recorded in ``adoptable``: an orphan of the call that exits here is
    then reaped by :meth:`Containers.sweep`.
    """

    def __init__(
        self, root: int, marker: str, members: proctree.Members, adoptable: dict[int, float]
    ) -> None:
        self.root = root
        self.marker = marker
        self.fds = terminate.Pidfds()
        self._adoptable = adoptable
        self._sig: int | None = None  # the signal in force, for members found late
        self._take(members)

    @classmethod
    async def of(cls, root: int, marker: str, adoptable: dict[int, float]) -> GroupTarget:
        # Taken before any signal: a child that dies first would re-parent its own children.
        return cls(root, marker, await proctree.snapshot(root, marker), adoptable)

    def _take(self, members: proctree.Members) -> bool:
        """Hold the members not held yet; True if there were any."""
        before = len(self.fds.taken)
        self.fds.add(members)
        self._adoptable.update((p, ct) for p, ct in members.items() if p in self.fds.taken)
        return len(self.fds.taken) > before

    def signal(self, sig: int) -> None:
        self._sig = sig
        proctree.signal_group(self.root, sig)
        # The group's members had it from the kernel; a member that left the group (setsid,
        # setpgid) has it through its pidfd. Never both: a second SIGTERM is not harmless (a
        # program that shuts down gracefully on the first exits at once on the second). Read
        # after the group's signal, so a member leaving meanwhile gets two, never none.
        self.fds.signal(sig, unless=self._in_group)

    def _in_group(self, pid: int) -> bool:
        p = procfs.read(pid)
        return p is not None and p.pgrp == self.root

    def kill(self) -> None:
        self._take(proctree.tree(self.root, self.marker))  # forks since the snapshot
        self.signal(signal.SIGKILL)

    async def wait_gone(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while await self.fds.wait_gone(deadline - loop.time()):
            # All it held are gone. One more look before saying so: the snapshot can miss an
            # orphan whose environment read empty mid-exec (``setsid`` execing its command),
            # and a member may have forked since. Only those get the signal in force.
            if not self._take(proctree.tree(self.root, self.marker)):
                return True
            if self._sig is not None:
                self.fds.signal(self._sig)
        return False

    def members(self) -> dict[int, float]:
        return self.fds.members()

    def close(self) -> None:
        self.fds.close()


class CallTarget:
    """A cgroup call: the cgroup, and its first process until that has moved itself in."""

    def __init__(self, cgroup: CallCgroup, root: terminate.Pidfds) -> None:
        self.cgroup = terminate.CgroupTarget(cgroup)
        self.root = root

    def signal(self, sig: int) -> None:
        # The first process, through its pidfd until it has moved itself into the cgroup;
        # once in it, only as a member (once: see GroupTarget.signal).
        self.root.signal(sig, unless=self.cgroup.cgroup.holds)
        self.cgroup.signal(sig)

    def kill(self) -> None:
        self.root.kill()
        self.cgroup.kill()

    async def wait_gone(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not await self.root.wait_gone(timeout):
            return False
        return await self.cgroup.wait_gone(deadline - loop.time())

    def members(self) -> dict[int, float]:
        return {**self.root.members(), **self.cgroup.members()}

    def close(self) -> None:
        self.root.close()


AnyTarget = GroupTarget | CallTarget | terminate.Pidfds


@dataclass(eq=False)
class Lingering:
    """Processes a finished call left running."""

    call_id: str
    tool: str
    target: AnyTarget
    cgroup: CallCgroup | None
    #: Tidies up once they are gone by themselves; cancelled when the turn's stop takes over.
    watcher: asyncio.Task[None] | None = None


@dataclass(eq=False)
class Containers:
    """The host's process containment: a cgroup per call wherever one can be had."""

    root: CgroupRoot | None
    subreaper: bool
    _lingering: dict[tuple[str, str], list[Lingering]] = field(default_factory=dict)
    #: Processes seen as a call's members that are not our own spawn: pid -> start time.
    _adoptable: dict[int, float] = field(default_factory=dict)
    #: pidfds of adoptable members still alive: their exit triggers a sweep (an event, no timer).
    _watched: dict[int, int] = field(default_factory=dict)
    #: ``cgroup`` was insisted on: a call that cannot have its own fails, never runs without.
    insist: bool = False

    @classmethod
    def create(cls, mode: str = "auto", *, subreaper: bool = True) -> Containers:
        """``auto`` (a cgroup where one can be had), ``cgroup`` (or an error), ``process_group``."""
        if mode not in ("auto", "cgroup", "process_group"):
            raise ValueError(f"invalid containment {mode!r}; valid: auto, cgroup, process_group")
        root = CgroupRoot.probe() if mode != Containment.PROCESS_GROUP else None
        if mode == Containment.CGROUP and root is None:
            raise ContainmentError(
                "no writable cgroup2 hierarchy here: run under a delegated cgroup "
                "(systemd: Delegate=yes, or systemd-run --user --scope -p Delegate=yes) "
                "or use containment='process_group'"
            )
        return cls(
            root, proctree.become_subreaper() if subreaper else False, insist=mode == "cgroup"
        )

    @property
    def mode(self) -> Containment:
        return Containment.CGROUP if self.root is not None else Containment.PROCESS_GROUP

    @staticmethod
    def kind(cgroup: CallCgroup | None) -> Containment:
        """How a call is contained: in its cgroup if it got one (else its process group)."""
        return Containment.CGROUP if cgroup is not None else Containment.PROCESS_GROUP

    def holes(self, cgroup: CallCgroup | None) -> tuple[str, ...]:
        """What a call contained this way may escape: nothing, in a cgroup."""
        if self.kind(cgroup) is Containment.CGROUP:
            return ()
        if self.subreaper:
            return (HOLE_SETSID_AND_SCRUBBED, HOLE_LATE_FORK)
        return (HOLE_SETSID_AND_SCRUBBED, HOLE_NO_SUBREAPER, HOLE_LATE_FORK)

    def new_cgroup(self) -> CallCgroup | None:
        """The call's own cgroup; in ``auto`` mode None where one cannot be made (the call is
        kept in its process group, and ``tool.started`` says so). Insisted on (``cgroup``), a
        :class:`ContainmentError`: the call fails before anything starts."""
        if self.root is None:
            return None
        try:
            return self.root.make()
        except OSError as exc:
            if self.insist:
                raise ContainmentError(
                    f"could not make the call's cgroup in {self.root.path}: "
                    f"{exc.strerror or exc}; nothing was started"
                ) from None
            return None

    async def target(self, root: int, marker: str, cgroup: CallCgroup | None) -> AnyTarget:
        """Everything of the call whose first process is ``root`` (alive or an unreaped zombie)."""
        if cgroup is not None:
            first = procfs.read(root)
            fds = terminate.Pidfds({root: first.create_time} if first and not first.zombie else {})
            return CallTarget(cgroup, fds)
        return await GroupTarget.of(root, marker, self._adoptable)

    def leftovers(self, root: int, marker: str, cgroup: CallCgroup | None) -> AnyTarget | None:
        """After the first process exited: what the call left running, if anything."""
        if cgroup is not None:
            return CallTarget(cgroup, terminate.Pidfds()) if cgroup.populated() else None
        left = {p: ct for p, ct in proctree.tree(root, marker).items() if p != root}
        left = proctree.alive(left)
        if not left:
            return None
        self._adoptable.update(left)
        return terminate.Pidfds(left)

    # --- what outlives a call ---

    def linger(self, request: ExecuteRequest, target: AnyTarget, cgroup: CallCgroup | None) -> None:
        """Keep ``target`` as the call's: the turn's stop ends it; gone by itself, it is tidied."""
        item = Lingering(request.call_id, request.tool, target, cgroup)
        key = (request.session, request.turn)
        self._lingering.setdefault(key, []).append(item)
        item.watcher = asyncio.get_running_loop().create_task(
            self._tidy_when_gone(key, item), name=f"lingering {request.call_id}"
        )

    async def _tidy_when_gone(self, key: tuple[str, str], item: Lingering) -> None:
        await item.target.wait_gone(float("inf"))
        items = self._lingering.get(key, [])
        if item in items:  # not taken over by the turn's stop meanwhile
            items.remove(item)
            if not items:
                del self._lingering[key]
            self._release(item)

    def _release(self, item: Lingering) -> None:
        item.target.close()
        if item.cgroup is not None:
            item.cgroup.remove()
        self.sweep()

    def lingering(self, session: str, turn: str) -> list[Lingering]:
        """What the turn's finished calls left running."""
        return list(self._lingering.get((session, turn), []))

    async def abort_turn(self, request: TurnAbortRequest) -> Sequence[Reaped]:
        """The turn's stop reaches what its calls left running: terminate each, with the window."""
        items = self._lingering.pop((request.session, request.turn), [])  # the stop owns them
        for item in items:
            if item.watcher is not None:
                item.watcher.cancel()

        async def end(item: Lingering) -> Reaped:
            done = await terminate.terminate(item.target, request.grace_s)
            self._release(item)
            return Reaped(item.call_id, item.tool, tuple(done.gone), done.by, tuple(done.alive))

        return await asyncio.gather(*(end(item) for item in items))

    # --- reaping what we adopted ---

    def sweep(self) -> None:
        """Reap our zombie children that we can attribute to a call; nobody else's."""
        if not self.subreaper:
            return
        me = os.getpid()
        for child in proctree.own_children():
            if child in proctree.SPAWNED:
                continue  # ours to wait for in run_process, not here
            p = procfs.read(child)
            if p is None or not p.zombie or p.ppid != me:
                continue
            seen = self._adoptable.get(child)
            # Any call cgroup of this process (every host here shares turnwatch-<pid>/), so a
            # zombie outliving the host that made it is still reaped by the next one.
            ours = is_call_cgroup(cgroup_of(child) or "", owner=me) or (
                seen is not None and procfs.same_start(seen, p.create_time)
            )
            if ours:
                proctree.reap(child)
                self._adoptable.pop(child, None)
        for pid, ct in list(self._adoptable.items()):
            p = procfs.read(pid)
            if p is None or not procfs.same_start(p.create_time, ct):
                del self._adoptable[pid]  # gone without ever becoming our zombie
            elif not p.zombie:
                self._watch(pid, ct)  # it may die, and re-parent here, after this sweep

    def _watch(self, pid: int, create_time: float) -> None:
        if pid in self._watched:
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return
        p = procfs.read(pid)
        if p is None or not procfs.same_start(p.create_time, create_time):
            os.close(fd)
            return
        self._watched[pid] = fd
        loop = asyncio.get_running_loop()

        def exited() -> None:
            loop.remove_reader(fd)
            os.close(self._watched.pop(pid))
            self.sweep()

        loop.add_reader(fd, exited)

    def after_call(self) -> None:
        """A process call ended: reap what it orphaned here."""
        if not self.subreaper:
            return
        self.sweep()
        # "populated 0" is reported when the last process leaves its cgroup, a moment before
        # the kernel re-parents that process's own zombie children here: look once more.
        asyncio.get_running_loop().call_later(_LATE_SWEEP_S, self.sweep)

    def close(self) -> None:
        if self.root is not None:
            self.root.close()


_LATE_SWEEP_S = 0.05
