"""One tool call's state, its transitions and its resolution (the stop handlers: ``handlers``).

A call's phase and flags change only through its own methods, which assert the order (trio's
``CancelStatus`` keeps its bookkeeping the same way): ``open_prompt`` → ``admit`` → ``begin``
(the side-effect boundary) → ``finish``; a stop's handler calls ``send_abort``, ``abandon`` and
``race``. A call sent ``tools.abort`` can never begin, whatever the mode; nothing else assigns
these fields.

A call is resolved exactly once (:meth:`Call.finish`); everything after that — a late host result,
late progress — is dropped or, where it means a side effect outlived the runtime's wait, recorded
as such. A call whose requester runs it in its own task (:meth:`Call.run_in_place`) is here too:
its stop is the same race, its cancellation taken back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnwatch import names
from turnwatch.runtime.clock import REAL, Clock
from turnwatch.runtime.events import NO_ATTRS, Event, EventSink, new_event
from turnwatch.runtime.gate import Prompt
from turnwatch.runtime.messages import (
    PROGRESS_EVERY_S,
    OutputTail,
    coalesced,
    progress_attrs,
    recorded_error,
    started_attrs,
)
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
    Host,
    HostMessage,
    HostResult,
    HostStatus,
    Progress,
    Started,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CallEnv:
    """What a call needs of the runtime: where its events go, who runs it, the grace window."""

    sink: EventSink | None
    host: Host
    grace_s: float
    clock: Clock = REAL
    #: False only in the rejected ``abandon_all`` mode: a stop before the start is not watched
    #: (a prompt approved after it still starts the call: the flaw that mode shows).
    heeds_prestart_stop: bool = True


class Owner(Protocol):
    """What a call needs of its turn."""

    @property
    def id(self) -> str: ...

    @property
    def traceparent(self) -> str | None: ...

    def release_slot(self) -> None:
        """Give the call's admission slot back."""

    def call_done(self, call: Call) -> None:
        """The call is resolved."""


#: A call's execution run in this process by whoever requested it (see ``Turn.request``).
LocalRun = Callable[[], Awaitable[HostResult]]
#: What a call run by its requester says when it starts (it has no process to name).
STARTED = Started()


class Call:
    """A tool call inside a turn. Fields are owned by the runtime's event loop."""

    # Slots: a call is made on every tool call, and a session keeps its recent turns' calls.
    __slots__ = (
        "_answered_in_task",
        "_stop",
        "_waiters",
        "abandoned",
        "abort_sent",
        "args",
        "call_id",
        "class_name",
        "containment",
        "env",
        "exec_task",
        "handler",
        "holds_slot",
        "in_place",
        "local",
        "next_progress",
        "output",
        "pending_progress",
        "phase",
        "pid",
        "policy",
        "policy_name",
        "prompt",
        "race_cancelled",
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

    def emit(self, kind: str, **attrs: Any) -> None:
        """Emit an event about this call (straight to the sink: this is the busiest emitter)."""
        sink = self.env.sink
        if sink is not None:
            # Built here rather than by now_event (its kinds are names' own, checked while
            # testing): the call's events are most of what an observed runtime builds.
            assert kind in names.EVENT_KINDS, kind
            sink(
                new_event(
                    Event,
                    (
                        kind,
                        self.session,
                        time.time(),
                        time.monotonic_ns(),
                        self.turn.id,
                        self.call_id,
                        self.tool,
                        attrs or NO_ATTRS,
                        None,
                        None,
                    ),
                )
            )

    # --- host messages ---

    def on_message(self, message: HostMessage) -> None:
        """A ``Started`` or ``Progress`` from the host."""
        if isinstance(message, Started):
            self.pid, self.containment = message.pid, message.containment
            if self.env.sink is not None:  # no sink: not even the attributes are built
                attrs = started_attrs(self.class_name, message, self.turn.traceparent)
                self.emit(names.TOOL_STARTED, **attrs)
            return
        if self.abandoned or self.phase.terminal:
            return  # progress of an abandoned call stops at the stop (design §1)
        if message.text:
            if self.output is None:
                self.output = OutputTail()
            self.output.add(message.text)
        if self.env.sink is None:  # a chatty tool's heartbeat: no sink, no attributes
            return
        if self.pending_progress is not None:
            self.pending_progress = coalesced(self.pending_progress, message)
            return
        now = time.monotonic()
        if now >= self.next_progress:
            self.next_progress = now + PROGRESS_EVERY_S
            self.emit(names.TOOL_PROGRESS, **progress_attrs(message))
            return
        self.pending_progress = coalesced(_NO_PROGRESS, message)
        asyncio.get_running_loop().call_at(self.next_progress, self._flush_progress)

    def _flush_progress(self) -> None:
        """The window ended: what came in it, as one tool.progress (unless the call ended or
        was abandoned meanwhile: its progress stops there, design §1)."""
        pending, self.pending_progress = self.pending_progress, None
        if pending is None or self.abandoned or self.phase.terminal:
            return
        self.next_progress = time.monotonic() + PROGRESS_EVERY_S
        self.emit(names.TOOL_PROGRESS, **progress_attrs(pending))

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

    def answered_in_task(self, res: HostResult) -> None:
        """The execution's last step: resolve the call from its answer now, in its task."""
        self._answered_in_task = True
        self._answered(res)

    def host_answered(self, task: asyncio.Task[HostResult | None]) -> None:
        """The call's execution ended (a done callback): resolve the call from the host's answer
        (an execution that never started has none: the stop resolved the call)."""
        # Over: a finished task holds its context (a framework's run context) and its result,
        # and a session keeps its recent turns' calls (runtime.retention).
        self.exec_task = None
        if self._answered_in_task:
            return
        if task.cancelled():
            self.finish(Outcome.FAILED, error="the host's execution was cancelled")
        elif (exc := task.exception()) is not None:
            self._raised(exc)
        elif (res := task.result()) is not None:
            self._answered(res)

    def _answered(self, res: HostResult) -> None:
        try:
            self.finish_from_host(res)
        except Exception as exc:  # a bug here must not leave the turn open forever
            _log.exception("call %s: resolving the host's answer failed", self.call_id)
            self.finish(Outcome.FAILED, error=repr(exc))

    def _raised(self, exc: BaseException) -> None:
        """The execution raised instead of answering (a host bug, or a requester's ``run``), said
        where it can be seen."""
        _log.error("call %s: its execution raised instead of answering", self.call_id, exc_info=exc)
        self.finish(Outcome.FAILED, error=repr(exc))

    def finish_from_host(self, res: HostResult) -> None:
        """Resolve from the host's answer (the call was not raced away)."""
        stopped = self.stop_source is not None
        if self.result.done():
            if not self.abandoned or self.tool_class is ToolClass.READ_ONLY:
                return  # a raced read-only result: discarded, as the ADR says
            # A side effect outlived the runtime's wait (a rejected mode, or a host that overran
            # the grace window): say so, so the watchdog reports activity after settlement.
            self.emit(
                names.TOOL_FINISHED,
                outcome=_outcome_of(res, stopped).value,
                status=res.status.value,
                after_abandon=True,
            )
            return
        outcome = _outcome_of(res, stopped)
        code = names.TOOL_ABORTED if outcome is Outcome.ABORTED else None
        output = res.output if res.output or not self.output else None
        error = res.error or None
        if self.env.sink is None:  # no event, so no attributes to build (every call is here)
            self.finish(outcome, output=output, error_code=code, data=res.data, error=error)
            return
        extra: dict[str, Any] = {names.K_STATUS: res.status.value}
        if res.data is not None and res.data.get(names.K_LINGERING):
            # Processes the call left running: the ledger keeps them as the call's.
            extra[names.K_LINGERING] = res.data[names.K_LINGERING]
        self.finish(outcome, output=output, error_code=code, data=res.data, error=error, **extra)

    # --- run in its requester's task ---

    def begin_in_place(self) -> None:
        """A ``read_only`` call that took a free slot (:meth:`finish` gives it back) and needs
        no prompt, admitted in ``request()``: its requester runs it now, in its own task
        (:meth:`run_in_place`)."""
        assert self.phase is Phase.QUEUED, self.phase
        assert self.tool_class is ToolClass.READ_ONLY
        assert not self.holds_slot
        self.holds_slot = True
        self.phase = Phase.RUNNING

    async def run_in_place(self, run: LocalRun) -> ToolResult:
        """Run this ``read_only`` call, begun in place, in the caller's own task
        (``Turn.run_call``).

        No task of its own: a stop's race cancels the caller's await, and that cancellation is
        taken back here (the caller gets the discarded result), unless another one came too.
        """
        task = asyncio.current_task()
        assert task is not None
        assert self.phase is Phase.RUNNING
        self.in_place = task
        if self.env.sink is not None:  # unobserved, a start says nothing (no process to name)
            self.on_message(STARTED)
        try:
            res = await run()
        except asyncio.CancelledError:
            if not self._took_back(task):
                # Its requester stopped waiting (a framework's own cancel, a cancel from
                # outside): a read-only result nobody will read is discarded, as a race's is.
                self.discard(error="the requester's task was cancelled")
                raise
        except Exception as exc:
            self._took_back(task)  # a race whose cancel the tool turned into an error
            self._raised(exc)
        else:
            if self.race_cancelled:
                self._took_back(task)  # a race whose cancel the tool swallowed
            self._answered(res)
        finally:
            self.in_place = None
        return self.result.result()

    def _took_back(self, task: asyncio.Task[Any]) -> bool:
        """Take back the race's cancellation of ``task``: True if no other one is pending."""
        if not self.race_cancelled:
            return False
        self.race_cancelled = False
        return task.uncancel() == 0


def _outcome_of(res: HostResult, stopped: bool) -> Outcome:
    if res.status is HostStatus.OK:
        return Outcome.COMPLETED_AFTER_STOP if stopped else Outcome.COMPLETED
    if res.status in (HostStatus.ABORTED, HostStatus.CANCELLED_BY_SERVER):
        return Outcome.ABORTED
    return Outcome.FAILED


_NO_PROGRESS = Progress()
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
