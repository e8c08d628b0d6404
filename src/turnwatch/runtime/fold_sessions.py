"""The fold's session rules: how each event of a session moves its state (:mod:`.fold`).

Split from :mod:`turnwatch.runtime.fold`, which holds the fold itself and the call rules; the
rules the module docstring there states are applied here for the session's events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.fold_state import Move, SessionState
from turnwatch.runtime.model import Receipt

_NONE: tuple[Move, ...] = ()
_ACCEPTED = (None, Receipt.ACCEPTED.value)
#: ``idle_by`` of a stop the server's own processing.cleared measured.
IDLE_BY_SERVER = "server"
_BY_BROWSER, _BY_SERVER = names.SOURCE_BROWSER, IDLE_BY_SERVER


def _runtime(s: SessionState, ev: Event) -> tuple[Move, ...]:
    a = ev.attrs
    s.runtime_pid = a.get(names.K_PID)
    s.runtime_create_time = a.get(names.K_CREATE_TIME)
    s.runtime_start_ticks, s.runtime_boot_id = a.get(names.K_START_TICKS), a.get(names.K_BOOT_ID)
    s.control = a.get(names.K_CONTROL)
    s.mode = a.get(names.K_MODE) or s.mode
    s.parent_session = a.get(names.K_PARENT_SESSION) or s.parent_session
    return (Move.SESSION,)


def _older(s: SessionState, ev: Event) -> bool:
    """An event of an older turn (a late result): it does not move the session."""
    return ev.turn is not None and s.turn is not None and ev.turn != s.turn


def _turn(s: SessionState, ev: Event) -> tuple[Move, ...]:
    s.parent_session = ev.attrs.get(names.K_PARENT_SESSION) or s.parent_session
    s.turn = ev.turn
    s.turn_started = ev.ts_unix
    s.processing = 1
    s.stop_ts = s.stop_source = s.settled_ts = s.outcome = s.cleared_ts = None
    s.rpc_ts = s.walk_ts = s.stop_mono = s.ui_click_ts = s.ui_idle_ts = s.idle_by = None
    s.rpc_pending = 0
    return (Move.TURN,)


def _begin(s: SessionState, ev: Event) -> None:
    s.stop_ts = ev.ts_unix
    s.stop_mono = ev.mono_ns
    s.stop_source = ev.attrs.get(names.K_SOURCE)


def _clicked(s: SessionState, ev: Event) -> tuple[Move, ...]:
    if _older(s, ev):
        return _NONE
    if ev.attrs.get(names.K_SOURCE) == names.SOURCE_BROWSER:
        if s.ui_click_ts is not None:
            return _NONE
        s.ui_click_ts = ev.ts_unix
        if s.stopped:
            return (Move.UI_CLICK,)
        _begin(s, ev)
        return (Move.STOP, Move.UI_CLICK)
    if s.stopped:
        return _NONE
    _begin(s, ev)
    return (Move.STOP,)


def _received(s: SessionState, ev: Event) -> tuple[Move, ...]:
    if _older(s, ev):
        return _NONE
    s.rpc_pending = 1
    if ev.attrs.get(names.K_RECEIPT) not in _ACCEPTED:
        return (Move.JOINED,) if s.stopped else _NONE
    if not s.stopped:
        _begin(s, ev)
        s.rpc_ts = ev.ts_unix
        return (Move.STOP, Move.RPC)
    if s.rpc_ts is None:
        s.rpc_ts = ev.ts_unix
        return (Move.RPC,)
    return (Move.JOINED,)


def _walk(s: SessionState, ev: Event) -> tuple[Move, ...]:
    if _older(s, ev) or s.walk_ts is not None:
        return _NONE
    s.walk_ts = ev.ts_unix
    return (Move.WALK,)


def _settled(s: SessionState, ev: Event) -> tuple[Move, ...]:
    if _older(s, ev) or s.settled_ts is not None:
        return _NONE
    s.settled_ts = ev.ts_unix
    s.outcome = ev.attrs.get(names.K_OUTCOME)
    return (Move.SETTLED,)


def _returned(s: SessionState, ev: Event) -> tuple[Move, ...]:
    if _older(s, ev):
        return _NONE
    s.rpc_pending = 0
    return _NONE if ev.attrs.get(names.K_RECEIPT) == Receipt.JOINED.value else (Move.RETURNED,)


def _cleared(s: SessionState, ev: Event) -> tuple[Move, ...]:
    if _older(s, ev):
        return _NONE
    if ev.attrs.get(names.K_SOURCE) == names.SOURCE_BROWSER:
        # The UI rendered idle: the user's end of the stop, not the server's state.
        if s.ui_click_ts is None or s.ui_idle_ts is not None:
            return _NONE
        s.ui_idle_ts = ev.ts_unix
        s.idle_by = s.idle_by or _BY_BROWSER
        return (Move.UI_IDLE,)
    if s.stopped and s.ui_click_ts is None and s.idle_by is None:
        s.idle_by = _BY_SERVER  # no click from a browser (yet): the server's idle measures it
    s.processing = 0
    s.cleared_ts = ev.ts_unix
    return (Move.CLEARED,)


def _finding(s: SessionState, ev: Event) -> tuple[Move, ...]:
    return (Move.FINDING,)


def _recovered(s: SessionState, ev: Event) -> tuple[Move, ...]:
    return (Move.RECOVERED,)


def _gap(s: SessionState, ev: Event) -> tuple[Move, ...]:
    a = ev.attrs
    s.gap_lost += int(a.get(names.K_LOST) or 0)
    to = a.get(names.K_TO_TS)
    to = float(to) if isinstance(to, (int, float)) else ev.ts_unix
    s.gap_ts = to if s.gap_ts is None else max(s.gap_ts, to)
    return (Move.GAP,)


SESSION_RULES: Mapping[str, Callable[[SessionState, Event], tuple[Move, ...]]] = {
    names.RUNTIME_STARTED: _runtime,
    names.TURN_STARTED: _turn,
    names.STOP_CLICKED: _clicked,
    names.ABORT_RPC_RECEIVED: _received,
    names.ABORT_WALK_STARTED: _walk,
    names.TURN_SETTLED: _settled,
    names.ABORT_RPC_RETURNED: _returned,
    names.PROCESSING_CLEARED: _cleared,
    # The watchdog's own events name a call, but are about the session: they move no call.
    names.WATCHDOG_FINDING: _finding,
    names.WATCHDOG_RECOVERED: _recovered,
    names.LEDGER_GAP: _gap,
}
