"""A cgroup (v2) per process call: the one container nothing leaves.

A process group is left by ``setsid``, a parent-child tree by a double fork, an environment marker
by ``env -i``; a cgroup is left by nothing the tool can do without the cgroup's write access. It
is how systemd keeps a service's processes together (``KillMode=control-group``).

The hierarchy is found from ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` (unified or hybrid
mounts), never from a hard-coded path. Calls get children of a parent made for this process
(``turnwatch-<pid>``) inside our own cgroup, which is what a systemd ``Delegate=yes`` unit or
``systemd-run --user --scope -p Delegate=yes`` hands us. The tool process enters its call's
cgroup *before* it execs (:meth:`CallCgroup.wrap`), so no descendant is ever outside it.

"All gone" is ``populated 0`` in ``cgroup.events``. The kernel signals a change of that file to
``poll``/``epoll`` as ``EPOLLPRI``; an epoll fd watching it is readable, so the event loop waits on
it like on any socket: no sleeping, no polling.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import select
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from turnwatch.runtime import procfs

#: The process tool's argv is run through this shell line: it writes its own pid into the call's
#: ``cgroup.procs`` (moving itself), then execs the tool, which keeps the pid. ``$0`` is the file.
_ENTER = 'echo $$ > "$0" || exit 125; exec "$@"'
#: Exit status of the wrapper when the move failed: the tool never ran.
ENTER_FAILED = 125
#: Shells whose ``-c`` script can enter the cgroup itself, saving the wrapper's exec.
_SHELLS = frozenset({"bash", "sh", "dash", "zsh"})
#: Prefix of every cgroup turnwatch creates; the watchdog refuses to kill any other.
PREFIX = "turnwatch-"
#: A call's cgroup is ``<our cgroup>/turnwatch-<pid>/call-<n>``.
_CALL = "call-"
#: Call cgroups are numbered per process: every host of this process shares the parent.
_SEQ = itertools.count(1)
#: Numbers tried past those a runtime with this pid before left populated.
_TAKEN_MAX = 100


def own_cgroup(
    mountinfo: str = "/proc/self/mountinfo", cgroup: str = "/proc/self/cgroup"
) -> Path | None:
    """This process's cgroup v2 directory, as mounted here; None where there is none.

    ``/proc/self/cgroup`` names the path inside the hierarchy (its ``0::`` line); mountinfo says
    where that hierarchy (fstype ``cgroup2``) is mounted and which of its paths the mount shows.
    """
    try:
        with open(cgroup) as fh:
            inside = next((ln[3:].strip() for ln in fh if ln.startswith("0::")), None)
    except OSError:
        return None
    if inside is None or inside.endswith("(deleted)"):
        return None
    for root, point in _cgroup2_mounts(mountinfo):
        rel = os.path.relpath(inside, root)
        if rel.startswith(".."):
            continue  # this mount shows another part of the hierarchy
        return Path(point) if rel == "." else Path(point) / rel
    return None


def _cgroup2_mounts(mountinfo: str) -> list[tuple[str, str]]:
    """``(root inside the hierarchy, mount point)`` of every cgroup2 mount (fstype after " - ")."""
    try:
        with open(mountinfo) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        head, _, tail = line.partition(" - ")
        if tail.startswith("cgroup2 "):
            fields = head.split()
            out.append((_unescape(fields[3]), _unescape(fields[4])))
    return out


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 and so on).
    return field.encode().decode("unicode_escape") if "\\" in field else field


def read_members(path: Path) -> list[int]:
    """The pids in a cgroup now (empty if it is gone)."""
    try:
        with open(path / "cgroup.procs") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def populated(path: Path) -> bool:
    """True while a process lives in the cgroup or below it (False once it is gone)."""
    try:
        with open(path / "cgroup.events") as fh:
            return "populated 1" in fh.read()
    except OSError:
        return False


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 path (inside the hierarchy) of ``pid``; a zombie keeps its last one."""
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            return next((ln[3:].strip() for ln in fh if ln.startswith("0::")), None)
    except OSError:
        return None


def kill(path: Path) -> bool:
    """``cgroup.kill``: SIGKILL every process in the cgroup at once (kernel 5.14+)."""
    try:
        with open(path / "cgroup.kill", "w") as fh:
            fh.write("1")
    except FileNotFoundError:
        return not path.exists()
    return True


def remove(path: Path) -> bool:
    """Remove an empty cgroup; False while it still holds a process (or cannot be removed)."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


async def wait_empty(path: Path, timeout: float) -> bool:
    """Until ``populated 0`` (True), or ``timeout`` seconds (False); an event, not a poll."""
    import asyncio  # here: the watchdog's scan reads cgroups without an event loop

    try:
        fd = os.open(path / "cgroup.events", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    ep = select.epoll(1)
    loop = asyncio.get_running_loop()
    emptied: asyncio.Future[None] = loop.create_future()

    def check() -> None:
        ep.poll(0)  # consume the readiness; the file is re-read below
        if b"populated 0" in os.pread(fd, 128, 0) and not emptied.done():
            emptied.set_result(None)

    try:
        ep.register(fd, select.EPOLLPRI | select.EPOLLERR)
        loop.add_reader(ep.fileno(), check)
        check()  # it may be empty already: a change before we registered is not signalled
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(emptied), max(timeout, 0.0))
        return emptied.done()
    finally:
        loop.remove_reader(ep.fileno())
        ep.close()
        os.close(fd)


def cgroup_ino(path: str | Path) -> int | None:
    """A cgroup directory's inode number (None: there is none at ``path``). No later cgroup at
    the same path has it in the same boot: it tells the recorded cgroup from one made again."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def is_call_cgroup(path: str | Path, owner: int | None = None) -> bool:
    """Whether ``path`` (a directory, or a ``/proc/PID/cgroup`` path) names a call cgroup that
    turnwatch made: of process ``owner`` when one is given, of any turnwatch process otherwise."""
    p = Path(path)
    parent = f"{PREFIX}{owner}" if owner is not None else None
    return p.name.startswith(_CALL) and (
        p.parent.name == parent if parent else p.parent.name.startswith(PREFIX)
    )


def hierarchy_path(path: Path, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The path inside the hierarchy (as ``/proc/PID/cgroup`` names it) of a cgroup2 directory.

    None when ``path`` is not inside a cgroup2 mount: it is then no cgroup of ours to touch.
    """
    for root, point in _cgroup2_mounts(mountinfo):
        rel = os.path.relpath(path, point)
        if not rel.startswith("..") and rel != ".":
            return f"{root.rstrip('/')}/{rel}"
    return None


@dataclass(frozen=True, slots=True)
class CallCgroup:
    """One call's cgroup: its processes, and only they, live in ``path``."""

    path: Path
    #: The same cgroup as ``/proc/PID/cgroup`` names it: membership is checked against this.
    hierarchy_path: str
    #: Its directory's inode number (:func:`cgroup_ino`), as read when it was made.
    ino: int | None = None

    @classmethod
    def at(cls, path: str | Path) -> CallCgroup | None:
        """A recorded call cgroup, if ``path`` is one turnwatch made inside a cgroup2 mount."""
        p = Path(path)
        inside = hierarchy_path(p)
        if inside is None or not is_call_cgroup(p):
            return None
        return cls(p, inside)

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` is in this cgroup now (read through ``/proc``: proof of membership)."""
        return cgroup_of(pid) == self.hierarchy_path

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` started so that it enters this cgroup before it execs.

        A shell script (``bash -c SCRIPT``, Bash's own form) moves itself in its first line,
        before any command of the script can fork; anything else goes through a one-line
        ``sh`` that moves itself and execs it, which costs one more exec.
        """
        procs = str(self.path / "cgroup.procs")
        if len(argv) >= 3 and os.path.basename(argv[0]) in _SHELLS and argv[1] == "-c":
            first = f"echo $$ > {shlex.quote(procs)} || exit {ENTER_FAILED}\n"
            return [argv[0], "-c", first + argv[2], *argv[3:]]
        return ["/bin/sh", "-c", _ENTER, procs, *argv]

    def members(self) -> list[int]:
        return read_members(self.path)

    def populated(self) -> bool:
        return populated(self.path)

    def kill(self) -> bool:
        return kill(self.path)

    async def wait_empty(self, timeout: float) -> bool:
        return await wait_empty(self.path, timeout)

    def remove(self) -> bool:
        return remove(self.path)


def sweep_dead(own: Path) -> int:
    """Remove the parents runtimes that died left behind (``turnwatch-<pid>`` of a pid no
    longer alive), and their call cgroups, where empty; how many parents went.

    A runtime killed at any point never removes its own, and on a host that restarts runtimes
    for months they pile up. Only empty ones go: the kernel refuses to remove a cgroup that
    holds a process (that one is the watchdog's to end, by its membership), and a live pid's
    parent is left alone, whoever that pid is now.
    """
    gone = 0
    try:
        parents = [d for d in own.iterdir() if d.name.startswith(PREFIX)]
    except OSError:
        return 0
    for parent in parents:
        pid = parent.name[len(PREFIX) :]
        if not pid.isdigit() or procfs.read(int(pid)) is not None:
            continue
        try:
            leaves = [d for d in parent.iterdir() if d.is_dir()]
        except OSError:
            continue
        for leaf in leaves:
            remove(leaf)
        gone += remove(parent)
    return gone


class CgroupRoot:
    """The parent of this process's call cgroups, once proven usable (:meth:`probe`)."""

    def __init__(self, path: Path, hierarchy_path: str) -> None:
        #: The directory (``<our cgroup>/turnwatch-<pid>``).
        self.path = path
        #: The same, as ``/proc/PID/cgroup`` names it (to recognise our calls' processes).
        self.hierarchy_path = hierarchy_path

    @classmethod
    def probe(cls, own: Path | None = None) -> CgroupRoot | None:
        """Make the parent and prove a process can be moved into a child and killed there.

        None where no writable cgroup2 hierarchy can be had (no delegation, a read-only mount,
        an unprivileged container, a kernel without ``cgroup.kill``): the caller falls back to a
        process group.
        """
        own = own if own is not None else own_cgroup()
        inside = cgroup_of(os.getpid())
        if own is None or inside is None:
            return None
        path = own / f"{PREFIX}{os.getpid()}"
        try:
            path.mkdir(exist_ok=True)
        except OSError:
            return None
        sweep_dead(own)
        root = cls(path, f"{inside.rstrip('/')}/{path.name}")
        if not (path / "cgroup.kill").exists() or not root._can_enter():
            root.close()
            return None
        return root

    def _can_enter(self) -> bool:
        probe = self.new("probe")
        if probe is None:
            return False
        try:
            done = subprocess.run(probe.wrap(["true"]), capture_output=True, check=False)
            return done.returncode == 0
        finally:
            probe.remove()  # the probe was waited for: its cgroup is empty

    def new(self, name: str | None = None) -> CallCgroup | None:
        """A fresh empty cgroup for one call; None if it cannot be made (:meth:`make` says why)."""
        try:
            return self.make(name)
        except OSError:
            return None

    def make(self, name: str | None = None) -> CallCgroup:
        """A fresh empty cgroup for one call, or the ``OSError`` that refused it (a limit such
        as ``cgroup.max.descendants``, a hierarchy no longer writable)."""
        for _ in range(_TAKEN_MAX):
            leaf = name or f"{_CALL}{next(_SEQ)}"
            path = self.path / leaf
            try:
                path.mkdir()
            except FileNotFoundError:
                # Another host of this process removed the shared parent when it closed.
                self.path.mkdir(exist_ok=True)
                path.mkdir()
            except FileExistsError:
                if name is not None:
                    raise
                # A runtime that had this pid before (pids are reused) left it, still
                # populated: the next number, never that cgroup.
                continue
            return CallCgroup(path, f"{self.hierarchy_path}/{leaf}", cgroup_ino(path))
        raise FileExistsError(errno.EEXIST, f"{_TAKEN_MAX} call cgroups in a row taken", self.path)

    def close(self) -> None:
        """Remove the parent if no call cgroup is left in it."""
        remove(self.path)
