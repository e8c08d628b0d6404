"""Event rows read back as events, or refused with their place and what is wrong.

turnwatch's writer stores only events it made or validated, so a row no event can be made of
was changed after (a disk's damage, a hand's edit, another program): its attributes no JSON
object, its time no number, an id no text. One such row must cost its readers that row, said
with its ``seq``, and nothing else: raised from every reader, it kept the services from
starting and prune from ever running.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from turnwatch.runtime.events import Event
from turnwatch.runtime.model import TurnwatchError
from turnwatch.tracing import codec

__all__ = ["UnreadableRow", "attrs_of", "event_of", "read_events"]


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

    By ``type() is``, as the columns come from SQLite: text, an integer, a real, a blob."""
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
