"""Ids, turns and tool names print as they are recorded: an on-call engineer copies them from
one command into the next. rich reads ``:name:`` as an emoji code and ``[tag]`` as markup; a
session ``s:fire:1`` printed as ``s🔥1`` is an id no command knows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import one_line_exit_2, turnwatch
from turnwatch import names
from turnwatch.runtime.events import now_event
from turnwatch.tracing.ledger import Ledger

SESSION, TURN, TOOL = "s:fire:1", "t:smile:", "Grep:rocket:"
MARKUP = "[red]x[/red]"


def a_ledger(path: Path) -> Path:
    """A session whose extension call still runs (so every command has something to say of
    it), and one whose id is markup."""
    ledger = Ledger(path)
    ledger.append(now_event(names.TURN_STARTED, SESSION, turn=TURN))
    attrs = {names.K_CLASS: "extension"}
    ledger.append(
        now_event(names.TOOL_REQUESTED, SESSION, turn=TURN, call="c1", tool=TOOL, attrs=attrs)
    )
    ledger.append(now_event(names.TOOL_STARTED, SESSION, turn=TURN, call="c1", tool=TOOL))
    ledger.append(now_event(names.TURN_STARTED, MARKUP, turn="t2"))
    ledger.close()
    return path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("sessions",), (SESSION, MARKUP)),
        (("explain", SESSION), (SESSION, TURN, TOOL)),
        (("recover", SESSION, "--dry-run"), (SESSION,)),
        (("watch", "--once", "--no-recover"), ()),
    ],
    ids=["sessions", "explain", "recover", "watch"],
)
def test_what_a_command_prints_is_what_was_recorded(
    tmp_path: Path, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    path = a_ledger(tmp_path / "ledger.sqlite3")
    result = turnwatch(*argv, "--ledger", str(path))
    out = result.stdout + result.stderr
    assert "Traceback" not in out
    for text in expected:
        assert text in out, (text, out)
    assert not any(ord(ch) >= 0x1F300 for ch in out), out  # no emoji was made of an id


def test_an_unknown_id_is_said_as_it_was_asked(tmp_path: Path) -> None:
    path = a_ledger(tmp_path / "ledger.sqlite3")
    one_line_exit_2(turnwatch("explain", "no:fire:", "--ledger", str(path)), "no:fire:")
