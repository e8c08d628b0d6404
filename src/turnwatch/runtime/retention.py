"""What a runtime keeps of its settled sessions: bounded by what is live, not by history.

A session is *settled* once its last turn settled and "processing" cleared, with nothing it owns
still running (a turn's lingering processes ended). Settled sessions are kept a while — a late
stop, a late permission answer and a reused call id are answered from them exactly — and then
evicted, oldest first: after ``retain_s``, or as soon as more than ``max_settled`` are kept.

An evicted session leaves a :class:`Tombstone`: a few bytes per id and per call, kept far longer
(``max_tombstones``), from which the runtime still answers what the ADR fixes: a stop is
``stale``, a permission answer ``LATE``, a call or turn id the session used is refused again
when the session comes back. Past the tombstone's own bound, only the id is forgotten too: the
README says what is then no longer checked.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

#: A settled session is kept this long (seconds), then evicted.
RETAIN_SETTLED_S = 600.0
#: At most this many settled sessions are kept; past it, the oldest go first.
MAX_SETTLED = 10_000
#: At most this many evicted sessions' tombstones are kept (ten times the settled sessions kept,
#: about 250 B each); past it, the oldest go first. A million of them weighed about 1 GB, and a
#: runtime's memory grew with every session it had ever served until it reached that (the soak).
MAX_TOMBSTONES = 100_000


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is kept of an evicted session: how many turns it had, its last turn, and the hashes
    of every turn and call id it used (8 bytes each, where the ids themselves are dozens)."""

    turns: int
    last_turn: str | None
    #: The hashes, packed (8 bytes each: a set of ints costs about 60 bytes an id).
    used: bytes

    def used_id(self, kind: str, ident: str) -> bool:
        """True if the session used this turn (``kind`` ``t``) or call (``c``) id."""
        return hash((kind, ident)) in memoryview(self.used).cast("q")


def tombstone(
    turns: Iterable[str], calls: Iterable[str], last_turn: str | None, past: Tombstone | None
) -> Tombstone:
    """A session's tombstone, merged with the one it came back from (if any)."""
    turn_ids = list(turns)
    used = {hash(("t", t)) for t in turn_ids} | {hash(("c", c)) for c in calls}
    before = past.turns if past is not None else 0
    if past is not None:
        used.update(memoryview(past.used).cast("q"))
    return Tombstone(before + len(turn_ids), last_turn, array("q", sorted(used)).tobytes())


class Retention:
    """The order in which settled sessions became settled, and the tombstones of those gone."""

    def __init__(
        self,
        *,
        retain_s: float = RETAIN_SETTLED_S,
        max_settled: int = MAX_SETTLED,
        max_tombstones: int = MAX_TOMBSTONES,
    ) -> None:
        if retain_s < 0 or max_settled < 0 or max_tombstones < 0:
            raise ValueError("retention bounds must not be negative")
        self.retain_s = retain_s
        self.max_settled = max_settled
        self.max_tombstones = max_tombstones
        # Session id → when it became settled (the runtime's clock), oldest first.
        self._settled: OrderedDict[str, float] = OrderedDict()
        self.tombstones: OrderedDict[str, Tombstone] = OrderedDict()

    def __len__(self) -> int:
        return len(self._settled)

    def settled(self, session: str, now: float) -> None:
        """``session`` became settled now (again: it moves to the back)."""
        self._settled.pop(session, None)
        self._settled[session] = now

    def active(self, session: str) -> None:
        """``session`` started a turn: it is not settled any more."""
        self._settled.pop(session, None)

    def due(self, now: float) -> list[str]:
        """The settled sessions to evict now, oldest first (taken out of the order)."""
        out = []
        while self._settled:
            sid, since = next(iter(self._settled.items()))
            if len(self._settled) <= self.max_settled and now - since < self.retain_s:
                break
            self._settled.popitem(last=False)
            out.append(sid)
        return out

    def bury(self, session: str, stone: Tombstone) -> None:
        self.tombstones.pop(session, None)
        self.tombstones[session] = stone
        while len(self.tombstones) > self.max_tombstones:
            self.tombstones.popitem(last=False)

    def exhume(self, session: str) -> Tombstone | None:
        """The tombstone of ``session`` coming back (it is its session's again)."""
        return self.tombstones.pop(session, None)
