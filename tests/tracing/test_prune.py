"""The ledger's retention (``turnwatch prune``, ``watch --retain``): the rows of sessions settled
before the horizon go, in small transactions beside a live writer; never a session processing,
with an open finding or with a call whose processes may live; the file gives the pages back;
an ingested event's dedup key goes with it. Real SQLite files, a real concurrent writer."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import psutil

from tests.conftest import Procs, one_line_exit_2, turnwatch
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing import view
from turnwatch.tracing.ledger import Ledger, connect, read_events
from turnwatch.tracing.prune import prune

OLD = 1_000_000.0  # 1970-01-12: long before any horizon


def settled(session: str, t0: float, calls: int = 2) -> list[Event]:
    t = f"{session}.t1"
    evs = [Event(names.TURN_STARTED, session, t0, turn=t)]
    for i in range(calls):
        c = f"{t}.c{i}"
        evs += [
            Event(names.TOOL_REQUESTED, session, t0 + 0.1, turn=t, call=c, tool="Read"),
            Event(names.TOOL_FINISHED, session, t0 + 0.2, turn=t, call=c, tool="Read"),
        ]
    return [
        *evs,
        Event(names.TURN_SETTLED, session, t0 + 0.3, turn=t, attrs={"outcome": "completed"}),
        Event(names.PROCESSING_CLEARED, session, t0 + 0.4, turn=t),
    ]


def history(path: Path, old: int = 500) -> None:
    evs: list[Event] = []
    for i in range(old):
        evs += settled(f"old{i}", OLD + i)
    evs += settled("recent", time.time())
    evs.append(Event(names.TURN_STARTED, "stuck", OLD, turn="stuck.t1"))  # processing, old
    # Settled, old, but a call of it started a process nobody saw end: it may live.
    evs += [
        Event(names.TURN_STARTED, "left", OLD, turn="left.t1"),
        Event(names.TOOL_REQUESTED, "left", OLD, turn="left.t1", call="b", tool="Bash"),
        Event(
            names.TOOL_STARTED,
            "left",
            OLD,
            turn="left.t1",
            call="b",
            tool="Bash",
            attrs={"pid": 999_999, "create_time": 1.0},
        ),
        Event(names.TURN_SETTLED, "left", OLD + 1, turn="left.t1", attrs={"outcome": "aborted"}),
        Event(names.PROCESSING_CLEARED, "left", OLD + 2, turn="left.t1"),
    ]
    evs += settled("finding", OLD)  # the caller keeps it: an open finding names it
    ledger = Ledger(path)
    ledger.extend(evs)
    ledger.close()


def test_prune_deletes_what_settled_long_ago_and_nothing_it_must_keep(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    history(path)
    conn = connect(path)
    size_before = path.stat().st_size
    dry = prune(conn, time.time() - 86_400, keep={"finding"}, dry_run=True)
    assert (dry.sessions, dry.calls, dry.events) == (500, 1000, 500 * 7)
    assert view.count(conn) == 504  # a dry run deletes nothing
    done = prune(conn, time.time() - 86_400, keep={"finding"})
    assert (done.sessions, done.calls, done.events) == (500, 1000, 500 * 7)
    assert done.kept == {"processing": 1, "processes_live": 1, "open_finding": 1}
    left = {r.session for r in view.sessions(conn)}
    assert left == {"recent", "stuck", "left", "finding"}
    assert {ev.session for _s, ev in read_events(conn)} == left
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert path.stat().st_size < size_before * 0.6  # the pages went back (auto_vacuum)


def test_prune_beside_a_live_writer_loses_nothing_that_should_stay(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    history(path, old=3000)
    ledger = Ledger(path)
    stop = threading.Event()
    sent = 0

    def write() -> None:  # a runtime's writer thread, busy all through the prune
        nonlocal sent
        while not stop.is_set():
            ledger.extend(settled(f"new{sent}", time.time(), calls=1))
            sent += 1
            time.sleep(0.001)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        conn = connect(path)
        done = prune(conn, time.time() - 86_400)
        conn.close()
    finally:
        stop.set()
        writer.join()
        assert ledger.flush(timeout=30)
        ledger.close()
    assert done.sessions == 3000 + 1  # "finding": no caller keeps it here
    assert sent > 50
    conn = connect(path, readonly=True)
    assert ledger.lost == 0
    kept = {r.session for r in view.sessions(conn)}
    assert {f"new{i}" for i in range(sent)} <= kept
    events = sum(1 for _ in read_events(conn))
    assert events == sent * 5 + len(settled("recent", 0)) + 1 + 5  # new, recent, stuck, left
    assert not any(s.startswith("old") for s in kept)


def test_the_dedup_keys_go_with_their_events(tmp_path: Path) -> None:
    """Invariant 7: an ingested event's key (~55 bytes) is pruned with it. Kept, they were
    the part of the ledger that grew with history under retention (13 MB of 100,000 events
    left 5.5 MB of keys). The keys of what stays stay: its lines ingested again add nothing."""
    path, lines = tmp_path / "ledger.sqlite3", tmp_path / "events.jsonl"
    evs = [ev for i in range(200) for ev in settled(f"far{i}", OLD + i)]
    evs += settled("near", time.time())
    evs.append(Event(names.TURN_STARTED, "stuck", OLD, turn="stuck.t1"))  # processing: kept
    lines.write_text("".join(json.dumps(e.to_json()) + "\n" for e in evs))
    assert turnwatch("ingest", str(lines), "--ledger", str(path)).returncode == 0
    conn = connect(path)
    dry = prune(conn, time.time() - 86_400, dry_run=True)
    assert (dry.sessions, dry.events, dry.keys) == (200, 200 * 7, 200 * 7)
    done = prune(conn, time.time() - 86_400)
    assert (done.sessions, done.events, done.keys) == (200, 200 * 7, 200 * 7)
    assert done.to_json()["keys"] == 200 * 7
    left = len(settled("near", 0)) + 1
    assert conn.execute("SELECT count(*) FROM ingested").fetchone()[0] == left
    conn.close()
    again = turnwatch("ingest", str(lines), "--ledger", str(path))
    assert again.returncode == 0, again.stderr
    conn = connect(path)
    # What stayed is there once; what was pruned is recorded again, once, as a first ingest.
    assert sum(1 for _ in read_events(conn)) == len(evs)
    assert {r.session for r in view.sessions(conn)} == {"near", "stuck"} | {
        f"far{i}" for i in range(200)
    }
    assert prune(conn, time.time() - 86_400).sessions == 200  # and retention takes it again
    assert conn.execute("SELECT count(*) FROM ingested").fetchone()[0] == left


def test_a_ledger_of_legacy_keys_prunes_both_forms(tmp_path: Path) -> None:
    """Keys written before they led with the time (bare hashes) go too."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.extend(settled("far", OLD), dedup=True)
    ledger.close()
    conn = connect(path)
    conn.execute("UPDATE ingested SET key = substr(key, 13)")  # as an older turnwatch wrote them
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('dedup_legacy', '1')")
    assert prune(conn, time.time() - 86_400).keys == len(settled("far", OLD))
    assert conn.execute("SELECT count(*) FROM ingested").fetchone()[0] == 0


def test_prune_and_watch_retain_from_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    history(path, old=20)
    before = path.read_bytes()
    dry = turnwatch("prune", "--older-than", "30d", "--dry-run", "--ledger", str(path))
    assert dry.returncode == 0, dry.stderr
    assert path.read_bytes() == before  # a dry run only reads (it wrote the meta rows)
    nowhere = tmp_path / "none.sqlite3"
    missing = turnwatch("prune", "--older-than", "1d", "--dry-run", "--ledger", str(nowhere))
    one_line_exit_2(missing, str(nowhere), "no ledger here")
    assert not nowhere.exists()  # it made an empty ledger to say it would delete nothing
    # "left" too: the process its call started, nobody saw end, is not alive (the command looks).
    assert "would delete 22 session(s)" in " ".join(dry.stdout.split())
    kept = turnwatch("prune", "--older-than", "30d", "--json", "--ledger", str(path))
    said = json.loads(kept.stdout)["pruned"]
    assert said["sessions"] == 22
    assert said["kept"] == {"processing": 1}
    history(path, old=5)  # again: five old sessions (ids reused: they come back settled)
    watched = turnwatch(
        "watch", "--once", "--recover", "--retain", "30d", "--grace", "0.5", "--ledger", str(path)
    )
    assert "pruned" in watched.stderr, watched.stderr
    assert {r.session for r in view.sessions(connect(path, readonly=True))} >= {"recent", "stuck"}
    assert not any(r.session.startswith("old") for r in view.sessions(connect(path, readonly=True)))


def test_bad_durations_and_a_locked_ledger_are_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    history(path, old=3)
    before = path.read_bytes()
    for bad in ("0", "-1d", "nan", "thirty days", "inf", ""):
        done = turnwatch("prune", "--older-than", bad, "--ledger", str(path))
        assert done.returncode == 2, (bad, done.stderr)
        assert done.stderr.strip().count("\n") == 0, done.stderr
        assert "--older-than" in done.stderr
    retain = turnwatch("watch", "--once", "--retain", "0", "--ledger", str(path))
    assert retain.returncode == 2
    assert "--retain" in retain.stderr
    assert path.read_bytes() == before
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # as a VACUUM elsewhere would hold it
    try:
        done = turnwatch("prune", "--older-than", "1d", "--ledger", str(path), timeout=60)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "locked" in done.stderr
    assert "Traceback" not in done.stderr
    assert view.count(connect(path, readonly=True)) == 3 + 4  # nothing half-deleted


def test_prune_vacuum_converts_an_older_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    history(path, old=50)
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("PRAGMA journal_mode=DELETE")
    raw.execute("PRAGMA auto_vacuum = NONE")
    raw.execute("VACUUM")  # as a ledger made before auto_vacuum was set
    raw.close()
    assert sqlite3.connect(path).execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    done = turnwatch("prune", "--vacuum", "--ledger", str(path))
    assert done.returncode == 0, done.stderr
    assert "rewriting" in done.stdout
    assert connect(path, readonly=True).execute("PRAGMA auto_vacuum").fetchone()[0] == 2


def foreign_session(session: str, ts: float, runtime: psutil.Process, proc: int, ct: float) -> str:
    """A foreign runtime's settled turn, as design §3 writes it: its Bash call's end says
    nothing of its processes (no host ``status``), so the ledger marks them as possibly alive."""
    call = {"turn": f"{session}.t1", "call": f"{session}.c1", "tool": "Bash"}

    def line(kind: str, dt: float, **kw: object) -> str:
        return json.dumps({"ts": ts + dt, "kind": kind, "session": session, **kw})

    rt = {"pid": runtime.pid, "create_time": runtime.create_time()}
    return "\n".join(
        [
            line("runtime.started", 0, attrs=rt),
            line("turn.started", 0, turn=call["turn"]),
            line("tool.requested", 0.1, **call),
            line("tool.started", 0.2, **call, attrs={"pid": proc, "create_time": ct}),
            line("tool.finished", 5, **call, attrs={"outcome": "completed"}),
            line("turn.settled", 6, turn=call["turn"], attrs={"outcome": "completed"}),
            line("processing.cleared", 6, turn=call["turn"]),
        ]
    )


def test_a_session_is_kept_for_its_processes_only_while_one_of_them_lives(
    tmp_path: Path, procs: Procs
) -> None:
    """Invariant 7 under retention: a foreign runtime (or an agent CLI's command the watchdog
    recorded) never says a call's processes are gone, so every session that ran one was kept
    for ever ("processes live"), and the ledger grew with history. What is kept is what lives:
    the call's recorded process (pid and start time), its cgroup's members, what it left."""
    path = tmp_path / "ledger.sqlite3"
    me = psutil.Process()
    exited = subprocess.Popen(["true"])
    exited_ct = psutil.Process(exited.pid).create_time()
    exited.wait()
    runs = procs.spawn(["sleep", "300"])
    old = time.time() - 40 * 86_400
    lines = "\n".join(
        [
            foreign_session("gone", old, me, exited.pid, exited_ct),
            foreign_session("runs", old, me, runs.pid, runs.create_time()),
        ]
    )
    src = tmp_path / "events.jsonl"
    src.write_text(lines + "\n")
    done = turnwatch("ingest", str(src), "--ledger", str(path))
    assert done.returncode == 0, done.stderr

    dry = turnwatch("prune", "--older-than", "30d", "--dry-run", "--json", "--ledger", str(path))
    assert json.loads(dry.stdout)["pruned"]["sessions"] == 1, dry.stdout
    pruned = turnwatch("prune", "--older-than", "30d", "--json", "--ledger", str(path))
    said = json.loads(pruned.stdout)["pruned"]
    assert (said["sessions"], said["kept"]) == (1, {"processes_live": 1}), said
    conn = connect(path, readonly=True)
    assert [r.session for r in view.sessions(conn)] == ["runs"]
    conn.close()

    # The watchdog's retention judges the same way.
    src.write_text(foreign_session("gone2", old, me, exited.pid, exited_ct) + "\n")
    assert turnwatch("ingest", str(src), "--ledger", str(path)).returncode == 0
    watched = turnwatch(
        "watch", "--once", "--recover", "--retain", "30d", "--grace", "0.5", "--ledger", str(path)
    )
    assert "pruned 1 session(s)" in watched.stderr, watched.stderr
    conn = connect(path, readonly=True)
    assert [r.session for r in view.sessions(conn)] == ["runs"]
    conn.close()
    assert runs.is_running()
