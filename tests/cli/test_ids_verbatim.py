"""Ids, turns and tool names print as they were recorded, and nothing recorded acts on the
terminal: an on-call engineer copies names from one command into the next. rich reads
``:name:`` as an emoji code and ``[tag]`` as markup, so a session ``s:fire:1`` printed as
``s🔥1``, or a tool ``[x]Grep`` printed as ``Grep``, is a name no command knows; and an escape
sequence in a session id or a model's tool name would recolour, clear or retitle the terminal.
Control characters are shown escaped, and an id pasted back in that form is found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import streams
from tests.conftest import one_line_exit_2, turnwatch
from turnwatch.tracing.ingest import ingest
from turnwatch.tracing.ledger import Ledger

# Both an emoji code and markup in each: either one mangled fails the test.
SESSION, TURN, TOOL, CALL = "[bold]p:fire:1", "t:smile:[/]", "[link=x]Grep:rocket:", "c[1]"
BUSY = "[i]b:fire:"  # a call runs, no stop: nothing to recover yet, and recover says so
# A colour, a newline and a right-to-left override; a tool that would retitle the terminal.
STOPPING, WRITE = "s\x1b[31m\n\u202eX", "W\x1b]0;owned\x07"
STOPPING_SHOWN, WRITE_SHOWN = "s\\x1b[31m\\n\\u202eX", "W\\x1b]0;owned\\x07"
NAMES = {
    "pinned": SESSION,
    "busy": BUSY,
    "stopping": STOPPING,
    "p1": TURN,
    "Grep": TOOL,
    "Write": WRITE,
    "c1": CALL,
}
RAW = ("\x1b", "\x07", "\u202e")  # what must never reach the terminal as it is


def a_ledger(path: Path) -> Path:
    """:func:`tests.streams.four_states`: its pinned session (a stop whose RPC never returned),
    its busy one, and every session's Grep and first call renamed."""
    lines = []
    for line in streams.four_states():
        ev = json.loads(line)
        for key in ("session", "turn", "tool", "call"):
            if key in ev:
                ev[key] = NAMES.get(ev[key], ev[key])
        lines.append(json.dumps(ev))
    ledger = Ledger(path)
    with streams.write(path.with_suffix(".jsonl"), lines).open("rb") as f:
        ingest(f, ledger.append)
    ledger.close()
    return path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("sessions",), (SESSION, TURN)),
        (("explain", SESSION), (SESSION, TURN, TOOL, CALL)),
        (("recover", SESSION, "--dry-run"), ("pinned_session: would",)),
        (("recover", BUSY, "--dry-run"), (BUSY, TOOL, CALL)),
        (("watch", "--once", "--no-recover"), (SESSION,)),
        (("sessions",), (STOPPING_SHOWN,)),
        (("explain", STOPPING_SHOWN), (STOPPING_SHOWN, WRITE_SHOWN)),
        (("recover", STOPPING_SHOWN, "--dry-run"), (STOPPING_SHOWN, WRITE_SHOWN)),
    ],
    ids=[
        "sessions",
        "explain",
        "recover",
        "recover-nothing-yet",
        "watch",
        "sessions-controls",
        "explain-controls",
        "recover-controls",
    ],
)
def test_what_a_command_prints_is_what_was_recorded(
    tmp_path: Path, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    path = a_ledger(tmp_path / "ledger.sqlite3")
    result = turnwatch(*argv, "--ledger", str(path), env={"COLUMNS": "200"})
    out = result.stdout + result.stderr
    assert "Traceback" not in out
    for text in expected:
        assert text in out, (text, out)
    assert not any(ord(ch) >= 0x1F300 for ch in out), out  # no emoji was made of a name
    assert not any(raw in out for raw in RAW), out


def test_an_unknown_id_is_said_as_it_was_asked(tmp_path: Path) -> None:
    path = a_ledger(tmp_path / "ledger.sqlite3")
    one_line_exit_2(turnwatch("explain", "[b]no:fire:", "--ledger", str(path)), "[b]no:fire:")
    # Its one line names ids the ledger holds (one with a newline) escaped, as the asked one.
    said = turnwatch("explain", "no\x1b[2J\n", "--ledger", str(path))
    one_line_exit_2(said, "no\\x1b[2J\\n", STOPPING_SHOWN)
    assert not any(raw in said.stderr for raw in RAW), said.stderr


def test_an_id_is_found_as_typed_too(tmp_path: Path) -> None:
    """An id that holds no escape: typed as it is, it is not mistaken for one that does."""
    path = a_ledger(tmp_path / "ledger.sqlite3")
    assert turnwatch("explain", STOPPING, "--ledger", str(path)).returncode == 0
    one_line_exit_2(turnwatch("explain", "s\\x1b", "--ledger", str(path)), "s\\x1b")


def test_the_recover_command_explain_prints_runs_as_pasted(tmp_path: Path) -> None:
    """``Recover with:`` is a command people paste into a shell: the id (``[bold]…`` is a glob
    to a shell) and a ledger path with a space in it are quoted as a shell reads them."""
    import shlex

    where = tmp_path / "a dir"
    where.mkdir()
    path = a_ledger(where / "ledger.sqlite3")
    said = turnwatch("explain", SESSION, "--ledger", str(path), env={"COLUMNS": "300"})
    [line] = [x for x in said.stdout.splitlines() if x.startswith("Recover with: ")]
    argv = shlex.split(line.removeprefix("Recover with: "))
    assert argv[:3] == ["turnwatch", "recover", SESSION]
    assert argv[3:] == ["--ledger", str(path)]
    pasted = turnwatch(*argv[1:], "--dry-run")
    assert pasted.returncode == 0, pasted.stdout + pasted.stderr
    assert "pinned_session: would" in pasted.stdout


def test_an_id_of_bytes_not_utf8_is_shown_escaped_and_found_as_typed(tmp_path: Path) -> None:
    """A runtime's session id decoded with ``surrogateescape`` (bytes not UTF-8) is kept
    escaped (``s\\udcff``): typed as those bytes (a shell's ``$'s\\xff'``) or as shown, it is
    found; before, the bytes were a traceback."""
    from tests.tracing.test_ledger_values import odd

    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.extend(odd("s\udcff", 0))
    ledger.close()
    shown = turnwatch("sessions", "--ledger", str(path))
    assert shown.returncode == 0, shown.stderr
    assert "s\\udcff" in shown.stdout
    for typed in ("s\udcff", "s\\udcff"):  # the bytes (subprocess writes them back), as shown
        for argv in (("explain", typed), ("recover", typed, "--dry-run")):
            done = turnwatch(*argv, "--ledger", str(path))
            assert done.returncode == 0, (argv, done.stderr)
            assert "Grep\\udcff" in done.stdout or "nothing holds" in done.stdout, done.stdout
    one_line_exit_2(turnwatch("explain", "x\udcff", "--ledger", str(path)))
