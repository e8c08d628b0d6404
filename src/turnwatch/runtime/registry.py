"""The abort registry: typed abort records and Bash's early-arrival tombstones.

An abort is keyed by ``(session, call_id, tool)`` and remembers its turn, so an abort for one tool
can never be inherited by another tool that reuses the call id, nor cross to another session or
turn (invariant 4). Bash keeps its short-lived tombstones: an abort that arrives before its call
registers waits there, for a TTL, for the call it names.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from turnwatch.runtime.model import StopSource

#: Tools whose early aborts are kept as expiring tombstones (the ADR's "Bash process aborts").
TOMBSTONE_TOOLS = frozenset({"Bash"})
DEFAULT_TOMBSTONE_TTL_S = 30.0

Key = tuple[str, str, str]  # (session, call_id, tool)


@dataclass(frozen=True, slots=True)
class AbortRecord:
    """Why a call was stopped; the first record for a key is kept (as trio keeps CancelReason)."""

    session: str
    turn: str
    call_id: str
    tool: str
    source: StopSource  # who stopped
    at_mono: float  # when the record arrived (monotonic seconds)


class AbortRegistry:
    """Typed abort records, plus tombstones for tools in :data:`TOMBSTONE_TOOLS`."""

    def __init__(
        self,
        *,
        tombstone_ttl_s: float = DEFAULT_TOMBSTONE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = tombstone_ttl_s
        self._clock = clock
        # Records for calls of every tool: kept until taken or the turn is forgotten.
        self._records: dict[Key, AbortRecord] = {}
        # Early arrivals for tombstone tools: kept until taken or the TTL passes.
        self._tombstones: dict[Key, AbortRecord] = {}

    def record(
        self, session: str, turn: str, call_id: str, tool: str, source: StopSource
    ) -> AbortRecord:
        """Register an abort; idempotent, the first record wins."""
        key = (session, call_id, tool)
        table = self._tombstones if tool in TOMBSTONE_TOOLS else self._records
        existing = table.get(key)
        if existing is not None and existing.turn == turn:
            return existing
        rec = AbortRecord(session, turn, call_id, tool, source, self._clock())
        table[key] = rec
        return rec

    def take(self, session: str, turn: str, call_id: str, tool: str) -> AbortRecord | None:
        """The abort for exactly this call, if one arrived first; removes it."""
        key = (session, call_id, tool)
        if tool in TOMBSTONE_TOOLS:
            self.sweep()
            rec = self._tombstones.pop(key, None)
        else:
            rec = self._records.pop(key, None)
        if rec is None or rec.turn != turn:
            # A record of another turn never applies (call ids never repeat, but never trust it).
            return None
        return rec

    def peek(self, session: str, turn: str, call_id: str, tool: str) -> AbortRecord | None:
        """Like :meth:`take` but leaves the record in place."""
        key = (session, call_id, tool)
        if tool in TOMBSTONE_TOOLS:
            self.sweep()
            rec = self._tombstones.get(key)
        else:
            rec = self._records.get(key)
        return rec if rec is not None and rec.turn == turn else None

    def sweep(self) -> int:
        """Drop expired tombstones; returns how many."""
        deadline = self._clock() - self._ttl
        expired = [k for k, r in self._tombstones.items() if r.at_mono <= deadline]
        for key in expired:
            del self._tombstones[key]
        return len(expired)

    def forget_turn(self, session: str, turn: str) -> None:
        """Drop what was kept for the calls of a turn that settled: they never come now."""
        for table in (self._records, self._tombstones):
            for key in [k for k, r in table.items() if r.session == session and r.turn == turn]:
                del table[key]

    def __len__(self) -> int:
        return len(self._records) + len(self._tombstones)
