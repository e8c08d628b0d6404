"""Few SQL statements per batch, not one per row.

Python's ``sqlite3`` releases the GIL around every step of every statement. ``executemany`` of a
2,000-event batch therefore gives the GIL up 2,000 times, and each time a busy event loop holds
it, the writer thread waits for the interpreter's switch interval (5 ms) to get it back: with a
busy loop beside it, the writer committed a few hundred rows a second (``make bench`` shows it
side by side). So rows are inserted by multi-row ``VALUES`` statements with every value bound:
one statement per power of two in the row count (a batch of 150 rows is 128 + 16 + 4 + 2, four
statements; at most :data:`MAX_ROWS` rows and the build's bound on parameters each), each text
prepared once and kept in the connection's statement cache.

Rows used to travel as one JSON text that SQLite unpacked with ``json_each`` and one
``json_extract`` per column: one statement, but each extraction walks the row's array again, and
a call row has 25 columns. Bound values cost 41 % fewer instructions per event for the writer
(callgrind, #31). JSON stays where it is cheap, for many keys in one lookup (:class:`Lookup`),
and as the fallback for a row holding a value SQLite cannot bind. Floats are bound as they are,
and read back bit for bit.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from turnwatch.tracing import codec

_NUL = "\\u0000"  # how both encoders write a NUL character inside a JSON string


#: The most rows one ``INSERT`` takes: its text is prepared once per size, and a statement's
#: program grows with its rows.
MAX_ROWS = 512


class Insert:
    """``INSERT`` (or ``INSERT OR REPLACE``) of many rows into ``table``, in ``cols`` order."""

    def __init__(self, table: str, cols: Sequence[str], *, replace: bool = False) -> None:
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        head = f"{verb} INTO {table} ({', '.join(cols)})"
        one = f"({', '.join('?' * len(cols))})"
        self._values = f"{head} VALUES "
        self._one = one
        self._cols = len(cols)
        self._texts: dict[int, str] = {}
        self.row_sql = f"{head} VALUES {one}"
        # The fallback: rows as one JSON text, for a value SQLite cannot bind.
        values = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(cols)))
        self.batch_sql = f"{head} SELECT {values} FROM json_each(?)"

    def _text(self, rows: int) -> str:
        text = self._texts.get(rows)
        if text is None:
            text = self._texts[rows] = self._values + ",".join([self._one] * rows)
        return text

    def _most(self, conn: sqlite3.Connection) -> int:
        """The largest power of two rows one statement may bind here."""
        fits = min(MAX_ROWS, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // self._cols)
        return 1 << (max(fits, 1).bit_length() - 1)

    def __call__(self, conn: sqlite3.Connection, rows: Iterable[Sequence[Any]]) -> None:
        rows = rows if isinstance(rows, list) else list(rows)
        most = self._most(conn) if len(rows) > 1 else 1
        i = 0
        while i < len(rows):
            n = min(most, 1 << ((len(rows) - i).bit_length() - 1))
            part = rows[i : i + n]
            try:
                conn.execute(self._text(n), list(itertools.chain.from_iterable(part)))
            except (sqlite3.InterfaceError, sqlite3.ProgrammingError, OverflowError):
                # A value SQLite cannot bind (an object, an integer beyond 64 bits): nothing of
                # the statement ran. As JSON, where anything unknown becomes its ``str``.
                self._json(conn, part)
            i += n

    def _json(self, conn: sqlite3.Connection, rows: list[Sequence[Any]]) -> None:
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
