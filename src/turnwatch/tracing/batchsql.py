"""One SQL statement per batch, not one per row: rows travel as a single JSON array.

Python's ``sqlite3`` releases the GIL around every step of every statement. ``executemany`` of a
2,000-event batch therefore gives the GIL up 2,000 times, and each time a busy event loop holds
it, the writer thread waits for the interpreter's switch interval (5 ms) to get it back: with a
busy loop beside it, the writer committed a few hundred rows a second (``make bench`` shows it
side by side). Here a batch is one JSON text that SQLite unpacks with ``json_each``, so the
writer crosses the GIL a handful of times per batch, and SQLite inserts without holding it.

Floats are written in their shortest exact form, which SQLite reads back bit for bit. SQLite's
JSON functions end a string at a NUL character, so a batch with one falls back to binding rows
one by one: slow, rare, and exact.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from turnwatch.tracing import codec

_NUL = "\\u0000"  # how both encoders write a NUL character inside a JSON string


class Insert:
    """``INSERT`` (or ``INSERT OR REPLACE``) of many rows into ``table``, in ``cols`` order."""

    def __init__(self, table: str, cols: Sequence[str], *, replace: bool = False) -> None:
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        # json_extract, not ->>: the arrow operators need SQLite 3.38, json_extract any SQLite
        # with the JSON functions.
        values = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(cols)))
        head = f"{verb} INTO {table} ({', '.join(cols)})"
        self.batch_sql = f"{head} SELECT {values} FROM json_each(?)"
        self.row_sql = f"{head} VALUES ({', '.join('?' * len(cols))})"

    def __call__(self, conn: sqlite3.Connection, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        text = codec.dumps_rows(rows)
        if _NUL in text:
            conn.executemany(self.row_sql, rows)
        else:
            conn.execute(self.batch_sql, (text,))


class Lookup:
    """The rows matching many keys: ``batch_sql`` takes them as one JSON array (``?``),
    ``row_sql`` one key at a time (its parameters)."""

    def __init__(self, batch_sql: str, row_sql: str) -> None:
        self.batch_sql = batch_sql
        self.row_sql = row_sql

    def __call__(self, conn: sqlite3.Connection, keys: Sequence[Any]) -> Iterator[sqlite3.Row]:
        if not keys:
            return
        text = codec.dumps_rows(list(keys))
        if _NUL not in text:
            yield from conn.execute(self.batch_sql, (text,))
            return
        for key in keys:
            yield from conn.execute(self.row_sql, key if isinstance(key, tuple) else (key,))


def check(conn: sqlite3.Connection) -> str | None:
    """None if this SQLite can unpack JSON batches, else why not."""
    try:
        conn.execute("SELECT count(*) FROM json_each('[1]')").fetchone()
    except sqlite3.OperationalError as exc:
        return (
            f"SQLite {sqlite3.sqlite_version} has no JSON functions ({exc}); "
            "turnwatch needs a build with them (the default since SQLite 3.38)"
        )
    return None


#: Values bound per ``IN (...)``: under SQLite's oldest default bound on parameters (999).
IN_CHUNK = 900


def select_in(
    conn: sqlite3.Connection, sql: str, values: Sequence[Any], *, before: Sequence[Any] = ()
) -> Iterator[Any]:
    """The rows of ``sql`` for every value in ``values``: ``sql`` holds one ``{marks}`` where
    ``IN ({marks})`` takes a chunk of them (``before``: parameters bound ahead of each chunk)."""
    for i in range(0, len(values), IN_CHUNK):
        part = list(values[i : i + IN_CHUNK])
        yield from conn.execute(sql.format(marks=",".join("?" * len(part))), [*before, *part])
