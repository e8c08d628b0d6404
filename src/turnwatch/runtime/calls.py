"""One tool call's state, and the stop handlers its policy selects.

A call is resolved exactly once (:meth:`Call.finish`); everything after that — a late host result,
late progress — is dropped or, where it means a side effect outlived the runtime's wait, recorded
as such. The handlers here are the ones both the abort signal and ``abort()``'s walk run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnwatch import names
from turnwatch.runtime.clock import REAL, Clock
from turnwatch.runtime.events import EventSink, now_event
from turnwatch.runtime.gate import Prompt
from turnwatch.runtime.model import POLICY_OF, Outcome, Phase, Policy, ToolClass, ToolResult
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

#: How much collected output a call keeps (the tail), so a chatty process cannot eat memory.
OUTPUT_CAP = 256 * 1024
#: How much of one progress chunk goes into its event.
PROGRESS_TEXT_CAP = 256


@dataclass(frozen=True, slots=True)
class CallEnv:
    """What a call needs of the runtime: where its events go, who runs it, the grace window."""

    sink: EventSink | None
    host: Host
    grace_s: float
    clock: Clock = REAL


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


class Call:
    """A tool call inside a turn. Fields are owned by the runtime's event loop."""

    def __init__(
        self,
        env: CallEnv,
        turn: Owner,
        session: str,
        call_id: str,
        tool: str,
        tool_class: ToolClass,
        args: Mapping[str, Any],
    ) -> None:
        self.env = env
        self.turn = turn
        self.session = session
        self.call_id = call_id
        self.tool = tool
        self.tool_class = tool_class
        # The policy its class fixes (design §1), and both as plain strings for the hot path.
        self.policy = POLICY_OF[tool_class]
        self.class_name: str = tool_class.value
        self.policy_name: str = self.policy.value
        self.args = args
        # Where the call is; moves forward only.
        self.phase = Phase.QUEUED
        loop = asyncio.get_running_loop()
        # What the agent loop awaits: set once, by finish().
        self.result: asyncio.Future[ToolResult] = loop.create_future()
        # Set (to the stop source) when a stop reaches the call: before it starts, a set stop
        # means it never starts; after, the policy handler owns the call's end.
        self.stop: asyncio.Future[object] = loop.create_future()
        # The open permission prompt, while the call waits for one.
        self.prompt: Prompt | None = None
        # The host's execution, once the call started.
        # (None as its result: a stop came before it started, and it never did.)
        self.exec_task: asyncio.Task[HostResult | None] | None = None
        # True once the runtime stopped waiting: later progress and results are not shown.
        self.abandoned = False
        # Output seen so far (tail, capped): what a grace call returns if the host cannot answer.
        self.output: deque[str] = deque()
        self._output_len = 0
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

    @property
    def never(self) -> asyncio.Future[object]:
        """A stop that never comes: what a call watches in a mode that ignores pre-start stops."""
        return asyncio.get_running_loop().create_future()

    def emit(self, kind: str, **attrs: Any) -> None:
        """Emit an event about this call (straight to the sink: this is the busiest emitter)."""
        sink = self.env.sink
        if sink is not None:
            sink(
                now_event(
                    kind,
                    self.session,
                    turn=self.turn.id,
                    call=self.call_id,
                    tool=self.tool,
                    attrs=attrs,
                )
            )

    # --- host messages ---

    def on_message(self, message: HostMessage) -> None:
        """A ``Started`` or ``Progress`` from the host."""
        if isinstance(message, Started):
            self.pid, self.containment = message.pid, message.containment
            attrs: dict[str, Any] = {names.K_CLASS: self.class_name}
            if message.pid is not None:
                attrs.update(pid=message.pid, create_time=message.create_time)
            if message.containment is not None:
                attrs[names.K_CONTAINMENT] = message.containment
            if message.cgroup is not None:
                attrs[names.K_CGROUP] = message.cgroup
            if message.holes:
                attrs[names.K_HOLES] = list(message.holes)
            if self.turn.traceparent:  # an agent framework's run: its execute_tool joins it
                attrs[names.K_TRACEPARENT] = self.turn.traceparent
            self.emit(names.TOOL_STARTED, **attrs)
            return
        if self.abandoned or self.phase.terminal:
            return  # progress of an abandoned call stops at the stop (design §1)
        self._collect(message)
        if self.env.sink is not None:  # a chatty tool's heartbeat: no sink, no attributes
            self._heartbeat(message)

    def _collect(self, message: Progress) -> None:
        if message.text:
            self.output.append(message.text)
            self._output_len += len(message.text)
            while self._output_len > OUTPUT_CAP and len(self.output) > 1:
                self._output_len -= len(self.output.popleft())

    def _heartbeat(self, message: Progress) -> None:
        attrs: dict[str, Any] = {}
        if message.text:
            attrs[names.K_TEXT] = message.text[:PROGRESS_TEXT_CAP]
        if message.progress is not None:
            attrs[names.K_PROGRESS] = message.progress
        if message.total is not None:
            attrs[names.K_TOTAL] = message.total
        self.emit(names.TOOL_PROGRESS, **attrs)

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
        text = "".join(self.output) if output is None else output
        # The result holds the text now; a resolved call collects no more (on_message), and the
        # session keeps its calls for receipts: the buffer would be a second copy for its life.
        self.output.clear()
        self._output_len = 0
        self.result.set_result(
            ToolResult(self.call_id, self.tool, outcome, text, error_code, data, error)
        )
        if self.env.sink is not None and outcome is not Outcome.REFUSED:
            kind = (
                names.TOOL_RESULT_DISCARDED if outcome is Outcome.DISCARDED else names.TOOL_FINISHED
            )
            if error is not None:
                attrs[names.K_ERROR] = error
            self.emit(kind, outcome=outcome.value, **attrs)
        self.turn.call_done(self)
        return True

    def host_answered(self, task: asyncio.Task[HostResult | None]) -> None:
        """The call's execution ended (a done callback): resolve the call from the host's answer
        (an execution that never started has none: the stop resolved the call)."""
        try:
            self._from_task(task)
        except Exception as exc:  # a bug here must not leave the turn open forever
            _log.exception("call %s: resolving the host's answer failed", self.call_id)
            self.finish(Outcome.FAILED, error=repr(exc))

    def _from_task(self, task: asyncio.Task[HostResult | None]) -> None:
        if task.cancelled():
            self.finish(Outcome.FAILED, error="the host's execution was cancelled")
        elif (exc := task.exception()) is not None:
            # The host raised instead of answering: a host bug, said where it can be seen.
            _log.error("call %s: the host raised", self.call_id, exc_info=exc)
            self.finish(Outcome.FAILED, error=repr(exc))
        else:
            res = task.result()
            if res is not None:
                self.finish_from_host(res)

    def finish_from_host(self, res: HostResult) -> None:
        """Resolve from the host's answer (the call was not raced away)."""
        stopped = self.stop.done()
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
        extra: dict[str, Any] = {names.K_STATUS: res.status.value}
        if res.data is not None and res.data.get(names.K_LINGERING):
            # Processes the call left running: the ledger keeps them as the call's.
            extra[names.K_LINGERING] = res.data[names.K_LINGERING]
        self.finish(
            outcome, output=output, error_code=code, data=res.data, error=res.error or None, **extra
        )

    # --- the stop handlers (policy) ---

    def close_before_start(self) -> None:
        """A stop before the call started: it never starts, and its prompt can never be approved."""
        if self.prompt is not None and self.prompt.close():
            self.emit(names.PERMISSION_CANCELLED)
        self.finish(Outcome.ABORTED, error_code=names.TOOL_ABORTED, before_start=True)

    def send_abort(self, source: str) -> None:
        """Send the typed ``tools.abort`` for this call to the host."""
        self.abort_sent = True
        if self.env.sink is not None:  # no sink: not even the attributes are built
            self.emit(
                names.TOOLS_ABORT_SENT,
                policy=self.policy_name,
                **{names.K_CLASS: self.class_name},
                source=source,
            )
        self.env.host.abort(
            AbortRequest(
                self.session,
                self.turn.id,
                self.call_id,
                self.tool,
                source,
                self.env.grace_s,
                self.turn.traceparent,
                # On real time only: a test's manual clock is not the host's unless it says so.
                time.monotonic() + self.env.grace_s if self.env.clock is REAL else None,
            )
        )

    def race(self) -> None:
        """``race``: the wait ends now; the host discards the result."""
        self.abandoned = True
        self.finish(
            Outcome.DISCARDED, output="", error_code=names.TOOL_ABORTED, policy=Policy.RACE.value
        )

    async def grace(self, window: float) -> None:
        """``grace``: wait at most ``window`` for the host's collected output, then give up."""
        assert self.exec_task is not None
        if await self.env.clock.wait(self.exec_task, window):
            self._from_task(self.exec_task)
            return
        self.abandoned = True
        self.emit(names.TOOL_GRACE_EXPIRED, grace_s=window)
        self.finish(
            Outcome.ABORTED,
            error_code=names.TOOL_ABORTED,
            policy=Policy.GRACE.value,
            grace_expired=True,
        )

    async def await_result(self) -> None:
        """``await``: the result arrives, however late; the turn waits for it."""
        assert self.exec_task is not None
        await asyncio.wait((self.exec_task,))
        self._from_task(self.exec_task)


def _outcome_of(res: HostResult, stopped: bool) -> Outcome:
    if res.status is HostStatus.OK:
        return Outcome.COMPLETED_AFTER_STOP if stopped else Outcome.COMPLETED
    if res.status in (HostStatus.ABORTED, HostStatus.CANCELLED_BY_SERVER):
        return Outcome.ABORTED
    return Outcome.FAILED


_PHASE_OF: Mapping[Outcome, Phase] = {
    Outcome.COMPLETED: Phase.FINISHED,
    Outcome.COMPLETED_AFTER_STOP: Phase.FINISHED,
    Outcome.FAILED: Phase.FAILED,
    Outcome.ABORTED: Phase.ABORTED,
    Outcome.DISCARDED: Phase.DISCARDED,
    Outcome.REFUSED: Phase.ABORTED,
    Outcome.DENIED: Phase.FAILED,
}

StopHandler = Callable[[Call], None]
