"""``watch --agents``' reader of the agent CLIs (``cli.agent_files.AgentWatch``) over a ledger
that is rotated under it: the sessions it looks for processes of are the ones at the ledger's
path, as the writer's and every other reader's are."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import orjson

from tests.conftest import Procs
from tests.watchdog.helpers import Recorder
from tests.watchdog.test_agentprocs import Cli, session
from turnwatch import names
from turnwatch.cli.agent_files import AgentWatch
from turnwatch.integrations.agentlogs.follow import KEY_PREFIX, key
from turnwatch.runtime.events import storable_text
from turnwatch.tracing.ledger import Ledger, connect, meta_keys, read_events


def _attributed(path: Path, sid: str) -> list[int]:
    """The CLI processes the ledger at ``path`` has attributed to ``sid``."""
    conn = connect(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT attrs_json FROM events WHERE session = ? AND kind = ?",
            (sid, names.RUNTIME_STARTED),
        ).fetchall()
    finally:
        conn.close()
    return [a[names.K_PID] for (raw,) in rows if names.K_PID in (a := orjson.loads(raw))]


def test_a_session_written_after_a_rotation_has_its_cli_found(tmp_path: Path, procs: Procs) -> None:
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    said: list[str] = []
    watch = AgentWatch(
        rec.ledger, {"claude-code": tmp_path / "none"}, keep_args=False, say=said.append
    )
    try:
        rec(names.TURN_STARTED, "before", turn="before.t1")
        rec.ledger.flush()
        watch.poll()
        # logrotate's way: the file moved aside; the writer writes at its path again.
        path.rename(tmp_path / "ledger.sqlite3.1")
        project = tmp_path / "project"
        project.mkdir()
        cli = Cli(tmp_path, project, procs)
        session(rec, project, "after", ago=0.0)
        assert path.exists()  # the writer opened the path again
        # Its WAL into the new file, as SQLite's autocheckpoint would: a reader still on the old
        # file shares the WAL's name, so this is what tells which file it reads.
        with contextlib.closing(sqlite3.connect(path)) as c:
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        watch.poll()
        rec.ledger.flush()
        assert _attributed(path, "after") == [cli.proc.pid], said
    finally:
        watch.close()
        rec.close()


def test_an_unreadable_ledger_is_said_once_and_read_again_when_it_mends(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    rec = Recorder(path)
    said: list[str] = []
    watch = AgentWatch(
        rec.ledger, {"claude-code": tmp_path / "none"}, keep_args=False, say=said.append
    )
    try:
        rec(names.TURN_STARTED, "s", turn="s.t1")
        rec.ledger.flush()
        watch.poll()
        with contextlib.closing(sqlite3.connect(path)) as c:  # no WAL frames to read through
            c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        kept = tmp_path / "kept"
        path.rename(kept)
        path.write_bytes(b"not a ledger, someone's notes" * 100)
        watch.poll()
        watch.poll()
        assert len(said) == 1, said
        assert str(path) in said[0]
        assert "looked at when it can be read" in said[0]
        kept.replace(path)
        watch.poll()
        assert said[1:] == [f"{path}: readable again"]
    finally:
        watch.close()
        rec.close()


def test_a_project_directory_not_named_in_utf8_is_followed_and_resumed(tmp_path: Path) -> None:
    """Claude Code names a project's directory after its working directory: one in Latin-1
    (``café``) is a path with a surrogate here. Its file is read, its checkpoint kept, and a
    restart resumes it: nothing twice, and the writer lives on."""
    from tests.integrations.test_agentlogs_follow import CLAUDE

    root = tmp_path / "projects"
    project = Path(os.fsdecode(os.fsencode(root) + b"/-home-caf\xe9"))
    project.mkdir(parents=True)
    (project / "db57d2ab.jsonl").write_bytes(CLAUDE.read_bytes())
    path = tmp_path / "ledger.sqlite3"
    counts = []
    for _run in range(2):  # the second is a restart: it resumes, it reads nothing twice
        ledger = Ledger(path)
        said: list[str] = []
        watch = AgentWatch(ledger, {"claude-code": root}, keep_args=False, say=said.append)
        watch.poll(final=True)
        watch.close()
        assert ledger.flush(timeout=30), said
        ledger.close()
        assert ledger.lost == 0
        with contextlib.closing(connect(path, readonly=True)) as conn:
            counts.append(sum(1 for _ in read_events(conn)))
    assert counts[0] > 5
    assert counts == [counts[0]] * 2
    assert any("resumed" in s for s in said), said


def _checkpoints(path: Path) -> list[str]:
    with contextlib.closing(connect(path, readonly=True)) as conn:
        return meta_keys(conn, KEY_PREFIX)


def test_the_ledger_keeps_no_checkpoint_of_a_file_that_is_gone(tmp_path: Path) -> None:
    """Claude Code deletes a transcript after 30 days: its checkpoint goes from the ledger, in
    the run that sees it go and at the start of one after a deletion nothing saw. A project
    directory not named in UTF-8 (its keys kept escaped) keeps the checkpoints of its files."""
    from tests.integrations.test_agentlogs_follow import CLAUDE

    root = tmp_path / "projects"
    latin1 = Path(os.fsdecode(os.fsencode(root) + b"/-home-caf\xe9"))
    plain = root / "-home-me"
    files = []
    for project in (latin1, plain):
        project.mkdir(parents=True)
        for name in ("a", "b"):
            (f := project / f"{name}.jsonl").write_bytes(CLAUDE.read_bytes())
            files.append(f)
    path = tmp_path / "ledger.sqlite3"

    def run(between: Callable[[], object] = lambda: None) -> None:
        ledger = Ledger(path)
        watch = AgentWatch(ledger, {"claude-code": root}, keep_args=False, say=print)
        watch.poll(final=True)
        assert ledger.flush(timeout=30)
        between()
        watch.poll(final=True)
        watch.close()
        ledger.close()

    run()
    assert len(_checkpoints(path)) == 4
    run(between=files[3].unlink)  # seen going
    assert len(_checkpoints(path)) == 3
    files[1].unlink()  # gone while nothing followed
    run()
    kept = _checkpoints(path)
    assert len(kept) == 2
    assert sorted(kept) == sorted(storable_text(key(f)) for f in (files[0], files[2]))
