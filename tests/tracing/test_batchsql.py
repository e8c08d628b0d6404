"""Batches travel to SQLite in few statements (one JSON text; bound multi-row VALUES for each
full MAX_ROWS of a large one): every value comes back exactly, whichever way it went."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing import batchsql
from turnwatch.tracing.ledger import connect, read_events, write_batch
from turnwatch.tracing.summary import Summary

_TEXT = st.text(min_size=1, max_size=12)  # any code point: quotes, controls, non-BMP
_ATTR_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(
    ts=st.lists(
        st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=30,
    ),
    session=_TEXT,
    attrs=st.dictionaries(_TEXT, _ATTR_VALUES, max_size=4),
    mono_ns=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_values_come_back_bit_for_bit(
    tmp_path_factory: Any, ts: list[float], session: str, attrs: dict[str, Any], mono_ns: int
) -> None:
    path = tmp_path_factory.mktemp("b") / "ledger.sqlite3"
    conn = connect(path)
    written = [
        Event(
            names.TOOL_PROGRESS,
            session,
            t,
            mono_ns,
            turn="t",
            call="c",
            tool="Grep",
            attrs=attrs,
            trace_id="0af7651916cd43dd8448eb211c80319c",
        )
        for t in ts
    ]
    # As many as a live writer's batch (one JSON text), and past MAX_ROWS (bound values too).
    large = written * (batchsql.MAX_ROWS // len(written) + 1)
    write_batch(conn, Summary(), [(e, None) for e in written])
    write_batch(conn, Summary(), [(e, None) for e in large])
    back = [e for _seq, e in read_events(conn)]
    assert back == written + large
    (last,) = conn.execute("SELECT last_ts FROM sessions").fetchone()
    assert last == max(ts)  # the summary's REAL columns are exact too
    conn.close()


def test_values_orjson_refuses_are_written_anyway(tmp_path: Path) -> None:
    """A >64-bit integer, a non-string key, a mapping that is not a dict, an unknown object."""
    conn = connect(tmp_path / "ledger.sqlite3")
    odd: list[Any] = [
        {"big": 2**80 + 1},  # not 2**80: a float holds that exactly, and the test could not fail
        {1: "one"},
        MappingProxyType({"proxied": True}),
        {"obj": Path("/x")},
    ]
    events = [Event(names.TURN_STARTED, "s", i, turn="t", attrs=a) for i, a in enumerate(odd)]
    assert write_batch(conn, Summary(), [(e, None) for e in events]) == 4
    back = [e.attrs for _seq, e in read_events(conn)]
    assert back[0] == {"big": 2**80 + 1}
    assert back[1] == {"1": "one"}
    assert back[2] == {"proxied": True}
    assert back[3] == {"obj": "/x"}
    conn.close()


def test_a_batch_is_a_handful_of_statements_not_one_per_row(tmp_path: Path) -> None:
    """Every statement step gives up the GIL; a busy event loop makes each one cost up to 5 ms."""
    conn = connect(tmp_path / "ledger.sqlite3")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    events = []
    for c in range(500):
        for kind in (names.TOOL_REQUESTED, names.TOOL_STARTED, names.TOOL_PROGRESS):
            events.append(
                Event(kind, f"s{c % 7}", float(c), turn="t", call=f"c{c}", tool="Grep", attrs={})
            )
        events.append(
            Event(names.TOOL_FINISHED, f"s{c % 7}", c + 0.5, turn="t", call=f"c{c}", tool="Grep")
        )
    summary = Summary()
    write_batch(conn, summary, [(e, None) for e in events[:1000]])
    statements.clear()
    write_batch(conn, summary, [(e, None) for e in events[1000:]])
    # BEGIN, the version check, the calls' lookup, the events (512 bound, the rest as JSON), the
    # calls, the sessions, COMMIT: 8, where one per row would be 1,257.
    assert len(statements) <= 8, statements
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2000
    ended = conn.execute("SELECT count(*) FROM calls WHERE ended_ts IS NOT NULL").fetchone()[0]
    assert ended == 500
    conn.close()


def test_a_summary_value_sqlite_cannot_bind_is_written_anyway(tmp_path: Path) -> None:
    """A runtime's attributes reach the summary rows as given: a pid beyond 64 bits, an object
    for a control path. In a batch large enough for bound values, the chunk holding one goes as
    JSON instead; nothing is lost."""
    conn = connect(tmp_path / "ledger.sqlite3")
    odd = Event(
        names.RUNTIME_STARTED, "s0", 1.0, attrs={"pid": 2**80, "control": Path("/run/x.sock")}
    )
    others = [
        Event(names.RUNTIME_STARTED, f"s{i}", 1.0, attrs={"pid": i})
        for i in range(1, batchsql.MAX_ROWS + 88)
    ]
    assert write_batch(conn, Summary(), [(e, None) for e in [odd, *others]]) == len(others) + 1
    (n,) = conn.execute("SELECT count(*) FROM sessions").fetchone()
    assert n == len(others) + 1
    (pid, control) = conn.execute(
        "SELECT runtime_pid, control FROM sessions WHERE session = 's0'"
    ).fetchone()
    assert (float(pid), control) == (float(2**80), "/run/x.sock")
    conn.close()
