"""What runtimes before this one recorded of their calls, read from a ledger.

A runtime started after a restart (a deploy, a crash) knows nothing of the prompts the one
before it asked; the agent's UI may still show one, and the framework still holds its call. An
approval sent then was "not a prompt of ours" to every wrapper, which handed it to the
framework, which ran the tool, though the user had clicked Stop before the restart. Given the
ledger (its sink, :meth:`Ledger.past_calls`, or ``Runtime(past=LedgerCalls(path))``), the
runtime refuses it as late: the ledger says the stop resolved the call. And it numbers the turns
of a session it serves again on from the ledger's (:meth:`LedgerCalls.last_turn`), so that no
turn or call of it has the id of one recorded before.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

from turnwatch.runtime.events import storable_text
from turnwatch.tracing.ledger_file import LedgerError, connect, file_id

__all__ = ["LedgerCalls"]

log = logging.getLogger("turnwatch.ledger")

#: How long a question waits for a locked ledger: it is asked on the runtime's event loop (in
#: ``answer_permission``), which the stop path shares; a ledger's 5 s would stall every session.
BUSY_TIMEOUT_S_PAST = 0.25


class LedgerCalls:
    """:class:`~turnwatch.runtime.model.PastCalls` from the ledger at ``path`` (its ``calls``
    summary rows, by their key). Read when asked (an answer to a prompt this runtime never asked
    is rare), through one read-only connection opened at the first question. A ledger that
    cannot be read proves nothing: its cause is logged once, and nothing is said resolved."""

    def __init__(self, path: Path | str, *, busy_timeout_s: float = BUSY_TIMEOUT_S_PAST) -> None:
        self.path = Path(path)
        self._busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None
        self._file: tuple[int, int] | None = None  # the file the connection reads
        self._said = False

    def resolved(self, session: str, call: str) -> bool:
        """True if the ledger records ``call`` of ``session`` resolved."""
        rows = self._read(
            "SELECT ended_ts FROM calls WHERE session = ? AND call = ?",
            (storable_text(session), storable_text(call)),
        )
        if not rows:
            return False
        return rows[0][0] is not None

    def last_turn(self, session: str) -> int:
        """N of the latest numbered turn (``{session}.tN``) the ledger records of ``session``:
        a runtime serving it again numbers its turns on from there. 0: none recorded."""
        key = storable_text(session)
        prefix = f"{key}.t"
        rows = self._read("SELECT turn FROM sessions WHERE session = ?", (key,))
        if not rows:
            return 0
        latest = _numbered(rows[0][0], prefix)
        if latest is not None:
            return latest
        # Its latest turn was named by its caller: the numbered ones are among the session's
        # events (a range of their index; rare, and read once per session served again).
        turns = self._read(
            "SELECT DISTINCT turn FROM events WHERE session = ? AND turn >= ? AND turn < ?",
            (key, prefix, f"{key}.u"),
        )
        return max(
            (n for (t,) in turns or () if (n := _numbered(t, prefix)) is not None), default=0
        )

    def _read(self, sql: str, args: tuple[object, ...]) -> list[tuple[Any, ...]] | None:
        """The rows ``sql`` reads of the ledger as the path holds it now; None if it cannot be
        read (said once)."""
        try:
            now = file_id(self.path)
            if self._conn is not None and now != self._file:
                # Replaced under it (a damaged ledger is moved aside and written anew, as the
                # writer does): what the path holds now is the record, not the old file.
                self.close()
            if self._conn is None:
                self._conn = connect(self.path, readonly=True, busy_timeout_s=self._busy_timeout_s)
                self._file = now
            # Read to its end: a statement left open would hold its snapshot, and the writer
            # could never checkpoint the WAL past it (this connection lives for months).
            return self._conn.execute(sql, args).fetchall()
        except (LedgerError, OSError, sqlite3.Error) as exc:
            self.close()
            if not self._said:
                self._said = True
                log.warning("turnwatch: %s: past calls not read (%s)", self.path, exc)
            return None

    def close(self) -> None:
        """Close the connection (the next question opens another)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _numbered(turn: object, prefix: str) -> int | None:
    """N if ``turn`` is ``{prefix}N`` (a turn the runtime numbered), else None."""
    if isinstance(turn, str) and turn.startswith(prefix):
        digits = turn[len(prefix) :]
        if digits.isdigit() and digits.isascii():
            return int(digits)
    return None
