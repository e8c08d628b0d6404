"""Writing a foreign runtime's ledger rows, and spawning real process trees."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import Procs, wait_until
from turnwatch.runtime import procfs
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger


class Recorder:
    """Writes events with chosen timestamps, as a runtime (alive or dead) would have."""

    def __init__(self, path: Path) -> None:
        self.ledger = Ledger(path)
        self.path = path

    def __call__(self, kind: str, session: str = "s", ago: float = 0.0, **kw: Any) -> None:
        attrs = kw.pop("attrs", {})
        self.ledger.append(
            Event(kind=kind, session=session, ts_unix=time.time() - ago, attrs=attrs, **kw)
        )

    def close(self) -> None:
        self.ledger.close()

    def runtime(self, session: str = "s", pid: int | None = None, ago: float = 60.0) -> None:
        p = psutil.Process(pid or os.getpid())
        start = {
            "pid": p.pid,
            "create_time": p.create_time(),
            **kernel_start(p.pid, p.create_time()),
        }
        self("runtime.started", session, ago, attrs={**start, "mode": "adr"})

    def started_call(
        self,
        pid: int,
        create_time: float,
        *,
        session: str = "s",
        tool: str = "Bash",
        ago: float = 30.0,
        cls: str | None = None,
    ) -> None:
        """A turn with one call whose recorded process is ``(pid, create_time)``."""
        t, c = f"{session}.t1", f"{session}.c1"
        self("turn.started", session, ago + 1, turn=t)
        self(
            "tool.requested",
            session,
            ago + 1,
            turn=t,
            call=c,
            tool=tool,
            attrs={"class": cls} if cls else {},
        )
        self(
            "tool.started",
            session,
            ago,
            turn=t,
            call=c,
            tool=tool,
            attrs={"pid": pid, "create_time": create_time, **kernel_start(pid, create_time)},
        )

    def aborted_turn(
        self,
        proc: psutil.Process,
        *,
        session: str = "s",
        tool: str = "Bash",
        aborted_ago: float = 30.0,
        ended: bool = True,
        cls: str | None = None,
    ) -> None:
        """A turn whose stop reached a call with a live recorded process."""
        t, c = f"{session}.t1", f"{session}.c1"
        self.started_call(
            proc.pid, proc.create_time(), session=session, tool=tool, ago=aborted_ago + 4, cls=cls
        )
        self("stop.clicked", session, aborted_ago + 0.1, turn=t)
        self("abort.rpc.received", session, aborted_ago + 0.1, turn=t, attrs={"source": "ui"})
        self("tools.abort.sent", session, aborted_ago, turn=t, call=c, tool=tool)
        if ended:
            self(
                "tool.finished",
                session,
                aborted_ago - 1,
                turn=t,
                call=c,
                tool=tool,
                attrs={"outcome": "aborted"},
            )
            self("turn.settled", session, aborted_ago - 1, turn=t, attrs={"outcome": "aborted"})
            self("abort.rpc.returned", session, aborted_ago - 1, turn=t)
            self("processing.cleared", session, aborted_ago - 1, turn=t)


def kernel_start(pid: int, create_time: float) -> dict[str, int | str]:
    """What turnwatch's own runtimes record beside ``create_time`` (the kernel's start ticks and
    the boot), when ``pid`` is the process started then; nothing for a start time that is not
    its (a test's recycled pid keeps its wall-clock proof only)."""
    seen = procfs.read(pid)
    if seen is None or not procfs.same_start(seen.create_time, create_time):
        return {}
    return procfs.start_attrs(seen)


#: A wall-clock step as a VM fork made one on this project's machines (``btime`` moved 2.00 s).
STEP_S = 2.0


def step_clock(monkeypatch: pytest.MonkeyPatch, by: float = STEP_S) -> None:
    """From now on this process reads ``/proc/stat``'s ``btime`` (the wall clock less the time
    since boot) as a process started after a wall-clock step of ``by`` seconds does: every start
    time it computes moves by ``by``, the kernel's start ticks do not. What was recorded before,
    in this process or another, was recorded on the clock before the step. (The clock itself is
    not stepped: the machine is shared.)"""
    real = procfs._boot_time()  # noqa: SLF001 - the one value a step changes
    monkeypatch.setattr(procfs, "_boot_time", lambda: real + by)


def pinned_ledger(path: Path) -> None:
    """A ledger where session ``s`` is pinned: stopped 90 s ago, its abort RPC never answered
    (a ``pinned_session`` and an ``abort_rpc_stuck`` finding)."""
    rec = Recorder(path)
    rec.runtime()
    rec("turn.started", turn="s.t1", ago=100)
    rec("stop.clicked", turn="s.t1", ago=90)
    rec("abort.rpc.received", turn="s.t1", ago=90)
    rec.close()


def spawn_tree(
    procs: Procs, log: Path | None = None, marker: str = "s/s.c1"
) -> list[psutil.Process]:
    """A bash that ignores SIGTERM (logging each one) with a subshell that ignores it too."""
    pidfile = Path(tempfile.mkdtemp(prefix="tw-tree-")) / "child.pid"
    trap = f"echo TERM >> {log}" if log else ""
    script = (
        f"trap '{trap}' TERM; (trap '' TERM; while :; do sleep 0.1; done) & "
        f"echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; "
        "while :; do sleep 0.1; done"
    )
    leader = procs.spawn(
        ["bash", "-c", script], start_new_session=True, env={**os.environ, "TURNWATCH_CALL": marker}
    )
    wait_until(pidfile.exists, what="the subshell to start")
    child = procs.track(int(pidfile.read_text()))
    shutil.rmtree(pidfile.parent)  # read: the test leaves no tw-tree-* directory behind
    return [leader, child]


def aborted_tree(ledger: Path, procs: Procs) -> list[psutil.Process]:
    """A live SIGTERM-ignoring tree, recorded as the process of a call whose turn was stopped."""
    tree = spawn_tree(procs)
    rec = Recorder(ledger)
    rec.runtime()
    rec.aborted_turn(tree[0])
    rec.close()
    return tree
