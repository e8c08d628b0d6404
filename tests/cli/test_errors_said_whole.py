"""Errors said whole and short: an unknown id names at most five of the closest ids, never every
one (and never a traceback, not even on an empty ledger); a file of bad lines is its first
problems and a count; an empty file is no events, not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import one_line_exit_2, turnwatch
from turnwatch import names
from turnwatch.runtime import LocalHost, Runtime, UnknownSessionError
from turnwatch.runtime.events import now_event
from turnwatch.tracing.ledger import Ledger


def a_ledger(path: Path, sessions: int) -> Path:
    ledger = Ledger(path)
    for i in range(sessions):
        ledger.append(now_event(names.TURN_STARTED, f"sess-{i:03d}", turn=f"t{i}"))
    ledger.close()
    return path


@pytest.mark.parametrize("command", ["explain", "recover"])
def test_an_unknown_id_on_an_empty_ledger_is_one_line(tmp_path: Path, command: str) -> None:
    path = a_ledger(tmp_path / "ledger.sqlite3", 0)
    one_line_exit_2(turnwatch(command, "nope", "--ledger", str(path)), "unknown session", "nope")


def test_an_unknown_id_names_five_of_the_closest(tmp_path: Path) -> None:
    path = a_ledger(tmp_path / "ledger.sqlite3", 600)
    result = turnwatch("explain", "sess-42", "--ledger", str(path))
    one_line_exit_2(result, "unknown session", "sess-42", "(and 595 more)")
    assert result.stderr.count("sess-") == 6  # the id asked for, and five named
    assert len(result.stderr) < 300


async def test_the_runtime_names_five_of_the_closest_too() -> None:
    rt = Runtime(LocalHost(subreaper=False))
    for i in range(50):
        rt.open_session(f"sess-{i:03d}")
    with pytest.raises(UnknownSessionError) as raised:
        rt.session("sess-7")
    assert str(raised.value).count("sess-") <= 6
    with pytest.raises(UnknownSessionError, match="none"):
        Runtime(LocalHost(subreaper=False)).session("x")


def test_ingest_of_a_binary_file_says_the_first_problems_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    binary = tmp_path / "blob"
    binary.write_bytes(bytes(range(256)) * 64 + b"\n\xff\xfe\n" * 300)
    result = turnwatch("ingest", str(binary), "--ledger", str(tmp_path / "l.sqlite3"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 14, lines  # ten lines, the file's verdict, the count, the summary
    assert any("not a Codex, Claude Code or Gemini CLI session file" in x for x in lines)
    assert any("more unreadable line(s)" in x for x in lines)
    assert "Traceback" not in result.stderr


def test_ingest_of_an_empty_file_is_no_events_and_no_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = turnwatch("ingest", str(empty), "--ledger", str(tmp_path / "l.sqlite3"))
    assert result.returncode == 0, result.stderr
    assert "ingested 0 new event(s)" in result.stderr
