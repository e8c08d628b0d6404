"""One record, one shape, built by name: a ledger row becomes the fold's state by column name, and
every view takes the fields it shares with that state by name. Each field gets a value of its
own here, so a view that took one from the wrong place shows it."""

from __future__ import annotations

import sqlite3
from dataclasses import fields
from typing import Any

from turnwatch.runtime.fold import CALL_COLUMNS, SESSION_COLUMNS, CallState, SessionState
from turnwatch.tracing import view


def distinct(cls: type[Any], **fixed: Any) -> Any:
    """An instance whose every field holds a value no other field holds."""
    values: dict[str, Any] = {}
    for i, f in enumerate(fields(cls)):
        values[f.name] = fixed.get(f.name, f"{f.name}-{i}" if "str" in str(f.type) else i + 1)
    return cls(**values)


def as_row(table: str, cols: tuple[str, ...], state: Any) -> sqlite3.Row:
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute(f"CREATE TABLE {table} ({', '.join(cols)})")
    values = [getattr(state, f.name) for f in fields(state)]
    conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(cols))})", values)
    row: sqlite3.Row = conn.execute(f"SELECT * FROM {table}").fetchone()
    return row


def test_a_call_row_reaches_its_view_field_by_field() -> None:
    state = distinct(CallState, lingering="[[4242, 1.5]]", prompt_open=1, procs_live=1)
    cv = view.call_view(as_row("calls", CALL_COLUMNS, state))
    shared = {f.name for f in fields(cv)} & {f.name for f in fields(state)}
    assert len(shared) >= 15
    for name in shared - {"lingering", "prompt_open", "procs_live", "create_time"}:
        assert getattr(cv, name) == getattr(state, name), name
    # Start times are read on this process's clock: recorded with ticks of another boot, the
    # process is not running now; the lingering one has no ticks, so its wall time stands.
    assert cv.create_time is None
    assert cv.lingering == [(4242, 1.5)]
    assert cv.prompt_open is True
    assert cv.procs_live is True


def test_a_session_row_reaches_its_view_field_by_field() -> None:
    state = distinct(SessionState, processing=0, rpc_pending=1)
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute(f"CREATE TABLE sessions ({', '.join(SESSION_COLUMNS)})")
    conn.execute(f"CREATE TABLE calls ({', '.join(CALL_COLUMNS)})")
    values = [getattr(state, f.name) for f in fields(state)]
    conn.execute(f"INSERT INTO sessions VALUES ({', '.join('?' * len(values))})", values)
    (sv,) = view.sessions(conn, now=0.0)
    shared = {f.name for f in fields(sv)} & {f.name for f in fields(state)}
    assert len(shared) >= 10
    for name in shared - {"processing", "rpc_pending", "runtime_create_time"}:
        assert getattr(sv, name) == getattr(state, name), name
    assert sv.runtime_create_time is None  # recorded with ticks of another boot
    assert sv.processing is False
    assert sv.rpc_pending is True
