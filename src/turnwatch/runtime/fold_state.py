"""What a stop-path fold (:mod:`turnwatch.runtime.fold`) reads events into: the :class:`Move`
each event makes, each session's and call's state as plain data whose fields are the ledger's
summary columns, and the :class:`Store` that keeps them (bounded by what is live, for a reader
that runs for months)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum, auto

from turnwatch import names
from turnwatch.runtime.events import Event
from turnwatch.runtime.model import POLICY_OF, ToolClass, class_of

__all__ = [
    "CALL_COLUMNS",
    "CLASS_NAME",
    "MAX_IDLE_SESSIONS",
    "MAX_RELEASED",
    "POLICY_NAME",
    "SESSION_COLUMNS",
    "CallState",
    "Move",
    "SessionState",
    "Step",
    "Store",
]

#: What a long-running reader (spans, metrics) keeps of calls already released.
MAX_RELEASED = 10_000
#: What a long-running reader keeps of idle sessions (those processing are all kept).
MAX_IDLE_SESSIONS = 10_000
# Plain strings per class: an enum's .value is a descriptor call, and this runs per event.
CLASS_NAME: Mapping[ToolClass, str] = {c: c.value for c in ToolClass}
POLICY_NAME: Mapping[ToolClass, str] = {c: POLICY_OF[c].value for c in ToolClass}


class Move(Enum):
    """What one event did on the stop path."""

    SESSION = auto()  # a runtime announced itself for the session
    TURN = auto()  # a turn started: the session is processing
    STOP = auto()  # a stop began (the click, or the first accepted agent.abort)
    RPC = auto()  # the stop's agent.abort arrived
    JOINED = auto()  # another agent.abort joined a stop under way
    WALK = auto()  # the abort walk started
    SETTLED = auto()  # the turn settled (first time)
    RETURNED = auto()  # an agent.abort that was not a join returned
    CLEARED = auto()  # processing cleared: the UI is idle
    UI_CLICK = auto()  # the browser's click (its clock)
    UI_IDLE = auto()  # the browser rendered idle after its click: stop → idle, one clock
    REQUESTED = auto()
    PROMPTED = auto()  # a permission prompt opened
    GRANTED = auto()
    DENIED = auto()
    CANCELLED = auto()  # a stop closed the prompt: it can never be approved
    ANSWER_LATE = auto()  # an answer to a prompt the stop came before: refused
    STARTED = auto()
    PROGRESS = auto()
    ABORT_SENT = auto()  # the call's tools.abort (first time)
    GRACE_EXPIRED = auto()
    RELEASED = auto()  # the runtime stopped holding the call (first end)
    LATE = auto()  # the host answered after the call was released
    REAPED = auto()  # processes the call left running were ended
    CROSSED = auto()  # the event names another tool or turn than its call's
    FINDING = auto()
    RECOVERED = auto()
    GAP = auto()  # the ledger lost events of the session


@dataclass(slots=True)
class SessionState:
    """A session's live (or last) turn and its stop: the ledger's ``sessions`` columns."""

    session: str
    runtime_pid: int | None = None
    runtime_create_time: float | None = None
    control: str | None = None
    mode: str | None = None
    turn: str | None = None
    turn_started: float | None = None
    processing: int = 0
    stop_ts: float | None = None
    stop_source: str | None = None
    rpc_pending: int = 0
    settled_ts: float | None = None
    outcome: str | None = None
    cleared_ts: float | None = None
    last_ts: float | None = None
    #: When the stop's own agent.abort arrived (None: a click not yet followed by one).
    rpc_ts: float | None = None
    walk_ts: float | None = None
    #: The stop's start on the monotonic clock, when its producer had one (exact durations).
    stop_mono: int | None = None
    #: The browser's click and its rendering of idle, both on the browser's clock.
    ui_click_ts: float | None = None
    ui_idle_ts: float | None = None
    #: Who measured the stop's stop → idle, once: ``browser`` (its click to its idle) or
    #: ``server`` (the stop's start to the server's processing.cleared).
    idle_by: str | None = None
    #: The session whose wrapped run started this one from a tool (a nested run), if any.
    parent_session: str | None = None
    #: Events of the session the ledger lost (``ledger.gap``), and the last lost one's time:
    #: until a turn starts, settles or clears after it, the session's state is not known.
    gap_lost: int = 0
    gap_ts: float | None = None
    #: The runtime's start as the kernel keeps it (ticks since boot, the boot's id), if given.
    runtime_start_ticks: int | None = None
    runtime_boot_id: str | None = None

    @property
    def stopped(self) -> bool:
        """True once a stop began for the current turn."""
        return self.stop_ts is not None


@dataclass(slots=True)
class CallState:
    """One call. Fields are the ledger's ``calls`` columns (``tool_class`` is ``class``)."""

    session: str
    call: str
    turn: str | None = None
    tool: str | None = None
    tool_class: str | None = None
    policy: str | None = None
    requested_ts: float | None = None
    started_ts: float | None = None
    pid: int | None = None
    create_time: float | None = None
    abort_ts: float | None = None
    ended_ts: float | None = None
    outcome: str | None = None
    last_progress_ts: float | None = None
    prompt_open: int = 0
    reaped_ts: float | None = None
    late_ts: float | None = None
    granted_ts: float | None = None
    containment: str | None = None
    cgroup: str | None = None
    #: JSON ``[[pid, start time, start ticks], ...]`` (ticks where recorded): processes the
    #: call left running when it finished.
    lingering: str | None = None
    procs_live: int | None = None
    abort_mono: int | None = None
    #: When the host's own answer (``tool.finished``) came, if it did.
    done_ts: float | None = None
    #: When the call's permission was granted after its turn's stop (a finding), if it was.
    late_grant_ts: float | None = None
    #: The process's start as the kernel keeps it (ticks since boot, the boot's id), if given.
    start_ticks: int | None = None
    boot_id: str | None = None
    #: The cgroup's inode number, if given: it is that cgroup, not one made again at its path.
    cgroup_id: int | None = None

    @property
    def released(self) -> bool:
        """The runtime no longer holds the call."""
        return self.ended_ts is not None

    @property
    def running(self) -> bool:
        """Started and the host has not answered: its side effects may still happen."""
        return self.started_ts is not None and self.done_ts is None


SESSION_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(SessionState))
#: The ``calls`` columns, in the state's field order (``tool_class`` is stored as ``class``).
CALL_COLUMNS: tuple[str, ...] = tuple(
    names.K_CLASS if f.name == "tool_class" else f.name for f in fields(CallState)
)


@dataclass(slots=True)
class Step:
    """One event read: what it did, and the state it left. ``call`` is None for session events."""

    moves: tuple[Move, ...]
    ev: Event
    session: SessionState
    call: CallState | None


class Store:
    """Where a fold keeps its state: in memory here; the ledger writer keeps rows it syncs.

    ``max_released`` and ``max_idle`` bound a long-running reader's memory (spans and metrics
    of a watchdog or ``serve-metrics`` that runs for months) by what is live, not by history:
    past them, the oldest released calls and the sessions idle longest (since their processing
    cleared, or since first seen if no turn made them busy) are forgotten; every session still
    processing is kept. A late event of a forgotten call or session then reads as one first
    seen (a forgotten session's next stop is of mode ``unknown``, its ``runtime.started`` long
    gone), which only a stream that late can notice.

    A fold looks a state up in ``sessions`` and ``calls`` itself, and calls :meth:`session` and
    :meth:`call` only for one first seen, which they create and keep.
    """

    def __init__(self, max_released: int | None = None, max_idle: int | None = None) -> None:
        self.sessions: dict[str, SessionState] = {}
        self.calls: dict[tuple[str, str], CallState] = {}
        self.max_released = max_released
        self.max_idle = max_idle
        self._released: deque[tuple[str, str]] = deque()
        # Sessions by when they last went idle, oldest first (a dict keeps its order).
        self._idle: dict[str, None] = {}

    @classmethod
    def for_reader(cls) -> Store:
        """A long-running reader's store (spans, metrics): :data:`MAX_RELEASED` released calls
        and :data:`MAX_IDLE_SESSIONS` idle sessions."""
        return cls(MAX_RELEASED, MAX_IDLE_SESSIONS)

    def released(self, c: CallState) -> None:
        """``c`` was just released: forget the oldest released calls past the bound."""
        if self.max_released is None:
            return
        self._released.append((c.session, c.call))
        while len(self._released) > self.max_released:
            self.calls.pop(self._released.popleft(), None)

    def idle(self, s: SessionState) -> None:
        """``s`` went idle: forget the sessions idle longest past the bound (a session busy
        again since is kept, and counted once it goes idle again)."""
        if self.max_idle is None:
            return
        self._idle.pop(s.session, None)
        self._idle[s.session] = None
        while len(self._idle) > self.max_idle:
            sid = next(iter(self._idle))
            del self._idle[sid]
            old = self.sessions.get(sid)
            if old is not None and not old.processing:
                del self.sessions[sid]

    def session(self, session: str) -> SessionState:
        s = self.sessions.get(session)
        if s is None:
            s = self.sessions[session] = SessionState(session)
            # Idle until a turn makes it busy: a session only ever named by a finding or a
            # stray event is bounded like any other idle one.
            self.idle(s)
        return s

    def call(self, ev: Event) -> CallState:
        assert ev.call is not None
        key = (ev.session, ev.call)
        c = self.calls.get(key)
        if c is None:
            # A call first seen by a later event (a foreign stream without tool.requested):
            # its class is the tool's own, or extension.
            cls = class_of(ev.tool or "")
            c = self.calls[key] = CallState(
                ev.session, ev.call, ev.turn, ev.tool, CLASS_NAME[cls], POLICY_NAME[cls]
            )
        return c
