"""One tool call's state, its transitions and its resolution (the stop handlers: ``handlers``).

A call's phase and flags change only through its own methods, which assert the order (trio's
``CancelStatus`` keeps its bookkeeping the same way): ``open_prompt`` → ``admit`` → ``begin``
(the side-effect boundary) → ``finish``; a stop's handler calls ``send_abort``, ``abandon`` and
``race``. A call sent ``tools.abort`` can never begin, whatever the mode; nothing else assigns
these fields.

A call is resolved exactly once (:meth:`Call.finish`); everything after that — a late host result,
late progress — is dropped or, where it means a side effect outlived the runtime's wait, recorded
as such. A call whose requester runs it in its own task (:meth:`Call.run_in_place`) is here too:
its stop is the same race, its cancellation taken back. What a call says and hears (its events,
its host's messages, the answer that resolves it) is its base's, in ``call_io``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from turnwatch import names
from turnwatch.runtime.call_io import STARTED, CallEnv, CallIO, LocalRun, TurnIds
from turnwatch.runtime.clock import REAL
from turnwatch.runtime.gate import Prompt
from turnwatch.runtime.messages import OutputTail, recorded_error
from turnwatch.runtime.model import (
    POLICY_OF,
    Outcome,
    Phase,
    Policy,
    StopSource,
    ToolClass,
    ToolResult,
)
from turnwatch.runtime.protocol import (
    AbortRequest,
    HostResult,
    Progress,
)

__all__ = ["STARTED", "Call", "CallEnv", "LocalRun", "Owner", "StopHandler"]


class Owner(TurnIds, Protocol):
    """What a call needs of its turn."""

    def release_slot(self) -> None:
        """Give the call's admission slot back."""

    def call_done(self, call: Call) -> None:
        """The call is resolved."""


class Call(CallIO):
    """A tool call inside a turn. Fields are owned by the runtime's event loop; what it says and
    hears (events, host messages, answers) is :class:`~turnwatch.runtime.call_io.CallIO`'s."""

    turn: Owner  # (CallIO needs only its ids)

    # Slots: a call is made on every tool call, and a session keeps its recent turns' calls.
    __slots__ = (
        "_stop",
        "_waiters",
        "abandoned",
        "abort_sent",
        "args",
        "call_id",
        "class_name",
        "env",
        "handler",
        "holds_slot",
        "local",
        "phase",
        "policy",
        "policy_name",
        "prompt",
        "result",
        "session",
        "stop_source",
        "tool",
        "tool_class",
        "turn",
    )

    def __init__(
        self,
        env: CallEnv,
        turn: Owner,
        session: str,
        call_id: str,
        tool: str,
        tool_class: ToolClass,
        args: Mapping[str, Any],
        local: bool = False,
    ) -> None:
        self.env = env
        self.turn = turn
        self.session = session
        self.call_id = call_id
        self.tool = tool
        self.tool_class = tool_class
        # The policy its class fixes (design §1), and both as plain strings for the hot path.
        self.policy = POLICY_OF[tool_class]
        self.class_name: str = _NAME[tool_class]
        self.policy_name: str = _NAME[self.policy]
        self.args = args
        # Its execution is its requester's, run in this process, not the host's. (The run itself
        # is held only by what starts it: a session keeps its calls, and a framework's handler
        # holds the framework's whole run context.)
        self.local = local
        # Where the call is; moves forward only.
        self.phase = Phase.QUEUED
        loop = asyncio.get_running_loop()
        # What the agent loop awaits: set once, by finish().
        self.result: asyncio.Future[ToolResult] = loop.create_future()
        # The source of the first stop that reached the call: before it starts, a stop means
        # it never starts; after, the policy handler owns the call's end. A future of it is
        # made only for a call that waits to start (:attr:`stop`): most calls never wait.
        self.stop_source: StopSource | None = None
        self._stop: asyncio.Future[StopSource] | None = None
        # The open permission prompt, while the call waits for one.
        self.prompt: Prompt | None = None
        # The host's execution, once the call started.
        # (None as its result: a stop came before it started, and it never did.)
        self.exec_task: asyncio.Task[HostResult | None] | None = None
        # The execution resolved the call itself, as its last step (its done callback then
        # has nothing to do): the caller wakes a loop iteration sooner.
        self._answered_in_task = False
        # Futures of callers waiting for the result (CallHandle.result), set by finish() itself:
        # a done callback on the result would cost each waiter another loop iteration.
        self._waiters: list[asyncio.Future[None]] | None = None
        # True once the runtime stopped waiting: later progress and results are not shown.
        self.abandoned = False
        # Output seen so far (tail, capped): what a grace call returns if the host cannot answer.
        # Made with the first output: most calls report none before their result.
        self.output: OutputTail | None = None
        # When (monotonic) the next tool.progress may be recorded: a heartbeat, not a copy of
        # every read (``yes`` made 24,000 a second, filling the ledger's queue for everyone).
        self.next_progress = 0.0
        # What the host reported since, recorded as one tool.progress when the window ends
        # (so the last word of a call that then goes quiet is not lost): while it waits.
        self.pending_progress: Progress | None = None
        # Holds the admission slot until finish() gives it back.
        self.holds_slot = False
        # True once tools.abort went to the host: the policy handler ran and owns the call's end.
        self.abort_sent = False
        # The handler task of a grace/await stop: held so the task is not garbage-collected
        # while it waits (the turn waits for the call's result, which the handler sets).
        self.handler: asyncio.Task[None] | None = None
        # What the host said when it started the call (process tools): for CallHandle.
        self.pid: int | None = None
        self.containment: str | None = None
        # The requester's task running this read-only call in place (Turn.run_call), and
        # whether the race cancelled it (that cancellation is ours to take back).
        self.in_place: asyncio.Task[Any] | None = None
        self.race_cancelled = False

    @property
    def stop(self) -> asyncio.Future[StopSource]:
        """Done (with its source) once a stop reached the call: what a call waiting to start
        watches."""
        if self._stop is None:
            self._stop = asyncio.get_running_loop().create_future()
            if self.stop_source is not None:
                self._stop.set_result(self.stop_source)
        return self._stop

    @property
    def prestart_stop(self) -> asyncio.Future[StopSource]:
        """What the call watches while it waits to start: its stop (in ``abandon_all``, a stop
        that never comes: the flaw that mode shows)."""
        if self.env.heeds_prestart_stop:
            return self.stop
        return asyncio.get_running_loop().create_future()

    # --- transitions: the only writers of the phase and the flags ---

    def open_prompt(self) -> Prompt:
        """The call waits for its permission prompt (it has not started)."""
        assert self.phase in _WAITING, self.phase
        self.phase = Phase.AWAITING_PERMISSION
        self.prompt = Prompt()
        self.emit(names.PERMISSION_REQUESTED)
        return self.prompt

    def hold_slot(self) -> None:
        """The call took an admission slot; :meth:`finish` gives it back."""
        assert not self.holds_slot
        if self.result.done():  # abandon_all: resolved while it waited (and it starts anyway)
            self.turn.release_slot()
            return
        self.holds_slot = True

    def admit(self, execution: asyncio.Task[HostResult | None]) -> None:
        """Admitted: its execution is scheduled; it begins there unless a stop comes first. Only
        the execution's answer resolves the call from here (or a stop's handler)."""
        assert self.exec_task is None
        assert self.phase in _WAITING or self._left_to_start, self.phase
        if not self.phase.terminal:
            self.phase = Phase.ADMITTED
        self.exec_task = execution
        execution.add_done_callback(self.host_answered)

    @property
    def _left_to_start(self) -> bool:
        """Resolved by a stop that left it free to start: only ``abandon_all`` does that."""
        return self.phase.terminal and not self.env.heeds_prestart_stop

    def begin(self) -> bool:
        """The side-effect boundary: the call starts now, or never if a stop reached it first.

        A call sent ``tools.abort`` never begins, whatever the mode: that is the order itself,
        not a check a caller may forget.
        """
        if self.abort_sent or (self.env.heeds_prestart_stop and self.stop_source is not None):
            return False
        if self._left_to_start:
            return True
        assert self.phase in _WAITING or self.phase is Phase.ADMITTED, self.phase
        self.phase = Phase.RUNNING
        return True

    def reach(self, source: StopSource) -> bool:
        """A stop reached the call (the first one's source is kept): True while a stop's
        handler has something to do (the call is unresolved and was sent no ``tools.abort``)."""
        if self.stop_source is None:
            self.stop_source = source
            if self._stop is not None:
                self._stop.set_result(source)
        return not (self.result.done() or self.abort_sent)

    def close(self) -> None:
        """A stop before the call began: it never begins, and its prompt can never be
        approved."""
        assert not self.phase.started, self.phase
        if self.prompt is not None and self.prompt.close():
            self.emit(names.PERMISSION_CANCELLED)
        self.finish(Outcome.ABORTED, error_code=names.TOOL_ABORTED, before_start=True)

    def send_abort(self, source: StopSource) -> None:
        """Send the typed ``tools.abort`` for this started call to its host: from here on a
        stop's handler owns the call's end, and the call can never begin again."""
        assert self.phase.started, self.phase
        assert not self.abort_sent
        self.abort_sent = True
        if self.env.sink is not None:  # no sink: not even the attributes are built
            # A grace call's SIGKILL deadline, on the wall clock: a watchdog that finds the call
            # after this runtime died goes on with this window, not a new one (no second SIGTERM).
            grace = (
                {names.K_KILL_AT: time.time() + self.env.grace_s}
                if self.policy is Policy.GRACE
                else {}
            )
            self.emit(
                names.TOOLS_ABORT_SENT,
                policy=self.policy_name,
                **{names.K_CLASS: self.class_name},
                source=source.value,  # plain data in events, as every other stop event has
                **grace,
            )
        if self.local:
            return  # its execution is ours: race() cancels it, await waits for it
        env = self.env
        env.host.abort(
            AbortRequest(
                self.session,
                self.turn.id,
                self.call_id,
                self.tool,
                source,
                env.grace_s,
                self.turn.traceparent,
                # On real time only: a test's manual clock is not the host's unless it says so.
                time.monotonic() + env.grace_s if env.clock is REAL else None,
            )
        )

    def abandon(self) -> None:
        """The runtime stops waiting: later progress and results of the call are not shown."""
        self.abandoned = True

    def discard(self, **attrs: Any) -> None:
        """Released now, its result discarded (``TOOL_ABORTED``): the runtime stops waiting."""
        self.abandon()
        self.finish(Outcome.DISCARDED, output="", error_code=names.TOOL_ABORTED, **attrs)

    def race(self) -> None:
        """Released at once, its result discarded; a read-only execution of the runtime's own
        (the requester's task, or its run) is cancelled, as a host cancels its worker."""
        self.discard(policy=_RACE_NAME)
        if self.in_place is not None:
            self.race_cancelled = True
            self.in_place.cancel()
        elif self.local and self.exec_task is not None and self.tool_class is ToolClass.READ_ONLY:
            self.exec_task.cancel()

    def watch(self, handler: asyncio.Task[None]) -> None:
        """Hold the stop's grace or await handler (the turn waits for the result it sets)."""
        assert self.abort_sent
        assert self.handler is None
        self.handler = handler

    def begin_in_place(self) -> None:
        """A ``read_only`` call that took a free slot (:meth:`finish` gives it back) and needs
        no prompt, admitted in ``request()``: its requester runs it now, in its own task
        (:meth:`~turnwatch.runtime.call_io.CallIO.run_in_place`)."""
        assert self.phase is Phase.QUEUED, self.phase
        assert self.tool_class is ToolClass.READ_ONLY
        assert not self.holds_slot
        self.holds_slot = True
        self.phase = Phase.RUNNING

    # --- resolution ---

    def finish(
        self,
        outcome: Outcome,
        *,
        output: str | None = None,
        error_code: str | None = None,
        data: Mapping[str, Any] | None = None,
        phase: Phase | None = None,
        error: str | None = None,
        **attrs: Any,
    ) -> bool:
        """Resolve the call once; False if it was already resolved."""
        if self.result.done():
            return False
        self.phase = phase or _PHASE_OF[outcome]
        if self.holds_slot:
            self.holds_slot = False
            self.turn.release_slot()
        # The result holds the text now; a resolved call collects no more (on_message), and the
        # session keeps its calls for receipts: the buffer would be a second copy for its life.
        if output is None:
            output = self.output.take() if self.output is not None else ""
        self.output = None
        self.result.set_result(
            ToolResult(self.call_id, self.tool, outcome, output, error_code, data, error)
        )
        if self._waiters is not None:
            for waiter in self._waiters:
                if not waiter.done():  # cancelled: that caller stopped waiting
                    waiter.set_result(None)
            self._waiters = None
        if self.env.sink is not None and outcome is not Outcome.REFUSED:
            kind = (
                names.TOOL_RESULT_DISCARDED if outcome is Outcome.DISCARDED else names.TOOL_FINISHED
            )
            if error is not None:
                attrs[names.K_ERROR] = recorded_error(error)
            self.emit(kind, outcome=outcome.value, **attrs)
        self.turn.call_done(self)
        return True

    def wait_result(self, waiter: asyncio.Future[None]) -> None:
        """Set ``waiter`` when the call is resolved (a caller's cancel cancels the waiter, never
        the call's result)."""
        if self.result.done():
            waiter.set_result(None)
        elif self._waiters is None:
            self._waiters = [waiter]
        else:  # a caller that gave up and came back: what it left is dropped
            self._waiters = [w for w in self._waiters if not w.done()]
            self._waiters.append(waiter)


#: Where a call may wait before it is admitted.
_WAITING = frozenset({Phase.QUEUED, Phase.AWAITING_PERMISSION})

_PHASE_OF: Mapping[Outcome, Phase] = {
    Outcome.COMPLETED: Phase.FINISHED,
    Outcome.COMPLETED_AFTER_STOP: Phase.FINISHED,
    Outcome.FAILED: Phase.FAILED,
    Outcome.ABORTED: Phase.ABORTED,
    Outcome.DISCARDED: Phase.DISCARDED,
    Outcome.REFUSED: Phase.ABORTED,
    Outcome.DENIED: Phase.FAILED,
}

#: What a stop does to one call: the handler its mode (and policy) selects.
StopHandler = Callable[[Call, StopSource], None]

#: Class and policy names by member: an enum's ``.value`` is a property, slow on the hot path.
_NAME: Mapping[ToolClass | Policy, str] = {m: m.value for e in (ToolClass, Policy) for m in e}
_RACE_NAME = _NAME[Policy.RACE]
