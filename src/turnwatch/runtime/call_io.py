"""What a call says and hears: the events it emits, the host's messages (its start, its
progress), and the answer that resolves it, from the host or from its requester's own task.

:class:`CallIO` is the base of :class:`~turnwatch.runtime.calls.Call`, which keeps the call's
state and its transitions (``calls``): the two are one object, its slots declared there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from turnwatch import names
from turnwatch.runtime.clock import REAL, Clock
from turnwatch.runtime.events import NO_ATTRS, Event, EventSink, new_event
from turnwatch.runtime.messages import (
    PROGRESS_EVERY_S,
    OutputTail,
    coalesced,
    progress_attrs,
    started_attrs,
)
from turnwatch.runtime.model import Outcome, Phase, StopSource, ToolClass, ToolResult
from turnwatch.runtime.protocol import Host, HostMessage, HostResult, HostStatus, Progress, Started

# The logger a call always said its failures on (a logging config that names it still works).
_log = logging.getLogger("turnwatch.runtime.calls")


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


class TurnIds(Protocol):
    """What a call says of its turn in its events."""

    @property
    def id(self) -> str: ...

    @property
    def traceparent(self) -> str | None: ...


#: A call's execution run in this process by whoever requested it (see ``Turn.request``).
LocalRun = Callable[[], Awaitable[HostResult]]
#: What a call run by its requester says when it starts (it has no process to name).
STARTED = Started()


class CallIO:
    """A call's events, its host's messages and its answers (see the module)."""

    # What it says and hears keeps here (Call's transitions read it, and set some).
    __slots__ = (
        "_answered_in_task",
        "containment",
        "exec_task",
        "in_place",
        "next_progress",
        "output",
        "pending_progress",
        "pid",
        "race_cancelled",
    )

    _answered_in_task: bool
    containment: str | None
    exec_task: asyncio.Task[HostResult | None] | None
    in_place: asyncio.Task[Any] | None
    next_progress: float
    output: OutputTail | None
    pending_progress: Progress | None
    pid: int | None
    race_cancelled: bool

    if TYPE_CHECKING:  # the call's own state, in Call's slots
        env: CallEnv
        turn: TurnIds
        session: str
        call_id: str
        tool: str
        tool_class: ToolClass
        class_name: str
        phase: Phase
        result: asyncio.Future[ToolResult]
        stop_source: StopSource | None
        abandoned: bool

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
        ) -> bool: ...

        def discard(self, **attrs: Any) -> None: ...

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

    # --- the answer ---

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
