"""``turnwatch ingest --follow`` loses nothing: a pipe ends at EOF, a truncated file is read again
from its start, a rotated file is followed to its successor, and a restart resumes where the last
run stopped. Through the real console script, with real files and signals.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.streams import line


def exe() -> str:
    path = shutil.which("turnwatch", path=os.path.dirname(sys.executable))
    assert path is not None
    return path


def events(n: int, start: int = 0) -> list[str]:
    """``n`` distinct events (distinct sessions: no dedup between them)."""
    return [line(1000.0 + i, "turn.started", f"s{i}", turn="t") for i in range(start, start + n)]


def count(ledger: Path) -> int:
    if not ledger.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
        try:
            return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def append(path: Path, lines: list[str]) -> None:
    with path.open("a") as fh:
        fh.write("".join(x + "\n" for x in lines))


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[tuple[Path, Path, list[subprocess.Popen[str]]]]:
    src, ledger = tmp_path / "events.jsonl", tmp_path / "ledger.sqlite3"
    src.touch()
    started: list[subprocess.Popen[str]] = []
    yield src, ledger, started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()
        if p.stderr is not None:
            p.stderr.close()


def start(src: Path, ledger: Path, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [exe(), "ingest", str(src), "--follow", "--ledger", str(ledger)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    started.append(p)
    return p


def stop(p: subprocess.Popen[str]) -> str:
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    return err


def test_a_pipe_ends_at_eof(tmp_path: Path) -> None:
    data = "".join(x + "\n" for x in events(3))
    result = subprocess.run(
        [exe(), "ingest", "-", "--follow", "--ledger", str(tmp_path / "l.sqlite3")],
        input=data,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert "ingested 3 new event(s)" in result.stderr


def test_truncation_rotation_and_restart_lose_nothing(
    follower: tuple[Path, Path, list[subprocess.Popen[str]]],
) -> None:
    src, ledger, started = follower
    p = start(src, ledger, started)
    append(src, events(4))
    wait_until(lambda: count(ledger) == 4, timeout=30, what="the first 4 lines")

    src.write_text("")  # truncated in place, then written again
    append(src, events(9, start=4))
    wait_until(lambda: count(ledger) == 13, timeout=30, what="all 9 lines after the truncation")

    src.rename(src.with_suffix(".1"))  # rotated: the new file under the old name
    append(src, events(3, start=13))
    wait_until(lambda: count(ledger) == 16, timeout=30, what="the rotated-in file's 3 lines")

    err = stop(p)
    assert "truncated" in err
    assert "rotated" in err
    assert "not JSON" not in err

    append(src, events(2, start=16))  # written while no one follows
    p = start(src, ledger, started)
    wait_until(lambda: count(ledger) == 18, timeout=30, what="the 2 lines written meanwhile")
    err = stop(p)
    assert "resuming at line 4" in err  # the rotated-in file's 3 lines were already read


@pytest.mark.parametrize(
    "stored",
    ["not json", "[1, 2]", '{"dev": 1}', '{"dev": 1, "ino": 2, "offset": "x", "lineno": 3}'],
)
def test_an_unreadable_checkpoint_is_said_and_the_file_read_from_its_start(
    follower: tuple[Path, Path, list[subprocess.Popen[str]]], stored: str
) -> None:
    """A checkpoint the ledger holds that is not one (a damaged meta row, another version's):
    said, and the file read from its start (its lines already in the ledger counted once).
    Before: the follow never started (a traceback: JSONDecodeError, TypeError)."""
    src, ledger, started = follower
    p = start(src, ledger, started)
    append(src, events(3))
    wait_until(lambda: count(ledger) == 3, timeout=30, what="the first 3 lines")
    stop(p)
    with sqlite3.connect(ledger) as conn:
        changed = conn.execute(
            "UPDATE meta SET value = ? WHERE key LIKE 'ingest.offset:%'", (stored,)
        ).rowcount
    conn.close()
    assert changed == 1
    append(src, events(2, start=3))
    p = start(src, ledger, started)
    wait_until(
        lambda: count(ledger) == 5 or p.poll() is not None, timeout=30, what="the 2 new lines"
    )
    assert p.poll() is None, p.communicate()[1]
    err = stop(p)
    assert "Traceback" not in err, err
    assert "checkpoint" in err, err
    assert "from its start" in err, err
    assert count(ledger) == 5  # the 3 read before, kept once
