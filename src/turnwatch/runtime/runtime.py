"""The runtime: sessions, turns, tool calls, and the stop (``abort()``) the ADR specifies (its
walk and settlement are the base class's, in ``abort``)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Mapping
from typing import Any

from turnwatch import names
from turnwatch.runtime import procfs
from turnwatch.runtime.abort import Stopping
from turnwatch.runtime.calls import Call, CallEnv
from turnwatch.runtime.clock import REAL, Clock
from turnwatch.runtime.events import EventSink, now_event, past_calls_of
from turnwatch.runtime.gate import Answer
from turnwatch.runtime.model import (
    DEFAULT_GRACE_S,
    Mode,
    Outcome,
    ParentStoppedError,
    PastCalls,
    StopSource,
    TurnBusyError,
    UnknownSessionError,
    UnknownTurnError,
    parse_source,
)
from turnwatch.runtime.modes import RULES
from turnwatch.runtime.protocol import Host
from turnwatch.runtime.registry import AbortRegistry
from turnwatch.runtime.retention import (
    MAX_SETTLED,
    MAX_SETTLED_TURNS,
    PROMPTED,
    RETAIN_SETTLED_S,
    Retention,
)
from turnwatch.runtime.session import Session, closest
from turnwatch.runtime.turn import AskPermission, SessionEnv, Turn

DEFAULT_MAX_RUNNING = 8


class Runtime(Stopping):
    """The ADR's stop semantics over a :class:`~turnwatch.runtime.protocol.Host`.

    Create it inside a running event loop. ``sink`` receives every event; without one, nothing is
    recorded and nothing is built. ``clock`` measures the grace window (a test's ManualClock
    makes it instant). ``past`` is what runtimes before this one recorded (a ledger's,
    :class:`turnwatch.tracing.past_calls.LedgerCalls`): a prompt their stop closed is refused
    to an answer sent after a restart, and a session they served numbers its turns on from
    theirs (no turn or call id of it is one they recorded). Not given, it is the sink's own
    record, when the sink keeps one (a :class:`~turnwatch.tracing.Ledger`, or a ``Telemetry``
    or :class:`FanOut` holding one): the file this runtime writes is what the one before it
    wrote.
    """

    def __init__(
        self,
        host: Host,
        *,
        mode: Mode | str = Mode.ADR,
        grace_s: float = DEFAULT_GRACE_S,
        sink: EventSink | None = None,
        ask_permission: AskPermission | None = None,
        max_running: int = DEFAULT_MAX_RUNNING,
        registry: AbortRegistry | None = None,
        control: str | None = None,
        clock: Clock = REAL,
        retain_settled_s: float = RETAIN_SETTLED_S,
        max_settled: int = MAX_SETTLED,
        max_settled_turns: int = MAX_SETTLED_TURNS,
        past: PastCalls | None = None,
    ) -> None:
        if grace_s <= 0:
            raise ValueError(f"grace window must be positive, got {grace_s}")
        if max_settled_turns < 0:
            raise ValueError(f"max_settled_turns must not be negative, got {max_settled_turns}")
        # The mode's stop, chosen once: the stop path never asks which mode it is in.
        self.rules = RULES[Mode(mode)]
        # What sessions, turns and calls get of the runtime: never the runtime itself. The
        # runtime's own settings are read from it too, so the two can never disagree.
        self.env = SessionEnv(
            CallEnv(sink, host, grace_s, clock, self.rules.heeds_prestart_stop),
            self.rules.mode,
            registry or AbortRegistry(),
            ask_permission,
            max_running,
            self.rules.runs_in_place,
            self._on_idle,
            max_settled_turns,
            self._stop_failed,
        )
        # Settled sessions are kept a while, then evicted to tombstones (runtime.retention).
        self.retention = Retention(retain_s=retain_settled_s, max_settled=max_settled)
        self.control = control  # the control socket's path, once one serves this runtime
        # What runtimes before this one recorded (a ledger): a prompt their stop closed stays
        # closed to an answer sent here after a restart.
        self.past = past if past is not None else past_calls_of(sink)
        self.sessions: dict[str, Session] = {}
        self._pid = os.getpid()
        me = procfs.read(self._pid)
        # No /proc: the start time is unknown; now stands for it.
        self._create_time = me.create_time if me is not None else time.time()
        self._start = procfs.start_attrs(me)

    @property
    def sink(self) -> EventSink | None:
        """Where every event goes (fixed at construction, like the settings below)."""
        return self.env.call.sink

    @property
    def host(self) -> Host:
        return self.env.call.host

    @property
    def mode(self) -> Mode:
        return self.env.mode

    @property
    def grace_s(self) -> float:
        return self.env.call.grace_s

    @property
    def registry(self) -> AbortRegistry:
        return self.env.registry

    # --- events ---

    def emit(
        self,
        kind: str,
        session: str,
        *,
        turn: str | None = None,
        call: str | None = None,
        tool: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        """Hand one event to the sink (no sink: no cost)."""
        if self.sink is not None:
            self.sink(now_event(kind, session, turn=turn, call=call, tool=tool, attrs=attrs))

    # --- sessions and turns ---

    def open_session(self, session_id: str, *, parent_session: str | None = None) -> Session:
        """Open (or return) a session; announces this runtime in ``runtime.started``
        (``parent_session``: the session whose run started this one, for a nested run)."""
        if session_id in self.sessions:
            return self.sessions[session_id]
        self._evict_due()
        tomb = self.retention.exhume(session_id)
        sess = Session(
            self.env, session_id, tomb, numbered=self._last_turn(session_id) if tomb is None else 0
        )
        self.sessions[session_id] = sess
        attrs: dict[str, Any] = {
            names.K_PID: self._pid,
            names.K_CREATE_TIME: self._create_time,
            **self._start,
            names.K_MODE: self.mode.value,
            names.K_GRACE_S: self.grace_s,
        }
        if self.control:
            attrs[names.K_CONTROL] = self.control
        if parent_session is not None:
            attrs[names.K_PARENT_SESSION] = parent_session
        self.emit(names.RUNTIME_STARTED, session_id, attrs=attrs)
        return sess

    def _last_turn(self, session_id: str) -> int:
        """The last turn number runtimes before this one recorded of ``session_id`` (``past``,
        when it counts turns), so that a session served again after a restart numbers on."""
        last_turn = getattr(self.past, "last_turn", None)
        return int(last_turn(session_id)) if callable(last_turn) else 0

    def evicted(self, session_id: str) -> bool:
        """True if ``session_id`` was served here and evicted (its tombstone is kept)."""
        return session_id not in self.sessions and session_id in self.retention.tombstones

    def _on_idle(self, session_id: str) -> None:
        self.retention.settled(session_id, self.env.call.clock.monotonic())
        self._evict_due()

    def _evict_due(self) -> None:
        """Evict the settled sessions past their time or beyond the bound, oldest first."""
        for sid in self.retention.due(self.env.call.clock.monotonic()):
            sess = self.sessions.get(sid)
            if sess is None or not sess.settled:
                continue  # active again, or something of it still runs: kept
            del self.sessions[sid]
            self.retention.bury(sid, sess.tombstone())

    def session(self, session_id: str) -> Session:
        """The session, or an error naming the sessions that exist."""
        try:
            return self.sessions[session_id]
        except KeyError:
            raise UnknownSessionError(
                f"unknown session {session_id!r}; sessions: "
                f"{closest(session_id, list(self.sessions))}"
            ) from None

    def start_turn(
        self, session_id: str, turn_id: str | None = None, *, parent: Turn | None = None
    ) -> Turn:
        """Start the session's next turn; the session is ``processing`` until it settles.

        ``parent``: the live turn whose tool started this one (a nested run, of this runtime or
        another). Its events name the parent's session, and a stop of the parent stops this
        turn first: the parent settles only after it. A run asked for once the parent's stop
        began raises :class:`ParentStoppedError` and starts nothing, as a call requested then is
        refused: the stop would never reach it, and the parent, awaiting the tool that waits for
        the run, would settle only when the run had run its course.
        """
        parent_session = parent.session.id if parent is not None else None
        if parent is not None and parent.stopping:
            raise ParentStoppedError(
                f"turn {parent.id!r} of session {parent_session!r} was stopped: the nested run "
                f"of session {session_id!r} its tool asked for never starts"
            )
        # The existing session, or a new one announced.
        sess = self.open_session(session_id, parent_session=parent_session)
        if sess.live is not None:
            raise TurnBusyError(f"session {session_id!r} already has live turn {sess.live.id!r}")
        turn = sess.start_turn(turn_id, parent_session=parent_session)
        self.retention.active(session_id)
        if parent is not None:
            parent.adopt(turn, functools.partial(self.abort, session_id, turn=turn.id))
        return turn

    # --- calls ---

    def answer_permission(self, session_id: str, call_id: str, approved: bool) -> Answer:
        """The user's answer to a prompt; ``LATE`` (refused) when a stop closed it first, the
        session settled and was evicted since, or (``past``) a runtime before this one
        resolved the call. ``LookupError`` for a call no prompt of this runtime's is for."""
        sess = self.sessions.get(session_id)
        call = None
        if sess is not None:
            call = next((t.calls[call_id] for t in sess.turns.values() if call_id in t.calls), None)
        if (
            self.evicted(session_id)
            # Long over, the prompt with it; or refused before its prompt opened (a framework
            # asked after the stop reached the turn): no answer can start it.
            or (call is None and sess is not None and sess.folded(PROMPTED, call_id))
            or (call is not None and call.prompt is None and _refused(call))
            # Resolved by a runtime before this one (its prompt closed by a stop there): not
            # even an answer sent after a restart starts it.
            or (call is None and self.past is not None and self.past.resolved(session_id, call_id))
        ):
            if call is not None:  # with its turn and tool: explain shows it in the turn
                call.emit(names.PERMISSION_LATE, approved=approved)
            else:
                self.emit(
                    names.PERMISSION_LATE,
                    session_id,
                    call=call_id,
                    attrs={names.K_APPROVED: approved},
                )
            return Answer.LATE
        if sess is None:
            self.session(session_id)  # raises, naming the sessions there are
        if call is None or call.prompt is None:
            raise LookupError(
                f"no permission prompt for call {call_id!r} in session {session_id!r}"
            )
        answer = call.prompt.answer(approved)
        kind = {
            Answer.GRANTED: names.PERMISSION_GRANTED,
            Answer.DENIED: names.PERMISSION_DENIED,
            Answer.LATE: names.PERMISSION_LATE,
        }[answer]
        call.emit(kind, approved=approved)
        return answer

    def abort_call(
        self,
        session_id: str,
        turn_id: str,
        call_id: str,
        tool: str,
        *,
        source: str | StopSource = StopSource.API,
    ) -> None:
        """A typed abort for one call, which may not have been requested yet.

        It reaches only the call with this exact session, turn, call id and tool name; an early
        one waits in the registry (for Bash, as an expiring tombstone) and the call never starts.
        """
        src = parse_source(source)
        if self.evicted(session_id):
            return  # its turns settled long ago: nothing of them can start
        sess = self.session(session_id)
        turn = sess.turns.get(turn_id)
        if turn is None and sess.used_turn_id(turn_id):
            return  # a folded turn: long over, nothing of it can start
        if turn is None:
            raise UnknownTurnError(
                f"unknown turn {turn_id!r} in session {session_id!r}; turns: "
                f"{closest(turn_id, list(sess.turns))}"
            )
        call = turn.calls.get(call_id)
        if call is not None and call.tool == tool:
            self.rules.handle(call, src)
        elif call is None and not turn.settled.done():
            # Kept for the call to come; a settled turn's calls never come, and its records
            # were dropped at its settlement (nothing would take this one).
            self.registry.record(session_id, turn_id, call_id, tool, src)


def _refused(call: Call) -> bool:
    """True if ``call`` was refused: asked for after the stop, or named by an early abort."""
    return call.result.done() and call.result.result().outcome is Outcome.REFUSED
