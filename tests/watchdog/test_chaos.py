"""Chaos: stops of sessions with a process, a read-only and a mutating call, each with SIGKILL
sent at a random moment to the runtime (a child process, its ledger writer a thread of it), to a
``turnwatch watch --recover`` beside it, to both (the watchdog mid-recovery of the dead runtime's
session), or to the writer (a runtime writing JSON lines, ``EventLines``, and the ledger written
by a ``turnwatch ingest --follow`` of its own, killed and started again after a while); then
``turnwatch watch --once --recover`` started fresh. Afterwards, for each session: nothing of its
calls is left running, it is idle, the ledger passes ``PRAGMA integrity_check`` and
``check_invariants``, a process that only carries the call's marker (no proof) was never
signalled, no process got a second SIGTERM unless the first one's record died with the runtime
before it reached the file, and every line a killed writer's runtime wrote is in the ledger once.

Seeded: ``TURNWATCH_CHAOS_SEED`` (default fixed, so ``make test`` is repeatable) and
``TURNWATCH_CHAOS_RUNS`` (default 6; ``make chaos`` runs 100 with a fresh seed);
``TURNWATCH_CHAOS_VICTIM`` (one of :data:`VICTIMS`) strikes only that one, to chase a failure.
The seed and each run's choices are in every failure's message.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import Procs, release_fifo, this_run
from turnwatch import names
from turnwatch.runtime.tools.proctree import CALL_MARKER
from turnwatch.testing import check_invariants
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect, read_events

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("TURNWATCH_CHAOS_SEED", "20261201"))
RUNS = int(os.environ.get("TURNWATCH_CHAOS_RUNS", "6"))
WATCH = ["--grace", "0.5", "--pinned-after", "1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def turnwatch(*argv: str) -> list[str]:
    return [sys.executable, "-m", "turnwatch", *argv]


def marked(session: str) -> list[int]:
    """Live processes whose environment names a call of ``session``."""
    out = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if (
                env.get(CALL_MARKER, "").startswith(f"{session}/")
                and this_run(env)
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def end(proc: subprocess.Popen[str], how: int) -> None:
    if proc.poll() is None:
        proc.send_signal(how)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def follower(lines: Path, path: Path, procs: Procs) -> subprocess.Popen[str]:
    """The ledger's writer for a runtime writing ``lines``: ``turnwatch ingest --follow``."""
    proc = subprocess.Popen(
        turnwatch("ingest", str(lines), "--follow", "--ledger", str(path)),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    procs.track(proc.pid)
    return proc


#: Who is killed: the first runs take each in turn (so the six of ``make test`` cover every one),
#: later ones draw.
VICTIMS = ("runtime", "watchdog", "both", "writer")
ONLY = os.environ.get("TURNWATCH_CHAOS_VICTIM")


def one_run(
    rng: random.Random, path: Path, work: Path, session: str, procs: Procs, i: int = 0
) -> str:
    """A session stopped and struck; what was killed, and when."""
    drawn = rng.choice(VICTIMS)
    victim = ONLY or (VICTIMS[i] if i < len(VICTIMS) else drawn)
    stop_after, kill_after = rng.uniform(0.0, 0.5), rng.uniform(0.0, 1.5)
    fifo = work / f"{session}.fifo"
    os.mkfifo(fifo)
    beside = ["--recover", "--interval", "0.2", "--metrics-addr", f"127.0.0.1:{free_port()}"]
    dog = subprocess.Popen(
        turnwatch("watch", *beside, *WATCH, "--ledger", str(path)),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    procs.track(dog.pid)
    argv = [str(path), session, str(fifo), str(work), f"{stop_after:.3f}"]
    writer = None
    if victim == "writer":
        lines = work / f"{session}.jsonl"
        lines.touch()
        argv.append(str(lines))
        writer = follower(lines, path, procs)
    rt = subprocess.Popen(
        [sys.executable, "-m", "tests.watchdog.chaos_runtime", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    procs.track(rt.pid)
    assert rt.stdout is not None
    assert rt.stdout.readline().strip() == "ready"
    time.sleep(kill_after)
    if victim in ("runtime", "both"):
        end(rt, signal.SIGKILL)
    if victim == "both":
        time.sleep(rng.uniform(0.0, 1.5))  # the watchdog, somewhere in its recovery
    if victim in ("watchdog", "both"):
        end(dog, signal.SIGKILL)
    restart_after = rng.uniform(0.0, 1.5)
    if writer is not None:  # the ledger stops where it was; the lines go on
        end(writer, signal.SIGKILL)
        time.sleep(restart_after)
        writer = follower(work / f"{session}.jsonl", path, procs)
    if rt.poll() is None:  # a runtime left alone finishes its own stop
        deadline = time.monotonic() + 15
        while rt.stdout.readline().strip() != "settled" and time.monotonic() < deadline:
            pass
    end(rt, signal.SIGKILL)
    if writer is not None:  # every line the runtime wrote (not a count: the watchdog's are
        # the session's too), then Ctrl-C
        wrote = lines_of(work / f"{session}.jsonl")
        deadline = time.monotonic() + 20
        while not wrote <= set(recorded(path, session)) and time.monotonic() < deadline:
            time.sleep(0.1)
        end(writer, signal.SIGINT)
    end(dog, signal.SIGTERM)
    rt.stdout.close()
    release_fifo(fifo)
    if writer is not None:
        again = f"again at +{restart_after:.2f}s"
        return f"writer at {kill_after:.2f}s, {again}, stop at {stop_after:.2f}s"
    return f"{victim} at {kill_after:.2f}s, stop at {stop_after:.2f}s"


def lines_of(path: Path) -> set[tuple[str, float]]:
    """The lines a runtime wrote, as (kind, time)."""
    return {(e["kind"], e["ts"]) for e in map(json.loads, path.read_bytes().splitlines())}


def recorded(path: Path, session: str) -> list[tuple[str, float]]:
    """The session's events in the ledger, as (kind, time)."""
    conn = connect(path, readonly=True)
    try:
        return [(ev.kind, ev.ts_unix) for _seq, ev in read_events(conn, session=session)]
    finally:
        conn.close()


def test_chaos_every_session_ends_idle_and_nothing_is_signalled_without_proof(
    tmp_path: Path, procs: Procs
) -> None:
    path = tmp_path / "ledger.sqlite3"
    Ledger(path).close()
    said = f"seed {SEED} (TURNWATCH_CHAOS_SEED={SEED} to replay)"
    rng = random.Random(SEED)
    runs: dict[str, str] = {}
    canaries: dict[str, psutil.Process] = {}
    for i in range(RUNS):
        session = f"chaos{i}"
        # Carries the Bash call's marker, but is no process of it: a marker is no proof.
        canaries[session] = procs.spawn(
            ["sleep", "300"],
            env={**os.environ, CALL_MARKER: f"{session}/{session}.t1.c1"},
            start_new_session=True,
        )
        runs[session] = one_run(rng, path, tmp_path, session, procs, i)
    for _ in range(3):  # a fresh watchdog, until it finds nothing left
        final = subprocess.run(
            turnwatch("watch", "--once", "--recover", *WATCH, "--ledger", str(path), "--json"),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if final.returncode == 0:
            break
        time.sleep(1)
    assert final.returncode == 0, f"{said}: {final.stdout[-2000:]} {final.stderr[-2000:]}"
    conn = connect(path, readonly=True)
    (integrity,) = conn.execute("PRAGMA integrity_check").fetchone()
    assert integrity == "ok", said
    for session, what in runs.items():
        run = f"{said}, {session}: {what}"
        canary = canaries.pop(session)
        assert canary.is_running(), f"{run}: the canary was signalled"
        canary.kill()
        assert [p for p in marked(session) if p != canary.pid] == [], run
        (row,) = view.sessions(conn, only=session)
        assert row.state == "idle", f"{run}: {row.state}"
        events = [ev for _seq, ev in read_events(conn, session=session)]
        assert check_invariants(events) == [], run
        lines = tmp_path / f"{session}.jsonl"
        if lines.exists():  # the writer was killed: every line the runtime wrote, once
            wrote = collections.Counter(
                (e["kind"], e["ts"]) for e in map(json.loads, lines.read_bytes().splitlines())
            )
            kept = collections.Counter((ev.kind, ev.ts_unix) for ev in events)
            assert wrote, run
            assert {k: kept[k] for k in wrote} == dict(wrote), run
        log = tmp_path / f"{session}.terms"  # none: SIGKILLed at once (its window was over)
        terms = collections.Counter(log.read_text().split()[1::2] if log.exists() else [])
        recorded = any(
            ev.kind == names.TOOLS_ABORT_SENT
            and ev.call == f"{session}.t1.c1"
            and ev.attrs.get(names.K_SOURCE) != "watchdog"
            for ev in events
        )
        twice = {pid: n for pid, n in terms.items() if n > 1}
        assert not (twice and recorded), f"{run}: SIGTERMed twice {twice}; " + json.dumps(
            [ev.to_json() for ev in events if ev.call == f"{session}.t1.c1"], default=str
        )
    conn.close()
