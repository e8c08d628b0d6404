"""The stop path, read from events once: every consumer's rules in one place.

Spans, metrics, the ledger's summary rows (and through them ``sessions`` and the watchdog),
``explain`` and the invariant checker all read the same event stream. They used to decide
separately where a stop starts, what releases a call and what a missing outcome means, and their
answers drifted. Here those rules are written once: :class:`Fold` turns each event into a
:class:`Step` — the :class:`Move` (or moves) it made on the stop path, and the session and call
state after it — and a consumer dispatches on the moves, never on event kinds.

The rules:

- A stop begins at ``stop.clicked`` or at the first ``agent.abort`` the runtime *accepted*
  (``receipt`` accepted, or absent in a foreign stream); any other receipt joins a stop that began,
  and starts none.
- A call is released once: by ``tool.finished``, ``tool.result.discarded`` or ``tool.refused``,
  whichever comes first; a later ``tool.finished`` is a late answer, not a release.
- A release without ``attrs.outcome`` (a foreign stream) gets its kind's: ``completed``,
  ``discarded``, ``refused``.
- The browser's ``stop.clicked`` and ``processing.cleared`` (``attrs.source = "browser"``) are the
  user's own ends of the stop, on the browser's clock: stop → idle is measured between them
  (:attr:`Move.UI_IDLE`), never across two clocks. The click begins the stop when it arrives
  first; one that arrives after its ``agent.abort`` (two requests race) is still the click
  (:attr:`Move.UI_CLICK`), and the server's ``processing.cleared`` then leaves stop → idle to
  the browser's. A stop is measured once (``idle_by``): a click that arrives only after the
  server's ``processing.cleared`` leaves the server's measure standing.
- An event of an older turn does not move the session; one that names another tool or turn than
  its call's does not move the call (invariant 4: it is reported, as :attr:`Move.CROSSED`).

The state (:mod:`turnwatch.runtime.fold_state`) is plain data whose fields are the ledger's
summary columns, so the ledger writer folds into rows it reads from and writes back to SQLite,
and an in-memory fold (spans, metrics, ``explain``) holds the same values for the same stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, runtime_checkable

import orjson

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold_sessions import IDLE_BY_SERVER, SESSION_RULES
from turnwatch.runtime.fold_state import (
    CALL_COLUMNS,
    CLASS_NAME,
    MAX_IDLE_SESSIONS,
    MAX_RELEASED,
    POLICY_NAME,
    SESSION_COLUMNS,
    CallState,
    Move,
    SessionState,
    Step,
    Store,
)
from turnwatch.runtime.model import Outcome, class_of

__all__ = [
    "CALL_COLUMNS",
    "IDLE_BY_SERVER",
    "MAX_IDLE_SESSIONS",
    "MAX_RELEASED",
    "SESSION_COLUMNS",
    "CallState",
    "Fold",
    "Move",
    "SessionState",
    "Step",
    "StepReader",
    "Store",
]

_NONE: tuple[Move, ...] = ()
_CROSSED = (Move.CROSSED,)
_RELEASED = (Move.RELEASED,)
_ANSWER_LATE = (Move.ANSWER_LATE,)
_CLEARED_KIND = names.PROCESSING_CLEARED
_DEFAULT_OUTCOME = {
    names.TOOL_FINISHED: Outcome.COMPLETED.value,
    names.TOOL_RESULT_DISCARDED: Outcome.DISCARDED.value,
    names.TOOL_REFUSED: Outcome.REFUSED.value,
}


class Fold:
    """Reads events in order into the stop-path model. Call it with each event."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store if store is not None else Store()

    def __call__(self, ev: Event) -> Step:
        # The busiest function of a traced runtime's writer thread: every event, three times a
        # call. Plain lookups, no enum attribute access.
        kind, ts = ev.kind, ev.ts_unix
        store = self.store
        # The store's dicts first: a method call per lookup cost a tenth of the writer's work.
        s = store.sessions.get(ev.session)
        if s is None:
            s = store.session(ev.session)
        if s.last_ts is None or ts > s.last_ts:
            s.last_ts = ts
        on_session = SESSION_RULES.get(kind)
        if on_session is not None:
            moves = on_session(s, ev)
            if kind == _CLEARED_KIND and not s.processing:
                store.idle(s)
            return Step(moves, ev, s, None)
        if ev.call is None:
            return Step(_NONE, ev, s, None)
        c = store.calls.get((ev.session, ev.call))
        if c is None:
            c = store.call(ev)
        if (ev.tool is not None and ev.tool != c.tool) or (
            ev.turn is not None and ev.turn != c.turn
        ):
            return Step(_CROSSED, ev, s, c)
        on_call = _CALL_RULES.get(kind)
        moves = on_call(c, ev, s) if on_call is not None else _NONE
        if moves is _RELEASED:
            store.released(c)
        settled = s.settled_ts
        if (
            settled is not None
            and ts > settled
            and kind in _ACTIVITY
            and c.turn == s.turn
            and c.reaped_ts is None  # after a reaping, the host reports the death it caused
        ):
            c.late_ts = c.late_ts or ts  # the call did something after its turn settled
        return Step(moves, ev, s, c)

    def feed(self, events: Iterable[Event]) -> list[Step]:
        """Every step of ``events``, in order."""
        return [self(ev) for ev in events]

    @property
    def sessions(self) -> Mapping[str, SessionState]:
        return self.store.sessions

    @property
    def calls(self) -> Mapping[tuple[str, str], CallState]:
        return self.store.calls

    def turn_over(self, c: CallState) -> bool:
        """True when the call's turn has settled (or a later turn has started)."""
        s = self.store.sessions.get(c.session)
        if s is None or s.turn is None:
            return False
        return c.turn != s.turn or s.settled_ts is not None


_ACTIVITY = frozenset({names.TOOL_STARTED, names.TOOL_PROGRESS, names.TOOL_FINISHED})


# --- call rules ---


def _requested(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    cls = class_of(ev.tool or "", ev.attrs.get(names.K_CLASS))
    c.tool_class, c.policy, c.requested_ts = CLASS_NAME[cls], POLICY_NAME[cls], ev.ts_unix
    return (Move.REQUESTED,)


def _prompted(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    c.prompt_open = 1
    return (Move.PROMPTED,)


def _granted(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    c.prompt_open = 0
    c.granted_ts = ev.ts_unix
    if s.stop_ts is not None and c.turn == s.turn and ev.ts_unix > s.stop_ts:
        c.late_grant_ts = ev.ts_unix  # kept on the row: the scan finds it through an index
    return (Move.GRANTED,)


def _denied(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    c.prompt_open = 0
    return (Move.DENIED,)


def _cancelled(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    c.prompt_open = 0
    return (Move.CANCELLED,)


def _answer_late(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    return _ANSWER_LATE  # refused: nothing of the call moves


def _started(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    a = ev.attrs
    # A call starts once; a process tool's later tool.started (each command it runs) names a
    # process and its containment.
    c.started_ts = c.started_ts or ev.ts_unix
    if a.get(names.K_PID) is not None:
        c.pid, c.create_time, c.procs_live = a.get(names.K_PID), a.get(names.K_CREATE_TIME), 1
        c.start_ticks, c.boot_id = a.get(names.K_START_TICKS), a.get(names.K_BOOT_ID)
    if a.get(names.K_CONTAINMENT) is not None:
        c.containment, c.cgroup = a.get(names.K_CONTAINMENT), a.get(names.K_CGROUP)
        c.cgroup_id = a.get(names.K_CGROUP_ID)
    if c.cgroup is not None:
        c.procs_live = 1
    return (Move.STARTED,)


def _progress(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    c.last_progress_ts = ev.ts_unix
    return (Move.PROGRESS,)


def _abort_sent(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    if c.abort_ts is not None:
        return _NONE
    c.abort_ts, c.abort_mono = ev.ts_unix, ev.mono_ns
    return (Move.ABORT_SENT,)


def _grace_expired(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    return (Move.GRACE_EXPIRED,)


def _ended(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    a = ev.attrs
    if ev.kind == names.TOOL_FINISHED:
        c.done_ts = c.done_ts or ev.ts_unix
        if names.K_STATUS in a:
            # The host's own answer: it returned once its processes were gone, except those it
            # names as lingering (they belong to the call until someone ends them).
            left = a.get(names.K_LINGERING)
            c.lingering = orjson.dumps(list(left), default=str).decode() if left else None
            c.procs_live = 1 if left else 0
    if c.ended_ts is not None:
        if ev.kind != names.TOOL_FINISHED:
            return _NONE
        if ev.ts_unix <= c.ended_ts:
            # An end from before the one recorded arrived late, it did not happen late: the
            # runtime's own record, written behind a watchdog's stand-in for it (its writer had
            # lagged, the runtime died after its stop). Nothing ran past anyone's wait.
            return _NONE
        if c.reaped_ts is None:
            c.late_ts = ev.ts_unix  # a second end: a result that outlived the runtime's wait
        return (Move.LATE,)
    c.ended_ts = ev.ts_unix
    c.outcome = a.get(names.K_OUTCOME) or _DEFAULT_OUTCOME[ev.kind]
    return _RELEASED


def _reaped(c: CallState, ev: Event, s: SessionState) -> tuple[Move, ...]:
    c.reaped_ts, c.procs_live = ev.ts_unix, 0
    return (Move.REAPED,)


_CALL_RULES: Mapping[str, Callable[[CallState, Event, SessionState], tuple[Move, ...]]] = {
    names.TOOL_REQUESTED: _requested,
    names.PERMISSION_REQUESTED: _prompted,
    names.PERMISSION_GRANTED: _granted,
    names.PERMISSION_DENIED: _denied,
    names.PERMISSION_CANCELLED: _cancelled,
    names.PERMISSION_LATE: _answer_late,
    names.TOOL_STARTED: _started,
    names.TOOL_PROGRESS: _progress,
    names.TOOLS_ABORT_SENT: _abort_sent,
    names.TOOL_GRACE_EXPIRED: _grace_expired,
    names.TOOL_FINISHED: _ended,
    names.TOOL_RESULT_DISCARDED: _ended,
    names.TOOL_REFUSED: _ended,
    names.PROCESS_REAPED: _reaped,
}


@runtime_checkable
class StepReader(Protocol):
    """A consumer that reads steps: a pipeline folds each event once and hands every reader the
    same :class:`Step` (spans and metrics), instead of each folding it again."""

    def on_step(self, st: Step) -> object:
        """Read one step (its ``ev`` may be the stamped copy of the event)."""
