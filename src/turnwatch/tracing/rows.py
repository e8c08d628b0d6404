"""Rows read back: an event row as an event, or refused with its place and what is wrong; and
the summary rows (``sessions``, ``calls``) as a reader sees them, only those of the types the
writer writes.

turnwatch's writer stores only events it made or validated, and summary rows it folded from
them, so a row of other types was changed after (a disk's damage, a hand's edit, another
program): its attributes no JSON object, its time no number, an id no text. One such row must
cost its readers that row, said with its place, and nothing else: raised from every reader, an
event row kept the services from starting and prune from ever running, and a session row's
``stop_ts`` of text ended the watchdog's service at its first scan.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import fields
from functools import cache
from typing import Any

from turnwatch.runtime.events import Event, storable_text
from turnwatch.runtime.fold import CALL_COLUMNS, SESSION_COLUMNS, CallState, SessionState
from turnwatch.runtime.model import TurnwatchError
from turnwatch.runtime.procfs import local_start
from turnwatch.tracing import codec

__all__ = [
    "UnreadableRow",
    "attrs_of",
    "damaged_summaries",
    "event_of",
    "lingering_of",
    "read_events",
    "row_damage",
    "shadow_summaries",
]


class UnreadableRow(TurnwatchError, ValueError):
    """An event row no event can be made of: ``seq``, and ``why``."""

    def __init__(self, seq: int, why: str) -> None:
        super().__init__(f"event {seq} is unreadable ({why}): left out")
        self.seq = seq
        self.why = why


def attrs_of(text: Any) -> dict[str, Any] | None:
    """A row's ``attrs_json`` as a dict, or None when it is not a JSON object's text."""
    if type(text) is not str:
        return None
    try:
        value = codec.loads_stored(text)
    except ValueError:
        return None
    return value if type(value) is dict else None


_TEXT = (str,)
_OPTIONAL_TEXT = (str, type(None))


def event_of(
    seq: int,
    kind: Any,
    session: Any,
    ts_unix: Any,
    attrs_json: Any,
    *,
    mono_ns: Any = None,
    turn: Any = None,
    call: Any = None,
    tool: Any = None,
    trace_id: Any = None,
    span_id: Any = None,
) -> Event:
    """The event a row holds; :class:`UnreadableRow` if its columns are not an event's.

    By ``type() is``, as the columns come from SQLite: text, an integer, a real, a blob. One
    test of them all first: ``serve-metrics`` reads every event of the ledger as it starts."""
    if (
        type(kind) is not str
        or type(session) is not str
        or (turn is not None and type(turn) is not str)
        or (call is not None and type(call) is not str)
        or (tool is not None and type(tool) is not str)
        or (trace_id is not None and type(trace_id) is not str)
        or (span_id is not None and type(span_id) is not str)
    ):
        for name, value, allowed in (
            ("kind", kind, _TEXT),
            ("session", session, _TEXT),
            ("turn", turn, _OPTIONAL_TEXT),
            ("call", call, _OPTIONAL_TEXT),
            ("tool", tool, _OPTIONAL_TEXT),
            ("trace_id", trace_id, _OPTIONAL_TEXT),
            ("span_id", span_id, _OPTIONAL_TEXT),
        ):
            if type(value) not in allowed:
                raise UnreadableRow(seq, f"its {name} is {_said(value)}, not text")
    if type(ts_unix) is not float and type(ts_unix) is not int:
        raise UnreadableRow(seq, f"its ts_unix is {_said(ts_unix)}, not a time")
    mono_ns = _mono(seq, mono_ns)
    attrs = attrs_of(attrs_json)
    if attrs is None:
        raise UnreadableRow(seq, f"its attrs_json is {_said(attrs_json)}, not a JSON object")
    return Event(
        kind=kind,
        session=session,
        ts_unix=float(ts_unix),
        mono_ns=mono_ns,
        turn=turn,
        call=call,
        tool=tool,
        attrs=attrs,
        trace_id=trace_id,
        span_id=span_id,
    )


def read_events(
    conn: sqlite3.Connection,
    *,
    after_seq: int = 0,
    session: str | None = None,
    turn: str | None = None,
    limit: int | None = None,
    on_bad: Callable[[UnreadableRow], object] | None = None,
) -> Iterator[tuple[int, Event]]:
    """Events in order, as ``(seq, Event)``.

    A row no event can be made of (see :mod:`~turnwatch.tracing.rows`) raises
    :class:`~turnwatch.tracing.rows.UnreadableRow`, or, given ``on_bad``, is handed to it and
    left out: the rows after it are read."""
    sql = "SELECT * FROM events WHERE seq > ?"
    args: list[Any] = [after_seq]
    if session is not None:
        sql += " AND session = ?"
        args.append(session)
    if turn is not None:
        sql += " AND turn = ?"
        args.append(turn)
    sql += " ORDER BY seq"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    for r in conn.execute(sql, args):
        seq = r["seq"]
        try:
            ev = event_of(
                seq,
                r["kind"],
                r["session"],
                r["ts_unix"],
                r["attrs_json"],
                mono_ns=r["mono_ns"],
                turn=r["turn"],
                call=r["call"],
                tool=r["tool"],
                trace_id=r["trace_id"],
                span_id=r["span_id"],
            )
        except UnreadableRow as bad:
            if on_bad is None:
                raise
            on_bad(bad)
            continue
        yield seq, ev


def _mono(seq: int, value: Any) -> Any:
    """``mono_ns`` as the writer stored it: an integer, or one past 64 bits as a real."""
    if value is None or type(value) is int or type(value) is float:
        return value
    raise UnreadableRow(seq, f"its mono_ns is {_said(value)}, not a number")


def _said(value: Any) -> str:
    """A column's value in a message: its start, and what it is."""
    text = repr(value)
    return f"{text[:40]}…" if len(text) > 40 else text


# --- the summary rows ---------------------------------------------------------------------

#: SQLite's storage classes a summary column's Python type is written as (an integer past 64
#: bits as a real, as ``codec.storable`` binds it); NULL is taken in every column (one added by
#: a later schema is NULL in the rows before it).
_STORED = {"float": ("real", "integer"), "int": ("integer", "real"), "str": ("text",)}
#: Columns holding JSON text a reader parses.
_JSON = frozenset({"lingering"})
#: What a column of each first storage class holds, as a message says it.
_WORDS = {"real": "a number", "integer": "an integer", "text": "text"}


@cache
def _column_types() -> dict[str, dict[str, tuple[str, ...]]]:
    """table → column → the storage classes the writer writes it as (from the fold's state
    classes' annotations, read as written: ``float | None``; no ``get_type_hints``, whose
    evaluation cost each command that looks ~0.7 ms)."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for table, cls, columns in (
        ("sessions", SessionState, SESSION_COLUMNS),
        ("calls", CallState, CALL_COLUMNS),
    ):
        out[table] = {}
        for f, column in zip(fields(cls), columns, strict=True):
            stored = tuple(c for t in str(f.type).split("|") for c in _STORED.get(t.strip(), ()))
            if not stored:  # a state field of another type: say so, never check it wrongly
                raise TypeError(f"{cls.__name__}.{f.name}: {f.type} is no type rows checks")
            out[table][column] = stored
    return out


@cache
def _sane(table: str, present: tuple[str, ...]) -> str:
    """SQL true for a row of ``table`` whose columns (those ``present``) are of the writer's
    types. Each column one small test: a number's is ``x + 0 IS x`` (text or a blob plus 0 is
    a number, never the same value), so that every query through the views prepares in 70 µs,
    not 140 (``typeof(x) IN (…)``)."""
    parts = []
    for col, stored in _column_types()[table].items():
        if col not in present:
            continue
        if "text" not in stored:
            parts.append(f"{col} + 0 IS {col}")
        elif col in _JSON:
            parts.append(f"({col} IS NULL OR (typeof({col}) = 'text' AND json_valid({col})))")
        else:
            parts.append(f"({col} IS NULL OR typeof({col}) = 'text')")
    return " AND ".join(parts) or "1"


def _present(conn: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(r[1] for r in conn.execute(f"PRAGMA main.table_info({table})"))


def shadow_summaries(conn: sqlite3.Connection) -> None:
    """Make ``sessions`` and ``calls`` name, for this connection, views of the summary tables
    holding only the rows of the writer's types (temporary views come before the file's
    tables): every query a reader makes skips a damaged row, by the same indexes, and ``*``
    is the same columns. A reader's connection only: the views cannot be written, nor indexed
    (name ``main.sessions``); and they have no ``rowid`` (join ``main.calls`` for it)."""
    for table in ("sessions", "calls"):
        present = _present(conn, table)
        if not present:
            continue
        # An older ledger's missing columns read as NULL: what it never recorded.
        lacking = "".join(f', NULL AS "{c}"' for c in _column_types()[table] if c not in present)
        conn.execute(
            f"CREATE TEMP VIEW IF NOT EXISTS {table} AS SELECT *{lacking} "
            f"FROM main.{table} WHERE {_sane(table, present)}"
        )


#: Each summary table's primary key: a row of the table not in the readers' view is damaged.
_KEYS = {"sessions": ("session",), "calls": ("session", "call")}


def damaged_summaries(
    conn: sqlite3.Connection,
    *,
    processing: bool = False,
    session: str | None = None,
    limit: int = 10,
) -> list[str]:
    """What is wrong with the summary rows the readers' views leave out (a connection given
    :func:`shadow_summaries`, as every read-only one is), at most ``limit``: each as ``session
    's': its stop_ts is 'x', not a number``. ``processing``: only those of sessions still
    processing (what the watchdog scans: through its index, not every session ever held);
    ``session``: only that session's."""
    views = {r[0] for r in conn.execute("SELECT name FROM sqlite_temp_master WHERE type = 'view'")}
    out: list[str] = []
    for table, key in _KEYS.items():
        if table not in views or len(out) >= limit:
            continue
        same = " AND ".join(f"v.{k} = t.{k}" for k in key)
        where = f"NOT EXISTS (SELECT 1 FROM temp.{table} v WHERE {same})"
        args: list[Any] = []
        if session is not None:
            where += " AND t.session = ?"
            args.append(storable_text(session))  # as the ledger keeps it (a lone surrogate)
        if processing:
            where += " AND t.session IN (SELECT session FROM main.sessions WHERE processing = 1)"
        cursor = conn.execute(
            f"SELECT t.* FROM main.{table} t WHERE {where} LIMIT ?", (*args, limit - len(out))
        )
        columns = [d[0] for d in cursor.description]
        out.extend(_damage_of(table, dict(zip(columns, row, strict=True))) for row in cursor)
    return out


def _damage_of(table: str, row: dict[str, Any]) -> str:
    return row_damage(table, row) or f"{_key(table, row)}: not as the writer writes it"


def row_damage(table: str, row: dict[str, Any]) -> str | None:
    """What is wrong with a summary row (``sessions`` or ``calls``, as a dict by column), or None
    for one of the writer's types: as :func:`damaged_summaries` says it. (The writer asks it of
    each row it reads: a type test a column.)"""
    for column, allowed in _python_types()[table]:
        value = row.get(column)
        if type(value) not in allowed:
            stored = _column_types()[table][column]
            return f"{_key(table, row)}: its {column} is {_said(value)}, not {_WORDS[stored[0]]}"
        if column in _JSON and value is not None and not _is_json(value):
            return f"{_key(table, row)}: its {column} is {_said(value)}, not JSON"
    return None


@cache
def _python_types() -> dict[str, tuple[tuple[str, frozenset[type]], ...]]:
    """table → (column, the Python types its storage classes read as, None's included)."""
    read_as = {"real": float, "integer": int, "text": str}
    return {
        table: tuple(
            (column, frozenset({type(None), *(read_as[c] for c in stored)}))
            for column, stored in columns.items()
        )
        for table, columns in _column_types().items()
    }


def _is_json(text: str) -> bool:
    try:
        codec.loads_stored(text)
    except ValueError:
        return False
    return True


def _key(table: str, row: dict[str, Any]) -> str:
    key = f"session {_said(row.get('session'))}"
    if table == "calls":
        key += f", call {_said(row.get('call'))}"
    return key


def lingering_of(text: str | None, boot: object = None) -> list[tuple[int, float]]:
    """A call row's ``lingering`` (JSON ``[[pid, start time, start ticks], ...]``, the ticks
    optional), each as ``(pid, start)`` with the start on this process's clock
    (:func:`~turnwatch.runtime.procfs.local_start` of the ticks, of the call's ``boot``). One of
    another shape is left out, as is one of an earlier boot (a process no start time is known
    of is one the watchdog can never prove, and never signals)."""
    if not text:
        return []
    try:
        items = codec.loads_stored(text)
    except ValueError:
        return []
    if type(items) is not list:
        return []
    out = []
    for p in items:
        if (
            type(p) is list
            and 2 <= len(p) <= 3
            and type(p[0]) is int
            and (type(p[1]) is float or type(p[1]) is int)
        ):
            start = local_start(float(p[1]), p[2] if len(p) == 3 else None, boot)
            if start is not None:
                out.append((p[0], start))
    return out
