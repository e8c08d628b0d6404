"""What a runtime keeps of its settled sessions and turns: bounded by what is live, not by
history.

A session is *settled* once its last turn settled and "processing" cleared, with nothing it owns
still running (a turn's lingering processes ended). Settled sessions are kept a while — a late
stop, a late permission answer and a reused call id are answered from them exactly — and then
evicted, oldest first: after ``retain_s``, or as soon as more than ``max_settled`` are kept.

An evicted session leaves a :class:`Tombstone`: a few bytes per id and per call, kept far longer
(``max_tombstones``), from which the runtime still answers what the ADR fixes: a stop is
``stale``, a permission answer ``LATE``, a call or turn id the session used is refused again
when the session comes back. Past the tombstone's own bound, only the id is forgotten too: the
README says what is then no longer checked.

A session still served keeps its last ``max_settled_turns`` settled turns whole; older ones are
folded the same way, into the hashes of their ids (:class:`UsedIds`), so a session left open for
months costs what its recent turns cost, and what arrives late for an old turn is answered as it
was while the turn was kept.
"""

from __future__ import annotations

import warnings
from array import array
from bisect import bisect_left
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


#: A session keeps this many of its settled turns whole, and up to as many again before they are
#: folded: a turn older than that keeps only the hashes of its ids (:class:`UsedIds`), from
#: which what arrives late for it is answered as before. A session left open for a week kept
#: every turn and every result it ever had.
MAX_SETTLED_TURNS = 100

# What a hash says of an id: a turn or call id the session used, a turn a stop reached, a call
# that was asked a permission.
TURN, STOPPED, CALL, PROMPTED = "t", "s", "c", "p"


def id_hash(kind: str, ident: str) -> int:
    """The 8-byte hash kept of ``ident`` (``kind``: :data:`TURN`, :data:`STOPPED`, :data:`CALL`
    or :data:`PROMPTED`)."""
    return hash((kind, ident))


class UsedIds:
    """Hashes of the ids a session used, in sorted runs, each over twice the size of the next.

    Adding ``n`` hashes merges runs as a binary counter carries: each hash is copied O(log n)
    times over the session's life, a lookup is one bisection per run (at most log₂ n runs), and
    each hash takes 8 bytes, where a set of ints took about 60 and the ids themselves dozens.
    """

    __slots__ = ("_runs",)

    def __init__(self, packed: bytes = b"") -> None:
        self._runs: list[array[int]] = []
        if packed:
            run = array("q")
            run.frombytes(packed)
            self._runs.append(run)

    def add(self, hashes: Iterable[int]) -> None:
        run = array("q", sorted(hashes))
        if not run:
            return
        while self._runs and len(self._runs[-1]) <= 2 * len(run):
            run = array("q", sorted(self._runs.pop() + run))  # two sorted runs: timsort merges
        self._runs.append(run)

    def __contains__(self, h: int) -> bool:
        for run in self._runs:
            i = bisect_left(run, h)
            if i < len(run) and run[i] == h:
                return True
        return False

    def __len__(self) -> int:
        return sum(len(run) for run in self._runs)

    @property
    def runs(self) -> int:
        """How many sorted runs a lookup bisects."""
        return len(self._runs)

    def packed(self) -> bytes:
        """Every hash, sorted, 8 bytes each (a :class:`Tombstone`'s ``used``)."""
        if len(self._runs) == 1:
            return self._runs[0].tobytes()
        return array("q", sorted(h for run in self._runs for h in run)).tobytes()


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is kept of an evicted session: how many turns it had, its last turn, and the hashes
    of every turn and call id it used (8 bytes each, where the ids themselves are dozens)."""

    turns: int
    last_turn: str | None
    #: The hashes (:func:`id_hash`), sorted and packed.
    used: bytes

    def used_id(self, kind: str, ident: str) -> bool:
        """True if the session used this turn (``kind`` ``t``) or call (``c``) id."""
        view = memoryview(self.used).cast("q")
        h = id_hash(kind, ident)
        i = bisect_left(view, h)
        return i < len(view) and view[i] == h


def tombstone(
    turns: Iterable[str], calls: Iterable[str], last_turn: str | None, past: Tombstone | None
) -> Tombstone:
    """Deprecated alias, kept through 0.2: ``Session.tombstone()`` builds a session's tombstone,
    its folded turns with it."""
    warnings.warn(
        "retention.tombstone is deprecated: use Session.tombstone()", DeprecationWarning, 2
    )
    turn_ids = list(turns)
    used = UsedIds(past.used if past is not None else b"")
    used.add([id_hash(TURN, t) for t in turn_ids] + [id_hash(CALL, c) for c in calls])
    before = past.turns if past is not None else 0
    return Tombstone(before + len(turn_ids), last_turn, used.packed())


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
