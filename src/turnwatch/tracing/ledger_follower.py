"""Following a ledger: every event from the first, then each new one as it is committed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from turnwatch.runtime.events import Event
from turnwatch.tracing.ledger import connect, read_events


class LedgerFollower:
    """Feeds a ledger's events, from the first, to ``observe``; :meth:`poll` for new ones."""

    def __init__(self, path: Path, observe: Callable[[Event], object]) -> None:
        self.path = path
        self.observe = observe
        self.seq = 0

    def poll(self) -> int:
        """Feed every event after the last one seen; returns how many (0 while no ledger exists:
        a watchdog may start before any runtime wrote one)."""
        if not self.path.exists():
            return 0
        conn = connect(self.path, readonly=True)
        try:
            n = 0
            for seq, ev in read_events(conn, after_seq=self.seq):
                self.observe(ev)
                self.seq = seq
                n += 1
            return n
        finally:
            conn.close()
