"""Never harm someone else's file, and say plainly what is wrong with a path.

Permission cases run the real console script without the capability to override file
permissions (CI runs as root, whom permissions do not otherwise stop).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import streams
from tests.conftest import turnwatch


def bound(*argv: str) -> subprocess.CompletedProcess[str]:
    """The console script, held to file permissions: as root, without CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH (util-linux's setpriv)."""
    exe = shutil.which("turnwatch", path=os.path.dirname(sys.executable))
    assert exe is not None
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "setpriv (util-linux) is needed to test permissions as root"
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
    return subprocess.run(
        [*prefix, exe, *argv], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory anyone may enter (pytest's tmp_path is private to its owner)."""
    d = Path(tempfile.mkdtemp(prefix="tw-other-"))
    d.chmod(0o755)
    yield d
    d.chmod(0o755)
    shutil.rmtree(d)


def one_line(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert text in lines[0], lines[0]


def test_ingest_refuses_another_database_without_touching_it(tmp_path: Path) -> None:
    other = tmp_path / "app.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    src = streams.write(tmp_path / "e.jsonl", streams.four_states())

    result = turnwatch("ingest", str(src), "--ledger", str(other))

    one_line(result, 2, "not a turnwatch ledger (tables: users)")
    assert other.read_bytes() == before  # not even switched to WAL
    assert not Path(f"{other}-wal").exists()


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    one_line(turnwatch("sessions", "--ledger", str(tmp_path)), 2, "is a directory")


def test_read_only_commands_work_in_a_read_only_directory(shared_dir: Path) -> None:
    ledger = shared_dir / "ledger.sqlite3"
    src = streams.write(shared_dir / "e.jsonl", streams.four_states())
    assert turnwatch("ingest", str(src), "--ledger", str(ledger)).returncode == 0
    shared_dir.chmod(0o555)

    listed = bound("sessions", "--json", "--ledger", str(ledger))
    explained = bound("explain", "pinned", "--json", "--ledger", str(ledger))
    looked = bound("watch", "--once", "--json", "--ledger", str(ledger))

    assert listed.returncode == 0, listed.stderr
    assert explained.returncode == 0, explained.stderr
    assert looked.returncode == 1, looked.stderr  # findings, reported; nothing written
    assert sorted(p.name for p in shared_dir.iterdir()) == ["e.jsonl", "ledger.sqlite3"]


def test_an_unreadable_ledger_is_one_line(shared_dir: Path) -> None:
    ledger = shared_dir / "ledger.sqlite3"
    src = streams.write(shared_dir / "e.jsonl", streams.four_states())
    assert turnwatch("ingest", str(src), "--ledger", str(ledger)).returncode == 0
    ledger.chmod(0o000)
    one_line(bound("sessions", "--ledger", str(ledger)), 2, "Permission denied")
