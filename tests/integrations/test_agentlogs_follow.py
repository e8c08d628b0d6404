"""Following the agent CLIs' files as they are written: partial lines, restarts, truncation,
rotation, files that vanish; and ``turnwatch watch --agents``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import turnwatch
from tests.integrations.agent_arcs import DATA
from turnwatch import names
from turnwatch.integrations.agentlogs import read_file
from turnwatch.integrations.agentlogs.follow import Follower
from turnwatch.integrations.agentlogs.reader import Problem
from turnwatch.runtime.events import Event

CODEX = next(DATA.glob("codex/scenarios/2-6_*/recordings/*/transcript.jsonl"))
CLAUDE = next(DATA.glob("claudecode/regressions/07-*/recordings/*/transcript.jsonl"))
GEMINI = next(DATA.glob("gemini-cli/scenarios/2-2_*/recordings/*/transcript.jsonl"))


def batch(path: Path) -> list[Event]:
    out: list[Event] = []
    read_file(path, out.append)
    return unlogged(out)


def unlogged(events: list[Event]) -> list[Event]:
    """The events without ``runtime.started``'s ``log`` (the file's path differs here)."""
    return [
        e._replace(attrs={k: v for k, v in e.attrs.items() if k != names.K_LOG}) for e in events
    ]


class Harness:
    """A follower over one root, its checkpoints kept in a dict (the ledger's meta table)."""

    def __init__(self, fmt: str, root: Path, store: dict[str, str] | None = None) -> None:
        self.events: list[Event] = []
        self.problems: list[Problem] = []
        self.notes: list[str] = []
        self.store = {} if store is None else store
        self.f = Follower(
            {fmt: root},
            self.events.append,
            load=self.store.get,
            save=self.store.__setitem__,
            forget=lambda k: self.store.pop(k, None),
            saved=lambda: list(self.store),
            on_problem=self.problems.append,
            note=self.notes.append,
            discover_s=0.0,
        )


def rollout(root: Path) -> Path:
    day = root / "2026" / "05" / "23"
    day.mkdir(parents=True, exist_ok=True)
    return day / "rollout-2026-05-23T23-03-45-x.jsonl"


def test_a_file_written_line_by_line_gives_the_events_of_the_whole_file(tmp_path: Path) -> None:
    path = rollout(tmp_path)
    h = Harness("codex", tmp_path)
    with open(path, "wb") as out:
        for raw in CODEX.read_bytes().splitlines(keepends=True):
            half = len(raw) // 2
            out.write(raw[:half])
            out.flush()
            h.f.poll()  # a partial line waits for the rest
            out.write(raw[half:])
            out.flush()
            h.f.poll()
    h.f.close()
    assert unlogged(h.events) == batch(CODEX)
    assert h.problems == []


def test_a_restart_resumes_where_the_last_run_stopped(tmp_path: Path) -> None:
    """The checkpoint carries the adapter's state: the turn and the calls in flight."""
    lines = CLAUDE.read_bytes().splitlines(keepends=True)
    path = tmp_path / "proj" / "db57d2ab.jsonl"
    path.parent.mkdir()
    store: dict[str, str] = {}
    events: list[Event] = []
    for cut in (7, 12, 19, len(lines)):  # mid-turn, with a call in flight, …
        path.write_bytes(b"".join(lines[:cut]))
        h = Harness("claude-code", tmp_path, store)
        h.f.poll()
        h.f.close()
        events += h.events
        if cut > 7:
            assert "following 1 new session file(s), 1 resumed" in h.notes[0]
    assert unlogged(events) == batch(CLAUDE)  # nothing twice, nothing lost


def test_an_unreadable_checkpoint_means_reading_from_the_start(tmp_path: Path) -> None:
    path = rollout(tmp_path)
    path.write_bytes(CODEX.read_bytes())
    h = Harness("codex", tmp_path, {f"agents.offset:{path}": '{"dev": 1}'})
    h.f.poll()
    h.f.close()
    assert "its checkpoint is unreadable" in h.notes[0]
    assert unlogged(h.events) == batch(CODEX)


def test_truncation_rotation_and_a_vanished_file_are_survived(tmp_path: Path) -> None:
    path = rollout(tmp_path)
    path.write_bytes(CODEX.read_bytes())
    h = Harness("codex", tmp_path)
    h.f.poll()
    first = len(h.events)
    path.write_bytes(CODEX.read_bytes()[:5000])  # truncated in place
    h.f.poll()
    assert any("truncated or rewritten" in n for n in h.notes)
    os.rename(path, path.with_suffix(".old"))  # rotated: a new file under the name
    path.write_bytes(CODEX.read_bytes())
    h.f.poll()
    assert any("replaced (rotated)" in n for n in h.notes)
    assert len(h.events) > first
    path.unlink()
    h.f.poll()
    h.f.poll()
    assert [str(p).split(": ", 1)[1] for p in h.problems] == [
        "vanished; what was read of it is kept"
    ]


def test_bad_lines_oversized_lines_and_unknown_records_never_stop_it(tmp_path: Path) -> None:
    path = rollout(tmp_path)
    good = CODEX.read_bytes().splitlines(keepends=True)
    path.write_bytes(
        b"".join(good[:3])
        + b'{"type": "event_msg", "payload": {"type": "\xfe"}}\n'
        + b'{"type": "x", "pad": "'
        + b"y" * (33 * 1024 * 1024)
        + b'"}\n'
        + b'{"timestamp": "2026-05-23T21:04:00Z", "type": "brand_new", "payload": {}}\n'
        + b"".join(good[3:])
    )
    h = Harness("codex", tmp_path)
    h.f.poll()
    h.f.close()
    assert h.notes[-1] == "records of types turnwatch does not read: brand_new ×1"
    assert [(p.lineno, p.reason.split(":")[0]) for p in h.problems] == [
        (4, "not UTF-8"),
        (5, "line is 34603033 bytes, over the 33554432 limit; skipped"),
    ]
    assert unlogged(h.events) == batch(CODEX)


def test_a_held_gemini_turn_end_is_decided_by_quiet_not_by_a_runs_end(tmp_path: Path) -> None:
    """The reply that may end the turn is held until the file is quiet. A run that ends before
    (a restart, ``watch --once``) decides nothing: its checkpoint holds it, and the next run
    decides it once the file is quiet, at once for a file an hour old."""
    chats = tmp_path / "proj" / "chats"
    chats.mkdir(parents=True)
    path = chats / "session-1.jsonl"
    path.write_bytes(GEMINI.read_bytes())
    h = Harness("gemini-cli", tmp_path)
    h.f.poll()
    assert names.TURN_SETTLED not in [e.kind for e in h.events]  # held: a rewrite may follow
    h.f.close()
    assert names.TURN_SETTLED not in [e.kind for e in h.events]  # the CLI may be writing
    os.utime(path, (time.time() - 3600,) * 2)
    again = Harness("gemini-cli", tmp_path, h.store)
    again.f.poll()
    assert unlogged(h.events + again.events) == batch(GEMINI)


def event_count(ledger: Path) -> int:
    """Read-only: a reader must not disturb the writer creating the ledger."""
    if not ledger.exists():
        return 0
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0
    finally:
        conn.close()


def dirs(tmp_path: Path) -> list[str]:
    return [
        "--codex-dir",
        str(tmp_path / "codex"),
        "--claude-dir",
        str(tmp_path / "claude"),
        "--gemini-dir",
        str(tmp_path / "gemini"),
    ]


def test_watch_once_agents_reads_each_file_once(tmp_path: Path) -> None:
    rollout(tmp_path / "codex").write_bytes(CODEX.read_bytes())
    (tmp_path / "claude" / "p").mkdir(parents=True)
    (tmp_path / "claude" / "p" / "s.jsonl").write_bytes(CLAUDE.read_bytes())
    ledger = tmp_path / "l.sqlite3"
    first = turnwatch("watch", "--once", "--agents", *dirs(tmp_path), "--ledger", str(ledger))
    assert first.returncode == 0, first.stderr
    n = event_count(ledger)
    assert n == len(batch(CODEX)) + len(batch(CLAUDE))
    again = turnwatch("watch", "--once", "--agents", *dirs(tmp_path), "--ledger", str(ledger))
    assert again.returncode == 0, again.stderr
    assert "following 2 new session file(s), 2 resumed" in again.stderr
    assert event_count(ledger) == n + 0  # a watchdog scan with no findings adds no event
    listed = turnwatch("sessions", "--json", "--ledger", str(ledger))
    assert '"state": "processing"' in listed.stdout  # the Claude session's last turn


def test_the_watch_loop_follows_a_file_as_the_cli_writes_it(tmp_path: Path) -> None:
    path = rollout(tmp_path / "codex")
    lines = CODEX.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:10]))
    ledger = tmp_path / "l.sqlite3"
    exe = Path(sys.executable).with_name("turnwatch")
    cmd = [str(exe), "watch", "--agents", *dirs(tmp_path), "--ledger", str(ledger)]
    proc = subprocess.Popen(
        [*cmd, "--interval", "0.2", "--metrics-addr", ""],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        want = len(batch(CODEX))

        def wait_for(n: int) -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if event_count(ledger) >= n:
                    return
                time.sleep(0.1)
            proc.terminate()
            raise AssertionError(f"{event_count(ledger)} events, not {n}: {proc.communicate()}")

        wait_for(3)
        with open(path, "ab") as out:
            out.writelines(lines[10:])
        wait_for(want)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert event_count(ledger) == want


def test_a_long_quiet_file_is_let_go_and_resumed_when_it_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Months of a CLI's directory: a file quiet for IDLE_S keeps no reader, translator or
    lines in memory (its place is its checkpoint), only its size and time; when it grows it is
    followed again from the checkpoint, nothing twice. A vanished file is forgotten."""
    from turnwatch.integrations.agentlogs import follow

    monkeypatch.setattr(follow, "QUIET_S", 0.05)
    monkeypatch.setattr(follow, "IDLE_S", 0.2)
    lines = CLAUDE.read_bytes().splitlines(keepends=True)
    path = tmp_path / "proj" / "db57d2ab.jsonl"
    path.parent.mkdir()
    basic = next(DATA.glob("claudecode/scenarios/2-1_*/recordings/*/transcript.jsonl"))
    others = [tmp_path / "proj" / f"{i:08x}.jsonl" for i in range(50)]
    for other in others:
        other.write_bytes(basic.read_bytes())
    path.write_bytes(b"".join(lines[:12]))  # a call in flight
    h = Harness("claude-code", tmp_path)
    h.f.poll()
    assert len(h.f.files) == 51
    time.sleep(0.1)
    h.f.poll()  # quiet: the held end decided, the place saved
    time.sleep(0.25)
    h.f.poll()
    assert h.f.files == {}  # every file let go
    with path.open("ab") as out:
        out.write(b"".join(lines[12:]))
    h.f.poll()
    assert list(h.f.files) == [path]  # followed again
    for other in others:
        other.unlink()
    h.f.poll()
    h.f.close()
    assert len(h.f._quiet) == 0  # noqa: SLF001 - the vanished are forgotten
    mine = [e for e in unlogged(h.events) if e.session.startswith("db57d2ab")]
    assert mine == batch(CLAUDE)
