"""Sessions: one live turn per session (:mod:`turnwatch.runtime.turn`).

A :class:`Session` owns which turn is live, whether the UI shows "processing", and what it
keeps of its settled turns (the last ones whole, older ones folded into the hashes of their ids:
:mod:`turnwatch.runtime.retention`). The runtime composes sessions and turns and owns the stop;
nothing here reaches back into it. ``Turn`` is importable from here too, as it always was.
"""

from __future__ import annotations

import difflib
import itertools
import warnings
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from turnwatch import names
from turnwatch.runtime.events import now_event
from turnwatch.runtime.gate import Admission
from turnwatch.runtime.model import Receipt
from turnwatch.runtime.retention import (
    CALL,
    PROMPTED,
    STOPPED,
    TURN,
    Tombstone,
    UsedIds,
    id_hash,
)

# Their home until 0.1, still imported from here.
from turnwatch.runtime.turn import AskPermission as AskPermission
from turnwatch.runtime.turn import SessionEnv as SessionEnv
from turnwatch.runtime.turn import Turn as Turn

#: How many ids an error names: a runtime or ledger may know thousands.
CLOSEST = 5


def closest(name: str, known: list[str]) -> str:
    """At most :data:`CLOSEST` of ``known``, the closest to ``name`` first, and how many more
    there are (for error messages)."""
    if not known:
        return "(none)"
    near = difflib.get_close_matches(name, known, n=CLOSEST, cutoff=0.0)
    more = len(known) - len(near)
    return ", ".join(near) + (f" (and {more} more)" if more else "")


def _hashes(turn: Turn) -> Iterator[int]:
    """What is kept of a folded turn: the hashes of its id and its calls' (and whether a stop
    reached it, and which calls were asked a permission: a late stop and a late answer are
    answered from these as they were while it was kept)."""
    yield id_hash(TURN, turn.id)
    if turn.stop_task is not None:
        yield id_hash(STOPPED, turn.id)
    for cid, call in turn.calls.items():
        yield id_hash(CALL, cid)
        if call.prompt is not None:
            yield id_hash(PROMPTED, cid)


class Session:
    """A conversation: one live turn at a time; ``processing`` is the UI's spinner."""

    def __init__(
        self,
        env: SessionEnv,
        session_id: str,
        past: Tombstone | None = None,
        *,
        numbered: int = 0,
    ) -> None:
        self.env = env
        self.id = session_id
        self.admission = Admission(env.max_running)
        self.turns: dict[str, Turn] = {}
        self.live: Turn | None = None
        # True from turn start until processing.cleared.
        self.processing = False
        # The call ids of the turns kept whole.
        self.used_call_ids: set[str] = set()
        # What is left of the turns no longer kept whole (folded here, or before an eviction):
        # how many there were and the hashes of their ids, which stay used (None: none yet).
        self.folded_turns = past.turns if past is not None else 0
        self.history = UsedIds(past.used) if past is not None else None
        # Numbered on from its folded turns, or (``numbered``) from the last a runtime before
        # this one recorded: a turn id, and the call ids made of it, are never used twice.
        self._turn_seq = itertools.count(max(self.folded_turns, numbered) + 1)

    def emit(self, kind: str, turn: str | None, attrs: Mapping[str, Any] | None = None) -> None:
        sink = self.env.call.sink
        if sink is not None:
            sink(now_event(kind, self.id, turn=turn, attrs=attrs))

    def start_turn(self, turn_id: str | None = None, *, parent_session: str | None = None) -> Turn:
        """The next turn, live at once: the session is ``processing`` until it settles."""
        tid = turn_id or f"{self.id}.t{next(self._turn_seq)}"
        if self.used_turn_id(tid):
            raise ValueError(f"turn id {tid!r} was already used in session {self.id!r}")
        if len(self.turns) > 2 * self.env.max_settled_turns:
            self._fold()
        turn = Turn(self, tid)
        self.turns[tid] = turn
        self.live = turn
        self.processing = True
        attrs = {names.K_MODE: self.env.mode.value}
        if parent_session is not None:
            attrs[names.K_PARENT_SESSION] = parent_session
        self.emit(names.TURN_STARTED, tid, attrs)
        return turn

    @property
    def past(self) -> Tombstone | None:
        """Deprecated, kept through 0.2: :attr:`history` and :attr:`folded_turns` (the turns
        folded here, or before an eviction)."""
        warnings.warn(
            "Session.past is deprecated: use Session.history and Session.folded_turns",
            DeprecationWarning,
            stacklevel=2,
        )
        if self.history is None:
            return None
        return Tombstone(self.folded_turns, None, self.history.packed())

    def used_turn_id(self, tid: str) -> bool:
        """True if a turn of this session had this id (kept whole, or folded)."""
        return tid in self.turns or self.folded(TURN, tid)

    def folded(self, kind: str, ident: str) -> bool:
        """True if a folded turn's ``ident`` is of ``kind`` (``runtime.retention``'s kinds)."""
        return self.history is not None and id_hash(kind, ident) in self.history

    def _fold(self) -> None:
        """Fold the turns older than the last ``max_settled_turns`` into :attr:`history`: only
        the hashes of their ids are kept (a turn not yet :attr:`~Turn.over` stays whole)."""
        turns = list(self.turns.values())
        folding = [t for t in turns[: len(turns) - self.env.max_settled_turns] if t.over]
        for turn in folding:
            del self.turns[turn.id]
            self.used_call_ids.difference_update(turn.calls)
        self.folded_turns += len(folding)
        self._remember(h for turn in folding for h in _hashes(turn))

    def _remember(self, hashes: Iterable[int]) -> UsedIds:
        if self.history is None:
            self.history = UsedIds()
        self.history.add(hashes)
        return self.history

    def tombstone(self) -> Tombstone:
        """What is kept of this session once it is evicted (no longer served): every id it
        used, hashed, and how many turns it had."""
        last = self.last
        used = self._remember(h for turn in self.turns.values() for h in _hashes(turn))
        turns = self.folded_turns + len(self.turns)
        return Tombstone(turns, last.id if last else None, used.packed())

    @property
    def last(self) -> Turn | None:
        """The most recent turn."""
        return next(reversed(self.turns.values()), None) if self.turns else None

    def turn_settled(self, turn: Turn) -> None:
        """``turn`` settled: no longer live; a turn that ended on its own clears "processing"."""
        if self.live is turn:
            self.live = None
        if turn.stop_task is None:
            # After a stop, the abort RPC's return clears it instead (see returned).
            self.processing = False
            self.emit(names.PROCESSING_CLEARED, turn.id)
            self._idle()

    def _idle(self) -> None:
        if self.env.on_idle is not None:
            self.env.on_idle(self.id)

    @property
    def settled(self) -> bool:
        """No live turn, "processing" clear, and nothing of its turns still running (what a
        finished call left running is ended first): the session may be evicted."""
        if self.live is not None or self.processing:
            return False
        return all(t.lingering is None or t.lingering.done() for t in self.turns.values())

    def returned(self, turn: Turn, receipt: Receipt) -> None:
        """``agent.abort`` returns; the renderer, which awaited it, clears "processing".

        If the RPC never returns (its caller went away), "processing" stays set: the pinned
        session of the field report, which the watchdog finds and a later stop clears.
        """
        self.emit(names.ABORT_RPC_RETURNED, turn.id, {names.K_RECEIPT: receipt.value})
        if self.processing and self.live is None:
            self.processing = False
            self.emit(names.PROCESSING_CLEARED, turn.id)
            self._idle()
