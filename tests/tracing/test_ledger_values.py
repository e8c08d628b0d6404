"""Values SQLite cannot take as they are, reaching the writer: a lone surrogate in a name (a
path decoded with ``surrogateescape``, a tool name a model wrote as ``"\\udcff"`` and the
standard library parsed), an integer beyond 64 bits, a NUL beside either. Each event is kept
and the ledger stays readable; none stops the writer. Real SQLite files, the real writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing import view
from turnwatch.tracing.batchsql import MAX_ROWS
from turnwatch.tracing.ledger import Ledger, connect, get_meta, read_events


def odd(session: str, i: int) -> list[Event]:
    """A turn whose names and numbers SQLite cannot store as given."""
    t = f"t{i}"
    return [
        Event(names.TURN_STARTED, session, 1e9 + i, turn=t),
        Event(names.TOOL_REQUESTED, session, 1e9 + i, turn=t, call="c", tool="Grep\udcff"),
        Event(
            names.TOOL_STARTED,
            session,
            1e9 + i,
            mono_ns=10**20,
            turn=t,
            call="c",
            tool="Grep\udcff",
            attrs={"pid": 10**30, "create_time": 1.0, "path": "/tmp/\udcfe"},
        ),
        Event(names.TOOL_FINISHED, session, 1e9 + i, turn=t, call="c", tool="Grep\udcff"),
        Event(names.TURN_SETTLED, session, 1e9 + i, turn=t, attrs={"outcome": "completed"}),
        Event(names.PROCESSING_CLEARED, session, 1e9 + i, turn=t),
    ]


@pytest.mark.parametrize("many", [False, True], ids=["a live batch", "a batch behind"])
@pytest.mark.parametrize("session", ["s\udcff", "s\x00\udcff", "s\x00"], ids=repr)
def test_odd_values_keep_every_event_and_a_readable_ledger(
    tmp_path: Path, many: bool, session: str
) -> None:
    path = tmp_path / "ledger.sqlite3"
    turns = MAX_ROWS // 6 + 2 if many else 1  # past MAX_ROWS rows: the bound statements
    evs = [Event(names.TURN_STARTED, "before", 1e9, turn="t")]
    for i in range(turns):
        evs += odd(session, i)
    evs.append(Event(names.TURN_STARTED, "after", 1e9 + 1, turn="t"))
    ledger = Ledger(path)
    ledger.extend(evs)
    assert ledger.flush(timeout=30), "the writer stopped"
    ledger.close()
    assert (ledger.written, ledger.lost) == (len(evs), 0)
    conn = connect(path, readonly=True)
    rows = [ev for _seq, ev in read_events(conn)]  # every row decodes
    assert len(rows) == len(evs)
    shown = session.encode("utf-8", "backslashreplace").decode()
    assert [r.session for r in rows] == ["before"] + [shown] * (len(evs) - 2) + ["after"]
    assert rows[2].tool == "Grep\\udcff"  # escaped, as Python writes it
    assert rows[3].attrs["path"] == "/tmp/\udcfe"  # attributes are JSON text: kept exactly
    assert {s.session for s in view.sessions(conn)} == {"before", shown, "after"}


def test_two_names_differing_only_in_what_sqlite_cannot_store_stay_two(tmp_path: Path) -> None:
    """Invariant 4: no record crosses to another session (U+FFFD for both would merge them)."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    ledger.extend([*odd("s\udcfe", 0), *odd("s\udcff", 0)])
    ledger.close()
    conn = connect(path, readonly=True)
    assert {s.session for s in view.sessions(conn)} == {"s\\udcfe", "s\\udcff"}


def test_a_checkpoint_of_a_path_not_in_utf8_is_kept_and_found(tmp_path: Path) -> None:
    """An agent CLI's session file under a directory named in Latin-1 (Claude Code names its
    project directories after the working directory): its checkpoint's key holds a surrogate."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    key = "agents.offset:/root/.claude/projects/caf\udce9/s.jsonl"
    ledger.put_meta(key, '{"offset": 10, "name": "caf\udce9"}')
    ledger.append(Event(names.TURN_STARTED, "after", 1e9, turn="t"))
    assert ledger.flush(timeout=30), "the writer stopped"
    ledger.close()
    assert ledger.written == 1
    conn = connect(path, readonly=True)
    assert json.loads(get_meta(conn, key) or "null") == {"offset": 10, "name": "caf\udce9"}


@pytest.mark.parametrize(
    "bad",
    [
        Event(names.TURN_STARTED, None, 1e9, turn="t"),  # type: ignore[arg-type]
        Event(names.TURN_STARTED, "s", 1e9, turn="t", attrs=[1, 2]),  # type: ignore[arg-type]
    ],
    ids=["no session", "attributes not a mapping"],
)
@pytest.mark.parametrize("many", [False, True], ids=["a live batch", "a batch behind"])
def test_an_event_that_cannot_be_written_loses_itself_alone_and_the_writer_goes_on(
    tmp_path: Path, bad: Event, many: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A caller's bug (an event the schema of no ledger takes) costs that event, counted and
    said; not its batch (up to 2,000 events), and not the writer (it had died, and every event
    after it was lost while flush() said all was written)."""
    path = tmp_path / "ledger.sqlite3"
    n = 600 if many else 3
    good = [Event(names.TURN_STARTED, f"g{i}", 1e9 + i, turn="t") for i in range(n)]
    ledger = Ledger(path)
    ledger.extend([*good[:2], bad, *good[2:]])
    assert ledger.flush(timeout=30), "the writer stopped"
    ledger.append(Event(names.TURN_STARTED, "later", 1e9, turn="t"))
    assert ledger.flush(timeout=30), "the writer stopped"
    ledger.close()
    assert (ledger.written, ledger.lost) == (len(good) + 1, 1)
    assert "could not be written" in caplog.text
    conn = connect(path, readonly=True)
    assert {ev.session for _s, ev in read_events(conn)} == {e.session for e in good} | {"later"}
