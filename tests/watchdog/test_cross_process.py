"""The watchdog beside a runtime, and against runtimes in other processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import GRACE, Procs, release_fifo, require_cgroups, until, wait_until
from tests.watchdog.helpers import Recorder, spawn_tree
from turnwatch import names
from turnwatch.runtime import LocalHost, Mode, Runtime
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect
from turnwatch.watchdog.loop import Cycle, Watchdog
from turnwatch.watchdog.scan import Config

ROOT = Path(__file__).resolve().parents[2]
CFG = Config(grace_s=0.5, slack_s=0.5, rpc_stuck_s=0.3)


def state(path: Path, session: str) -> str:
    conn = connect(path, readonly=True)
    try:
        (row,) = view.sessions(conn, only=session, th=CFG)
        return row.state
    finally:
        conn.close()


async def test_legacy_pin_recovered_in_process(tmp_path: Path, fifo: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    rt = Runtime(LocalHost(), mode=Mode.LEGACY, grace_s=GRACE, sink=ledger)
    turn = rt.start_turn("s")
    turn.request("Grep", {"pattern": "x", "path": str(fifo)})
    user_stop = asyncio.ensure_future(rt.abort("s"))
    await until(
        lambda: (ledger.flush(), state(path, "s"))[1] == "pinned",
        what="the session to count as pinned (its RPC pending past 0.3 s)",
    )
    dog = Watchdog(path, ledger, ledger.flush, cfg=CFG, runtime=rt)

    cycle = await dog.cycle()

    assert {f.kind for f in cycle.findings} >= {names.F_PINNED_SESSION, names.F_ABORT_RPC_STUCK}
    (action,) = cycle.actions  # one walk for the pinned session and its stuck RPC
    assert action.result == "ok"
    assert action.words == "call abort() in process"
    await asyncio.wait_for(user_stop, 5)
    ledger.close()
    assert state(path, "s") == "idle"


def spawn_runtime(
    procs: Procs,
    ledger: Path,
    sock: Path,
    mode: str,
    tool: str,
    args: dict[str, object],
    *,
    stop: bool,
    containment: str = "auto",
    grace_s: float = 0.5,
) -> subprocess.Popen[str]:
    """A real runtime in its own process, one call in flight (and the user's stop, if asked)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.watchdog.runtime_proc",
            str(ledger),
            str(sock),
            mode,
            tool,
            json.dumps(args),
            "stop" if stop else "run",
            containment,
            str(grace_s),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.track(proc.pid)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def journal(path: Path) -> list[tuple[str, str | None, dict[str, object]]]:
    """The ledger's events: kind, call and attributes (what a failure shows)."""
    from turnwatch.tracing.ledger import read_events

    conn = connect(path, readonly=True)
    try:
        return [(ev.kind, ev.call, dict(ev.attrs)) for _seq, ev in read_events(conn)]
    finally:
        conn.close()


def kill_runtime(proc: subprocess.Popen[str]) -> None:
    """SIGKILL a runtime of :func:`spawn_runtime`, reaped, its pipe closed."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


async def runtime_dies_then_one_cycle(path: Path, proc: subprocess.Popen[str]) -> Cycle:
    """The runtime is SIGKILLed mid-turn; then one watchdog cycle over its ledger."""
    kill_runtime(proc)
    ledger = Ledger(path)
    try:
        return await Watchdog(path, ledger, ledger.flush, cfg=CFG).cycle()
    finally:
        ledger.close()


@pytest.fixture
def far_runtime(tmp_path: Path, procs: Procs) -> Iterator[tuple[Path, Path, subprocess.Popen[str]]]:
    fifo = tmp_path / "far.fifo"
    os.mkfifo(fifo)
    path, sock = tmp_path / "ledger.sqlite3", tmp_path / "rt.sock"
    proc = spawn_runtime(
        procs, path, sock, "legacy", "Grep", {"pattern": "x", "path": str(fifo)}, stop=True
    )
    yield path, sock, proc
    release_fifo(fifo)
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


async def test_pinned_session_recovered_through_the_control_socket(
    far_runtime: tuple[Path, Path, subprocess.Popen[str]],
) -> None:
    path, sock, _proc = far_runtime
    assert oct(sock.stat().st_mode & 0o777) == "0o600"
    await until(lambda: state(path, "far") == "pinned", what="the far session to pin")
    ledger = Ledger(path)
    dog = Watchdog(path, ledger, ledger.flush, cfg=CFG)  # no runtime here: another process

    cycle = await dog.cycle()
    ledger.close()

    (action,) = cycle.actions
    assert action.result == "ok", action
    assert action.words == f"call agent.abort via {sock}"
    await until(lambda: state(path, "far") == "idle", what="processing to clear")


async def test_runtime_killed_mid_turn_leaves_an_orphan_that_is_reaped(
    tmp_path: Path, procs: Procs
) -> None:
    path, sock = tmp_path / "ledger.sqlite3", tmp_path / "rt.sock"
    proc = spawn_runtime(
        procs,
        path,
        sock,
        "adr",
        "Bash",
        {"command": "trap '' TERM; sleep 300 & sleep 300"},
        stop=False,
    )
    conn = connect(path, readonly=True)
    (call,) = view.sessions(conn, only="far")[0].calls
    conn.close()
    assert call.pid is not None
    bash = procs.track(call.pid)
    wait_until(lambda: bash.children(), what="the child sleep")
    child = procs.track(bash.children()[0].pid)

    cycle = await runtime_dies_then_one_cycle(path, proc)

    assert names.F_ORPHAN_TOOL_PROCESS in {f.kind for f in cycle.findings}
    assert not bash.is_running() or bash.status() == psutil.STATUS_ZOMBIE
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    # The dead runtime's session was pinned "processing": the walk settled it, by the watchdog.
    assert names.F_PINNED_SESSION in {f.kind for f in cycle.findings}
    assert state(path, "far") == "idle"
    conn = connect(path, readonly=True)
    settled = conn.execute("SELECT attrs_json FROM events WHERE kind='turn.settled'").fetchall()
    conn.close()
    assert [json.loads(r[0])["settled_by"] for r in settled] == ["watchdog"]


async def test_a_dead_runtimes_call_cgroup_is_killed_whole(tmp_path: Path, procs: Procs) -> None:
    """Only the cgroup still ties a ``setsid env -i`` escapee to its call; the watchdog ends it."""
    require_cgroups()
    path, sock = tmp_path / "ledger.sqlite3", tmp_path / "rt.sock"
    pidfile = tmp_path / "escapee.pid"
    script = f"(setsid env -i sh -c 'echo $$ > {pidfile}; exec sleep 300' &); sleep 300"
    proc = spawn_runtime(
        procs, path, sock, "adr", "Bash", {"command": script}, stop=False, containment="cgroup"
    )
    wait_until(pidfile.exists, what="the escapee")
    conn = connect(path, readonly=True)
    (call,) = view.sessions(conn, only="far")[0].calls
    conn.close()
    assert call.containment == "cgroup"
    assert call.cgroup is not None
    assert call.pid is not None
    bash = procs.track(call.pid)
    wait_until(lambda: pidfile.read_text().strip(), what="the escapee's pid")
    escapee = procs.track(int(pidfile.read_text()))
    assert str(escapee.pid) in (Path(call.cgroup) / "cgroup.procs").read_text().split()

    cycle = await runtime_dies_then_one_cycle(path, proc)

    orphans = [f for f in cycle.findings if f.kind == names.F_ORPHAN_TOOL_PROCESS]
    assert [f.cgroup for f in orphans] == [call.cgroup]
    assert [a.words for a in cycle.actions if a.finding.cgroup] == [f"cgroup.kill {call.cgroup}"]
    for p in (bash, escapee):
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    assert not Path(call.cgroup).exists()


def test_watchdog_killed_mid_recovery_resumes_without_a_second_sigterm(
    tmp_path: Path, procs: Procs
) -> None:
    path, log = tmp_path / "ledger.sqlite3", tmp_path / "terms.log"
    tree = spawn_tree(procs, log=log)
    rec = Recorder(path)
    rec.runtime()
    rec.aborted_turn(tree[0])
    rec.close()
    cmd = [
        sys.executable,
        "-m",
        "turnwatch",
        "watch",
        "--once",
        "--recover",
        "--grace",
        "3",
        "--ledger",
        str(path),
    ]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.track(first.pid)
    wait_until(lambda: log.exists() and log.read_text().count("TERM") == 1, what="one SIGTERM")
    first.kill()  # mid-recovery: SIGTERM sent, SIGKILL not yet
    first.wait()
    assert all(p.is_running() for p in tree)

    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    assert second.returncode == 0, second.stderr
    assert log.read_text().count("TERM") == 1  # resumed at the SIGKILL step: no second SIGTERM
    assert procs.alive() == []


@pytest.mark.parametrize("containment", ["cgroup", "process_group"])
async def test_a_runtime_killed_mid_grace_leaves_the_watchdog_its_window_not_a_new_one(
    tmp_path: Path, procs: Procs, containment: str
) -> None:
    """The runtime SIGTERMed its call's tree, starting a 3 s grace window, and died. The watchdog
    goes on with that window: no second SIGTERM, and SIGKILL when the runtime's window ends
    (invariant 3 is the call's window, not one the watchdog starts anew)."""
    if containment == "cgroup":
        require_cgroups()
    path, sock, log = tmp_path / "ledger.sqlite3", tmp_path / "rt.sock", tmp_path / "terms.log"
    trap = f"trap 'echo TERM >> {log}' TERM"
    script = f"{trap}; ({trap}; while :; do sleep 0.1; done) & while :; do sleep 0.1; done"
    proc = spawn_runtime(
        procs,
        path,
        sock,
        "adr",
        "Bash",
        {"command": script},
        stop=True,
        containment=containment,
        grace_s=3.0,
    )
    wait_until(lambda: log.exists() and log.read_text().count("TERM") == 2, what="two SIGTERMs")

    def stopped() -> view.CallView | None:  # its tools.abort.sent (and kill_at) in the ledger
        conn = connect(path, readonly=True)
        try:
            (c,) = view.sessions(conn, only="far")[0].calls
            return c if c.abort_ts is not None else None
        finally:
            conn.close()

    wait_until(lambda: stopped() is not None, what="the runtime's stop recorded")
    call = stopped()
    assert call is not None
    assert call.abort_ts is not None
    assert call.pid is not None
    leader = procs.track(call.pid)
    wait_until(lambda: leader.children(), what="the subshell")
    tree = [leader, procs.track(leader.children()[0].pid)]

    cycle = await runtime_dies_then_one_cycle(path, proc)

    ended = time.time()
    # The watchdog sent none of its own (on failure: what each side recorded, and did).
    assert log.read_text().count("TERM") == 2, (journal(path), cycle)
    for p in tree:
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    # SIGKILLed when the runtime's window ended: not before it, and not a window later.
    assert call.abort_ts + 3.0 - 0.1 <= ended <= call.abort_ts + 3.0 + 2.0
