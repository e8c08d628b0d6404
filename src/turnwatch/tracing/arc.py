"""A session's state arc, as its user lived it: ``ready`` → ``working`` → ``waiting`` → …

Each state with when it began, the event that moved the session into it, and whether that
event was recorded or inferred (an agent CLI writes no permission prompt to its log: a reader
that infers one marks it, ``attrs.inferred``). The rules, the same for a runtime's sessions and
an agent CLI's:

- a session begins ``ready``;
- ``turn.started``: ``working``;
- ``permission.requested``: ``waiting``, until every prompt open is answered (granted, denied or
  cancelled), then ``working``;
- ``processing.cleared``: ``ready`` (the prompts go with the turn);
- a move into the state the session is in is no step (repeats collapse).

A stop (``stop.clicked``: a Stop button, an Esc, a Ctrl-C; or ``abort.rpc.received``: a program's
``agent.abort``) is counted once per turn it reached, however many clicks it took.
The arc keeps the last :data:`ARC_MAX` events that move it, so a session of months costs no
more than one of minutes; ``cut`` says older steps were left out.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.tracing.rows import UnreadableRow, event_of

READY, WORKING, WAITING = "ready", "working", "waiting"
#: The most events an arc is read from (the newest).
ARC_MAX = 2000

_ANSWERS = frozenset(
    {names.PERMISSION_GRANTED, names.PERMISSION_DENIED, names.PERMISSION_CANCELLED}
)
#: The events that can move an arc, or count a stop.
KINDS = (
    names.RUNTIME_STARTED,
    names.TURN_STARTED,
    names.PERMISSION_REQUESTED,
    *sorted(_ANSWERS),
    names.PROCESSING_CLEARED,
    names.STOP_CLICKED,
    names.ABORT_RPC_RECEIVED,
)
_STOPS = frozenset({names.STOP_CLICKED, names.ABORT_RPC_RECEIVED})


@dataclass(frozen=True)
class ArcStep:
    """One state of the arc: since when (unix seconds), moved by which event, of which turn,
    and the rule that inferred that event (None: recorded)."""

    state: str
    since: float
    event: str
    turn: str | None = None
    inferred: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "since": self.since,
            "event": self.event,
            "turn": self.turn,
            "inferred": self.inferred,
        }


@dataclass
class Arc:
    """A session's states in order, and the number of turns a stop reached."""

    steps: list[ArcStep] = field(default_factory=list)
    stops: int = 0
    cut: bool = False  # the session's older events were left out

    @property
    def states(self) -> list[str]:
        return [s.state for s in self.steps]

    def to_json(self) -> dict[str, Any]:
        return {"steps": [s.to_json() for s in self.steps], "stops": self.stops, "cut": self.cut}


def arc_of(events: Iterable[Event], *, cut: bool = False) -> Arc:
    """The arc one session's events (in the order recorded) make."""
    arc = Arc(cut=cut)
    prompts: set[str | None] = set()
    stopped: set[str | None] = set()
    busy = False

    def move(state: str, ev: Event) -> None:
        if arc.steps and arc.steps[-1].state == state:
            return
        rule = ev.attrs.get(names.K_INFERRED)
        arc.steps.append(
            ArcStep(state, ev.ts_unix, ev.kind, ev.turn, rule if isinstance(rule, str) else None)
        )

    for ev in events:
        kind = ev.kind
        if not arc.steps and not cut:
            move(READY, ev)  # the session is ready from its first event on
        if kind == names.TURN_STARTED:
            busy = True
            move(WAITING if prompts else WORKING, ev)
        elif kind == names.PERMISSION_REQUESTED:
            prompts.add(ev.call)
            move(WAITING, ev)
        elif kind in _ANSWERS and ev.call in prompts:
            prompts.discard(ev.call)
            if not prompts:
                move(WORKING if busy else READY, ev)
        elif kind == names.PROCESSING_CLEARED:
            busy = False
            prompts.clear()
            move(READY, ev)
        elif kind in _STOPS and busy and ev.turn not in stopped:  # not a stop of nothing
            stopped.add(ev.turn)
            arc.stops += 1
    return arc


def read_arc(conn: sqlite3.Connection, session: str, *, limit: int = ARC_MAX) -> Arc:
    """``session``'s arc from the ledger: its newest ``limit`` events that move it."""
    marks = ",".join("?" * len(KINDS))
    rows = conn.execute(
        f"SELECT kind, ts_unix, turn, call, attrs_json FROM events "
        f"WHERE session = ? AND kind IN ({marks}) ORDER BY seq DESC LIMIT ?",
        (session, *KINDS, limit + 1),
    ).fetchall()
    cut = len(rows) > limit
    events = []
    for kind, ts, turn, call, attrs in reversed(rows[:limit]):
        try:
            events.append(event_of(0, kind, session, ts, attrs, turn=turn, call=call))
        except UnreadableRow:  # damaged; said by the readers of the whole timeline
            continue
    return arc_of(events, cut=cut)
