"""Following a ledger: every event from the first, then each new one as it is committed."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import LedgerError, LedgerNotReady, connect, read_events
from turnwatch.tracing.ledger_file import file_id
from turnwatch.tracing.rows import UnreadableRow

log = logging.getLogger("turnwatch.ledger")

#: Unreadable rows said one by one; past these, counted (``left_out``) and said no more.
MAX_SAID = 10


class LedgerFollower:
    """Feeds a ledger's events, from the first, to ``observe``; :meth:`poll` for new ones.

    With ``say`` (a service's loop), a ledger that cannot be read is said once per outage and
    read again at the next poll, from where it stopped: a program that runs for months outlives
    a file being replaced or a disk failing for a while. Without, :meth:`poll` raises
    :class:`LedgerError`. A row no event can be made of (:mod:`~turnwatch.tracing.rows`) is
    said, to ``say`` or else the log, and passed: the events after it are fed.
    """

    def __init__(
        self,
        path: Path,
        observe: Callable[[Event], object],
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.observe = observe
        self.say = say
        self.seq = 0
        self.unread: str | None = None  # why the ledger could not be read, while it cannot
        self.left_out = 0  # rows no event could be made of (tracing.rows), passed
        self._file: tuple[int, int] | None = None  # the file ``seq`` is a place in

    def poll(self) -> int:
        """Feed every event after the last one seen; returns how many (0 while no ledger exists
        or a writer is still creating it: a watchdog may start before any runtime wrote one)."""
        try:
            n = self._poll()
        except (LedgerError, sqlite3.Error) as exc:
            if self.say is None:
                raise
            if self.unread is None:
                self.say(f"following the ledger: {_why(exc, self.path)}; reading it again")
            self.unread = str(exc)
            return 0
        if self.unread is not None and self.say is not None:
            self.say(f"following the ledger: {self.path} readable again")
        self.unread = None
        return n

    def _poll(self) -> int:
        if not self.path.exists():
            return 0
        try:
            conn = connect(self.path, readonly=True)
        except LedgerNotReady:
            return 0
        try:
            self._same_file(conn)
            n = 0
            for seq, ev in read_events(conn, after_seq=self.seq, on_bad=self._left_out):
                self.observe(ev)
                self.seq = seq
                n += 1
            return n
        finally:
            conn.close()

    def _left_out(self, bad: UnreadableRow) -> None:
        """A row no event can be made of: said, and passed (read again, it would be said at
        every poll, and a follower stopped at it would follow nothing after it)."""
        self.seq = max(self.seq, bad.seq)
        self.left_out += 1
        if self.left_out <= MAX_SAID:
            said = f"following the ledger: {self.path}: {bad}"
            (self.say or log.warning)(said)
        elif self.left_out == MAX_SAID + 1:
            (self.say or log.warning)(
                f"following the ledger: {self.path}: more unreadable events; left out, counted "
                "unsaid"
            )

    def _same_file(self, conn: sqlite3.Connection) -> None:
        """A new file at the path (a rotation: the writer writes at its path again) is followed
        from its first event: a place in the old file means nothing in it. Another inode, or
        fewer events than the place (an inode used again), tells."""
        now = file_id(self.path)
        (last,) = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        if self.seq and (now != self._file or last < self.seq):
            if self.say is not None:
                self.say(f"following the ledger: {self.path} is a new file; from its first event")
            self.seq = 0
        self._file = now


def _why(exc: BaseException, path: Path) -> str:
    """The one line: a LedgerError names the file already; SQLite's words get it added."""
    return str(exc) if isinstance(exc, LedgerError) else f"{path}: {exc}"
