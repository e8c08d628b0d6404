"""What a writer lost, per session: counted, and written as a ``ledger.gap`` where it would have
been, once the writer can write again (the ledger's writer thread and :class:`EventLines` alike).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnwatch import names
from turnwatch.runtime.events import Event


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
