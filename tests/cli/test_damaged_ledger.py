"""A damaged ledger, as the commands meet it. Its pages unreadable (SQLite's "database disk image
is malformed" mid-read): each command is one line naming the file, exit 2, no traceback; the
live page answers 503 with the same words. One event row no event can be made of: every command
reads past it, and says it where it reads it; the services start and serve the rest. One
session row of the wrong types: skipped by every reader and said, the watch service scanning on.

Before: tracebacks from sessions, explain, prune, recover and watch --once; a 500 from the live
page; one damaged event row kept watch, serve and serve-metrics from starting ("error:
Expecting value: line 1 column 1 (char 0)", no file, no row); one damaged session row ended the
watch service at its first scan.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.cli.watch_service import WatchService
from tests.conftest import free_port, one_line_exit_2, turnwatch, wait_until
from tests.tracing.test_damaged_rows import break_pages, damage, damage_summary, two_sessions
from tests.watchdog.helpers import Recorder, pinned_ledger
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger


@pytest.fixture
def pinned(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite3"
    pinned_ledger(path)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["sessions"],
        ["sessions", "--json"],
        ["explain", "s"],
        ["recover", "s", "--dry-run"],
        ["watch", "--once"],
        ["prune", "--older-than", "1d", "--dry-run"],
    ],
    ids=" ".join,
)
def test_a_ledger_with_broken_pages_is_one_line(pinned: Path, argv: list[str]) -> None:
    break_pages(pinned)
    before = pinned.read_bytes()
    result = turnwatch(*argv, "--ledger", str(pinned))
    one_line_exit_2(result, str(pinned), "unreadable ledger", "malformed")
    assert pinned.read_bytes() == before


def test_the_live_page_answers_503_on_broken_pages(pinned: Path) -> None:
    port = free_port()
    proc = _serve(pinned, port)
    try:
        break_pages(pinned)
        for route in ("/api/sessions", "/api/sessions/s/timeline"):
            answered: list[urllib.error.HTTPError] = []

            def refused(
                route: str = route, answered: list[urllib.error.HTTPError] = answered
            ) -> bool:
                try:  # the sessions of the page's last scan, a second old, come first
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=10).close()
                except urllib.error.HTTPError as exc:
                    answered.append(exc)
                    return True
                return False

            wait_until(refused, timeout=30, what=f"{route} to answer an error")
            assert answered[0].code == 503, route
            body = json.loads(answered[0].read())
            assert str(pinned) in body["error"], body
            assert "malformed" in body["error"], body
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err


def _spawn(*argv: str) -> subprocess.Popen[str]:
    """The console script as a service: its stderr read by the test."""
    exe = shutil.which("turnwatch", path=os.path.dirname(sys.executable))
    assert exe is not None
    return subprocess.Popen(
        [exe, *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _serve(ledger: Path, port: int) -> subprocess.Popen[str]:
    proc = _spawn("serve", "--ledger", str(ledger), "--addr", f"127.0.0.1:{port}")

    def up() -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/sessions", timeout=5).close()
            return True
        except OSError:
            assert proc.poll() is None, proc.communicate()[1]
            return False

    wait_until(up, timeout=60, what="the live page")
    return proc


def test_explain_shows_the_timeline_without_a_damaged_row_and_says_it(pinned: Path) -> None:
    damage(pinned, "attrs not JSON", 3)  # the stop's click
    result = turnwatch("explain", "s", "--ledger", str(pinned), "--json")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(pinned) in lines[0], lines
    assert "event 3" in lines[0], lines
    shown = json.loads(result.stdout)
    assert shown["left_out"] == [lines[0].removeprefix(f"error: {pinned}: ")], shown["left_out"]
    assert shown["stop_at"] is not None  # the RPC, read past the click's row
    assert shown["state"] == "pinned"


def _row_of(path: Path, session: str, kind: str) -> int:
    with sqlite3.connect(path) as conn:
        (seq,) = conn.execute(
            "SELECT seq FROM events WHERE session = ? AND kind = ?", (session, kind)
        ).fetchone()
    conn.close()
    return int(seq)


def test_sessions_and_explain_read_past_a_damaged_runtime_started(pinned: Path) -> None:
    """An agent CLI's session (no mode): who wrote it is asked of its ``runtime.started``."""
    rec = Recorder(pinned)
    rec("runtime.started", "c", 20, attrs={"source": "claude-code", "project": "/p"})
    rec("turn.started", "c", 10, turn="c.t1")
    rec.close()
    damage(pinned, "attrs not JSON", _row_of(pinned, "c", "runtime.started"))
    for argv in (["sessions"], ["sessions", "--json"], ["explain", "c"]):
        result = turnwatch(*argv, "--ledger", str(pinned))
        assert "Traceback" not in result.stderr, (argv, result.stderr)
        assert result.returncode == 0, (argv, result.stderr)
        assert "c" in result.stdout


def test_prune_deletes_a_session_with_a_damaged_row(pinned: Path) -> None:
    """Its dedup keys are worked out from its rows: the damaged one's is left behind."""
    ledger = Ledger(pinned)
    then = time.time() - 3 * 86_400
    for i, kind in enumerate(("turn.started", "turn.settled", "processing.cleared")):
        attrs = {"outcome": "completed"} if kind == "turn.settled" else {}
        ledger.append(Event(kind, "old", then + i, turn="old.t1", attrs=attrs), dedup=True)
    ledger.close()
    damage(pinned, "attrs not JSON", _row_of(pinned, "old", "turn.started"))
    result = turnwatch("prune", "--older-than", "1d", "--ledger", str(pinned), "--json")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pruned"]["sessions"] == 1, result.stdout


def test_serve_metrics_starts_on_a_ledger_with_a_damaged_row(pinned: Path) -> None:
    damage(pinned, "attrs not JSON", 2)
    port = free_port()
    proc = _spawn("serve-metrics", "--ledger", str(pinned), "--metrics-addr", f"127.0.0.1:{port}")
    try:
        assert proc.stderr is not None
        said = [proc.stderr.readline() for _ in range(2)]
        assert any("event 2" in s and str(pinned) in s for s in said), said
        assert any("3 events replayed" in s for s in said), said
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err


def three_scans(ledger: Path) -> str:
    """``watch`` as a service on ``ledger`` for three scans, stopped as a unit is: all it said
    (it exited 0, no traceback)."""
    watch = WatchService(ledger, "--no-recover")
    try:
        watch.scanned(3, "three scans")
    finally:
        code, err = watch.stop()
    assert code == 0, err
    assert "Traceback" not in err, err
    return err


def test_the_watch_service_starts_and_scans_past_a_damaged_row(pinned: Path) -> None:
    damage(pinned, "attrs not JSON", 2)
    err = three_scans(pinned)
    assert "found pinned_session s" in err, err
    assert len([ln for ln in err.splitlines() if "event 2 is unreadable" in ln]) == 1, err


def test_a_damaged_session_row_is_said_by_the_commands_and_outlived_by_the_watch(
    tmp_path: Path,
) -> None:
    """A session row whose ``stop_ts`` is text: ``sessions`` shows the others and says it (exit
    2), ``explain`` and ``recover`` say what is wrong with it (not "unknown session"), and the
    watch service scans on, finding the other session pinned. Before: tracebacks, and the
    service ended at its first scan (TypeError)."""
    path = tmp_path / "ledger.sqlite3"
    two_sessions(path)
    said = damage_summary(path, "stop_ts text")
    listed = turnwatch("sessions", "--ledger", str(path))
    assert listed.returncode == 2, listed.stderr
    assert "Traceback" not in listed.stderr
    assert listed.stderr.count("error:") == 1, listed.stderr
    assert said in listed.stderr, listed.stderr
    assert " t " in f" {listed.stdout} ", listed.stdout
    for argv in (["explain", "s"], ["recover", "s", "--dry-run"]):
        one_line_exit_2(turnwatch(*argv, "--ledger", str(path)), str(path), said, "damaged")
    once = turnwatch("watch", "--once", "--no-recover", "--ledger", str(path))
    assert once.returncode == 1, once.stderr  # t is pinned: findings first
    assert said in once.stderr, once.stderr
    by_turn = turnwatch("explain", "s.t1", "--json", "--ledger", str(path))  # found by its events
    assert by_turn.returncode == 2, by_turn.stderr
    assert said in by_turn.stderr, by_turn.stderr
    assert json.loads(by_turn.stdout)["state"] == "unknown"  # it said "idle"
    alone = tmp_path / "alone.sqlite3"
    pinned_ledger(alone)
    damage_summary(alone, "stop_ts text")
    once = turnwatch("watch", "--once", "--no-recover", "--ledger", str(alone))
    assert once.returncode == 2, (once.stdout, once.stderr)  # it said "no findings", exit 0
    assert said in once.stderr, once.stderr
    err = three_scans(path)
    assert "found pinned_session t" in err, err
    assert len([ln for ln in err.splitlines() if said in ln]) == 1, err
