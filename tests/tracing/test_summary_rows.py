"""The writer's summary rows read back from the file decide as the rows it kept would: any stream
of events, cut into any batches, with the kept rows dropped at any point (another writer's
commit, the cache bound), leaves the rows and the steps (what spans and metrics read) of one
fold over the whole stream in memory. Real SQLite files."""

from __future__ import annotations

import sqlite3
import tempfile
from dataclasses import astuple
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from turnwatch import names
from turnwatch.runtime.events import Event, storable_text
from turnwatch.runtime.fold import CALL_COLUMNS, SESSION_COLUMNS, Fold, Step, Store
from turnwatch.tracing.ledger import connect, write_batch
from turnwatch.tracing.summary import Summary

# Ids as they come: a lone surrogate (a name decoded with surrogateescape), text SQLite's JSON
# functions treat specially, the ids of one turn.
_SESSIONS = ["s", "s\udcff", "é\u202e", "[x]"]
_ATTRS = st.fixed_dictionaries(
    {},
    optional={
        names.K_OUTCOME: st.sampled_from(["completed", "aborted", "failed", "discarded"]),
        names.K_RECEIPT: st.sampled_from(["accepted", "joined"]),
        names.K_SOURCE: st.sampled_from(["ui", "browser", "watchdog"]),
        names.K_CLASS: st.sampled_from(["read_only", "process", "mutating", "extension"]),
        names.K_MODE: st.sampled_from(["adr", "legacy"]),
        names.K_PID: st.integers(1, 4_000_000),
        names.K_CREATE_TIME: st.floats(0, 2e9),
        names.K_PARENT_SESSION: st.sampled_from(_SESSIONS),
    },
)
_EVENTS = st.lists(
    st.builds(
        Event,
        kind=st.sampled_from(sorted(names.EVENT_KINDS)),
        session=st.sampled_from(_SESSIONS),
        ts_unix=st.floats(1e9, 1e9 + 100),
        mono_ns=st.one_of(st.none(), st.integers(0, 10**12)),
        turn=st.sampled_from(["t1", "t2", "t\udcfe"]),
        call=st.one_of(st.none(), st.sampled_from(["c1", "c2", "c\udcfd"])),
        tool=st.one_of(st.none(), st.sampled_from(["Bash", "Grep", "Write", "mcp__x__y"])),
        attrs=_ATTRS,
    ),
    min_size=1,
    max_size=30,
)


def _rows(conn: sqlite3.Connection) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """Every row of both summary tables, in the states' field order (``class`` quoted: SQL)."""
    return _select(conn, "sessions", SESSION_COLUMNS), _select(conn, "calls", CALL_COLUMNS)


def _select(conn: sqlite3.Connection, table: str, cols: tuple[str, ...]) -> set[tuple[Any, ...]]:
    quoted = ", ".join(f'"{c}"' for c in cols)
    return {tuple(r) for r in conn.execute(f"SELECT {quoted} FROM {table}")}


def _want(store: Store) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """The rows of a fold's states, as the file keeps them (text UTF-8 cannot carry, escaped)."""
    return (
        {tuple(map(_stored, astuple(s))) for s in store.sessions.values()},
        {tuple(map(_stored, astuple(c))) for c in store.calls.values()},
    )


def _stored(value: Any) -> Any:
    return storable_text(value) if isinstance(value, str) else value


def _moves(steps: list[Step]) -> list[tuple[str, tuple[Any, ...]]]:
    return [(st.ev.kind, st.moves) for st in steps]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=_EVENTS,
    cuts=st.lists(st.integers(1, 30), max_size=6),
    forget=st.lists(st.booleans(), max_size=8),
    max_rows=st.integers(0, 6),
)
# A session named with a lone surrogate, its row read back between two batches: the row came back
# under the escaped name, and the fold began the session afresh, turn and "processing" lost.
@example(
    events=[
        Event(names.TURN_STARTED, "s\udcff", 1e9, turn="t1"),
        Event(names.STOP_CLICKED, "s\udcff", 1e9 + 1, turn="t1"),
    ],
    cuts=[1],
    forget=[True],
    max_rows=6,
)
def test_rows_read_back_decide_as_the_rows_kept(
    events: list[Event], cuts: list[int], forget: list[bool], max_rows: int
) -> None:
    fold = Fold(Store())
    want_steps = [fold(ev) for ev in events]
    want = _moves(want_steps)
    with tempfile.TemporaryDirectory() as tmp:
        conn = connect(Path(tmp) / "ledger.sqlite3")
        summary = Summary(max_rows=max_rows)
        got_steps: list[Step] = []

        def read(st: Step) -> Event:
            got_steps.append(st)
            return st.ev

        at = 0
        for i, n in enumerate([*cuts, len(events)]):
            batch = events[at : at + n]
            at += len(batch)
            if batch:
                write_batch(conn, summary, [(e, None) for e in batch], read)
            if i < len(forget) and forget[i]:
                summary.forget()
        got_rows = _rows(conn)
        conn.close()
    assert _moves(got_steps) == want
    assert got_rows == _want(fold.store)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_EVENTS, cuts=st.lists(st.integers(1, 30), max_size=6), by=st.lists(st.booleans()))
def test_two_writers_taking_turns_leave_the_rows_of_one_fold(
    events: list[Event], cuts: list[int], by: list[bool]
) -> None:
    """The runtime's writer and the watchdog's, each with its kept rows, on one file: each reads
    what the other committed (``PRAGMA data_version``) before its next batch."""
    fold = Fold(Store())
    for ev in events:
        fold(ev)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite3"
        writers = [(connect(path), Summary()), (connect(path), Summary())]
        at = 0
        for i, n in enumerate([*cuts, len(events)]):
            batch = events[at : at + n]
            at += len(batch)
            conn, summary = writers[int(by[i]) if i < len(by) else 0]
            if batch:
                write_batch(conn, summary, [(e, None) for e in batch])
        got_rows = _rows(writers[0][0])
        for conn, _ in writers:
            conn.close()
    assert got_rows == _want(fold.store)
