"""What a writer lost, per session: counted, and written as a ``ledger.gap`` where it would have
been, once the writer can write again (the ledger's writer thread and :class:`EventLines` alike).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from turnwatch import names
from turnwatch.runtime.events import Event

log = logging.getLogger("turnwatch.ledger")


@dataclass(slots=True)
class Gap:
    """Events of one session a writer lost: how many, from when to when, and why."""

    lost: int
    from_ts: float
    to_ts: float
    why: str | None

    def add(self, ts: float) -> None:
        self.lost += 1
        self.from_ts, self.to_ts = min(self.from_ts, ts), max(self.to_ts, ts)

    def merge(self, other: Gap) -> None:
        self.lost += other.lost
        self.from_ts = min(self.from_ts, other.from_ts)
        self.to_ts = max(self.to_ts, other.to_ts)

    def event(self, session: str) -> Event:
        attrs: dict[str, object] = {
            names.K_LOST: self.lost,
            names.K_FROM_TS: self.from_ts,
            names.K_TO_TS: self.to_ts,
        }
        if self.why:
            attrs[names.K_REASON] = self.why
        return Event(names.LEDGER_GAP, session, self.to_ts, attrs=attrs)


def note_gap(gaps: dict[str, Gap], ev: Event, why: str | None) -> None:
    """``ev`` was lost: counted in its session's gap."""
    gap = gaps.get(ev.session)
    if gap is None:
        gaps[ev.session] = Gap(1, ev.ts_unix, ev.ts_unix, why)
    else:
        gap.add(ev.ts_unix)


class Losses:
    """Events lost (how many, and why the last was), and what the producer dropped, per
    session, until the writer writes its gaps. Both threads write it, under its lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = 0
        self.why = ""
        self._lock = threading.Lock()
        self._dropped: dict[str, Gap] = {}
        self._dropping = False

    def lose(self, n: int, why: str) -> None:
        """``n`` events could not be written: counted, and said."""
        with self._lock:
            self.n += n
            self.why = why
        log.error("turnwatch ledger %s: %d event(s) could not be written: %s", self.path, n, why)

    def drop(self, event: Event, why: str) -> None:
        """The producer dropped ``event``: lost, its gap kept for the writer, said once per
        episode (the writer says the total when it catches up)."""
        with self._lock:
            self.n += 1
            self.why = why
            note_gap(self._dropped, event, why)
            said, self._dropping = self._dropping, True
        if not said:
            log.error("turnwatch ledger %s: %s; dropping new events", self.path, why)

    def dropped_sessions(self) -> int:
        """How many sessions' dropped events wait for their gaps."""
        return len(self._dropped)

    def take_dropped(self) -> dict[str, Gap]:
        """What was dropped since the last take (a new episode is said again)."""
        with self._lock:
            dropped, self._dropped, self._dropping = self._dropped, {}, False
        return dropped
