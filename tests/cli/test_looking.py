"""Looking never writes (design §6): ``watch --once`` and ``recover --dry-run`` over a ledger with
a finding read it, say what they found, and leave the file as it was, however often someone
looks: no event recorded, no file created or changed."""

from __future__ import annotations

import contextlib
import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import turnwatch
from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import Ledger, connect


def pinned_ledger(path: Path) -> Path:
    """A session whose turn settled a minute ago while "processing" never cleared: pinned."""
    t = time.time() - 60
    ledger = Ledger(path)
    steps: list[tuple[float, str, dict[str, Any]]] = [
        (0.0, names.RUNTIME_STARTED, {names.K_PID: 1, names.K_CREATE_TIME: 1.0}),
        (0.1, names.TURN_STARTED, {}),
        (0.2, names.ABORT_RPC_RECEIVED, {names.K_SOURCE: "ui", names.K_RECEIPT: "accepted"}),
        (0.3, names.TURN_SETTLED, {names.K_OUTCOME: "aborted"}),
    ]
    for dt, kind, attrs in steps:
        turn = None if kind == names.RUNTIME_STARTED else "t"
        ledger.append(Event(kind, "s", t + dt, turn=turn, attrs=attrs))
    ledger.close()
    return path


def state(path: Path) -> tuple[int, str]:
    """The events recorded, and the file's bytes (a reader's own ``-wal``/``-shm`` aside: SQLite
    makes them for any reader of a WAL ledger in a writable folder, empty)."""
    with contextlib.closing(connect(path, readonly=True)) as conn:
        (events,) = conn.execute("SELECT count(*) FROM events").fetchone()
    return events, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "--once"],
        ["watch", "--once", "--recover", "--dry-run"],
        ["recover", "s", "--dry-run"],
    ],
    ids=" ".join,
)
def test_looking_writes_nothing_however_often(tmp_path: Path, argv: list[str]) -> None:
    path = pinned_ledger(tmp_path / "ledger.sqlite3")
    before = state(path)
    for _ in range(3):
        result = turnwatch(*argv, "--ledger", str(path))
        assert "Traceback" not in result.stderr
        assert "pinned" in result.stdout + result.stderr
    assert state(path) == before
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
