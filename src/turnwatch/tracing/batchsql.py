"""Few SQL statements per batch, not one per row.

Python's ``sqlite3`` releases the GIL around every step of every statement. ``executemany`` of a
2,000-event batch therefore gives the GIL up 2,000 times, and each time a busy event loop holds
it, the writer thread waits for the interpreter's switch interval (5 ms) to get it back: with a
busy loop beside it, the writer committed a few hundred rows a second (``make bench`` shows it
side by side). So a batch is a few statements, never one per row:

- up to :data:`MAX_ROWS` rows (a writer keeping up: a live runtime's batches are tens of rows):
  one JSON text that SQLite unpacks with ``json_each`` and one ``json_extract`` per column. One
  statement, one GIL crossing: each more one is a wait for the busy loop beside (measured: the
  loop thread's own CPU per call doubled with one statement per power of two).
- each full :data:`MAX_ROWS` rows of a larger batch (a writer behind, where throughput counts):
  a multi-row ``VALUES`` statement with every value bound, its text prepared once. The JSON path
  walks the row's array again for every column (a call row has 25): bound values cost 41 % fewer
  of the writer's instructions per event (callgrind, #31).

JSON is also the fallback for a row holding a value SQLite cannot bind. Floats are written in
their shortest exact form, or bound as they are: both read back bit for bit. SQLite's JSON
functions end a string at a NUL character, so a JSON batch with one binds its rows one by one.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from turnwatch.tracing import codec

_NUL = "\\u0000"  # how both encoders write a NUL character inside a JSON string


#: Rows of one bound ``VALUES`` statement, and the most a batch sends as one JSON text.
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

    def _bound(self, conn: sqlite3.Connection) -> int:
        """Rows one bound statement takes here: :data:`MAX_ROWS`, or fewer where the build's
        bound on parameters is lower (999 before SQLite 3.32)."""
        return min(MAX_ROWS, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // self._cols)

    def __call__(self, conn: sqlite3.Connection, rows: Iterable[Sequence[Any]]) -> None:
        rows = rows if isinstance(rows, list) else list(rows)
        i = 0
        if len(rows) >= MAX_ROWS:  # a writer behind: bound chunks while a full one is left
            n = max(self._bound(conn), 1)
            text = self._texts.get(n) or self._texts.setdefault(
                n, self._values + ",".join([self._one] * n)
            )
            while len(rows) - i >= MAX_ROWS:
                part = rows[i : i + n]
                try:
                    conn.execute(text, list(itertools.chain.from_iterable(part)))
                except (
                    sqlite3.InterfaceError,
                    sqlite3.ProgrammingError,
                    OverflowError,
                    UnicodeEncodeError,
                ):
                    # A value SQLite cannot bind (an object, an integer beyond 64 bits, text
                    # with a lone surrogate): nothing of the statement ran. As JSON, where each
                    # is made storable (codec.storable).
                    self._json(conn, part)
                i += n
        if i < len(rows):
            self._json(conn, rows[i:])

    def _json(self, conn: sqlite3.Connection, rows: list[Sequence[Any]]) -> None:
        text = codec.dumps_rows(rows)
        if _NUL in text:
            conn.executemany(self.row_sql, codec.storable_rows(rows))
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
        for key in codec.storable_rows(list(keys)):
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
