"""A turn: requests its calls, runs each one's lifecycle (admission, permission, start), shares
one stop among them, and settles. Its :class:`~turnwatch.runtime.session.Session` owns which turn
is live and whether the UI shows "processing"; the runtime owns the stop.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from turnwatch import names
from turnwatch.runtime.calls import STARTED, Call, CallEnv, LocalRun
from turnwatch.runtime.gate import Admission
from turnwatch.runtime.handle import CallHandle
from turnwatch.runtime.model import (
    CallIdReusedError,
    Mode,
    Outcome,
    Phase,
    StopSource,
    ToolClass,
    ToolResult,
    TurnOutcome,
    class_of,
)
from turnwatch.runtime.protocol import ExecuteRequest, HostResult
from turnwatch.runtime.registry import AbortRegistry
from turnwatch.runtime.retention import CALL, MAX_SETTLED_TURNS

AskPermission = Callable[[str, ToolClass], bool]


@dataclass(frozen=True, slots=True)
class SessionEnv:
    """What sessions and turns need of the runtime."""

    call: CallEnv
    mode: Mode
    registry: AbortRegistry
    ask_permission: AskPermission | None
    max_running: int
    #: Whether a read-only call may run in its requester's own task (the mode's rules say).
    runs_in_place: bool = True
    #: Told (the session's id) when a session's "processing" clears: the runtime's retention
    #: counts it settled.
    on_idle: Callable[[str], None] | None = None
    #: Settled turns a session keeps whole; older ones are folded (runtime.retention).
    max_settled_turns: int = MAX_SETTLED_TURNS
    #: The runtime's stop of a turn (its walk, source ``framework``): how ``finish(FAILED)``
    #: releases the calls a raising agent loop left in flight.
    stop: Callable[[Turn], Coroutine[Any, Any, object]] | None = None


class Owner(Protocol):
    """What a turn needs of its session (:class:`~turnwatch.runtime.session.Session`)."""

    @property
    def id(self) -> str: ...

    @property
    def env(self) -> SessionEnv: ...

    @property
    def admission(self) -> Admission: ...

    @property
    def used_call_ids(self) -> set[str]:
        """The call ids of the turns the session keeps whole."""

    def folded(self, kind: str, ident: str) -> bool:
        """True if a folded turn's ``ident`` is of ``kind`` (``runtime.retention``'s kinds)."""

    def emit(self, kind: str, turn: str | None, attrs: Mapping[str, Any] | None = None) -> None:
        """Send a session-level event."""

    def turn_settled(self, turn: Turn) -> None:
        """``turn`` settled."""


class Turn:
    """A turn: at most one is live per session. Its calls share its stop."""

    def __init__(self, session: Owner, turn_id: str) -> None:
        self.session = session
        self.id = turn_id
        self.calls: dict[str, Call] = {}
        # Calls not yet resolved; the turn can settle only at zero.
        self._open = 0
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        # The turn's outcome, set once at settlement.
        self.settled: asyncio.Future[TurnOutcome] = loop.create_future()
        # The first stop's task (later stops join it).
        self.stop_task: asyncio.Task[None] | None = None
        # When the first stop reached the turn (monotonic seconds), for "pinned" judgements.
        self.stop_started: float | None = None
        # When it settled (monotonic seconds): "processing" left set long after is a pin.
        self.settled_at: float | None = None
        # True once an ADR walk ran (a watchdog stop walks even a legacy turn once).
        self.walked = False
        # What a stop settles the turn as: aborted, or failed when the agent loop raised and
        # the stop released what it left running (finish(FAILED)).
        self.stop_outcome = TurnOutcome.ABORTED
        # The walk's task that ends what the turn's finished calls left running.
        self.lingering: asyncio.Task[None] | None = None
        # The trace this turn belongs to (an agent framework's run span), if any: a stop that
        # brings no traceparent of its own joins it.
        self.traceparent: str | None = None
        # Called once, when the first stop reaches the turn (an agent framework's own cancel).
        self.on_stop: list[Callable[[], object]] = []
        # Nested runs started by this turn's tools: each child turn and its stop; and the
        # stops of those still live when this turn's stop began (it settles after them).
        self._children: list[tuple[Turn, Callable[..., Coroutine[Any, Any, object]]]] = []
        self._child_stops: list[asyncio.Task[object]] = []
        # Calls whose permission is asked whatever ask_permission says (a framework's approval).
        self._ask: dict[str, bool] = {}
        self._seq = itertools.count(1)

    @property
    def stopping(self) -> bool:
        """True once a stop reached the turn."""
        return self.stop_task is not None

    @property
    def over(self) -> bool:
        """Settled, its stop returned, nothing it left running, and every call's execution
        ended (a raced or abandoned call's host may still answer): nothing more can happen to
        it but what arrives late, which its ids' hashes answer once it is folded."""
        return (
            self.settled.done()
            and (self.stop_task is None or self.stop_task.done())
            and (self.lingering is None or self.lingering.done())
            and all(c.exec_task is None and c.in_place is None for c in self.calls.values())
        )

    def adopt(self, child: Turn, stop: Callable[..., Coroutine[Any, Any, object]]) -> None:
        """``child`` is a nested run's turn, started by one of this turn's tools; ``stop``
        (``source=``) stops it."""
        self._children = [(t, s) for t, s in self._children if not t.settled.done()]
        self._children.append((child, stop))

    def stop_children(self, source: StopSource) -> None:
        """This turn's stop began: stop its nested runs still live, with the same source."""
        loop = asyncio.get_running_loop()
        self._child_stops = [
            loop.create_task(stop(source=source), name=f"stop {child.id} (nested)")
            for child, stop in self._children
            if not child.settled.done()
        ]
        self._children.clear()

    async def children_stopped(self) -> None:
        """Until the nested runs this turn's stop stopped have settled (an error in one is
        theirs, logged where it happened: the parent still settles)."""
        if self._child_stops:
            await asyncio.gather(*self._child_stops, return_exceptions=True)
            self._child_stops.clear()

    def next_call_id(self) -> str:
        """A call id never used in this session: the turn id is never reused."""
        return f"{self.id}.c{next(self._seq)}"

    # --- what a call needs of its turn (calls.Owner) ---

    def release_slot(self) -> None:
        self.session.admission.release()

    def call_done(self, call: Call) -> None:
        self._open -= 1
        if self._open == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Until every call of the turn is resolved."""
        # Looked at again on waking: a call another task requested in the step the last open
        # one resolved in is in flight, though the event woke us (asyncio's wait() returns
        # once set, cleared since or not), and a turn settled over it settled over a running
        # call.
        while not self._idle.is_set():
            await self._idle.wait()

    @property
    def in_flight(self) -> bool:
        """True while a call of the turn is unresolved."""
        return not self._idle.is_set()

    # --- calls ---

    def request(
        self,
        tool: str,
        args: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        tool_class: str | None = None,
        ask_permission: bool | None = None,
        run: LocalRun | None = None,
    ) -> CallHandle:
        """Ask for a tool call; returns at once with a handle whose ``result()`` you await.

        ``ask_permission`` overrides the runtime's ``ask_permission`` for this call. True opens
        the call's prompt at once: an agent framework that asks for its own approvals has it on
        screen already, and its answer may come before the call is admitted.

        ``run`` is the call's execution when the requester runs its tools in this process (an
        agent framework's handler): once the call is admitted, ``run()`` is the call's execution
        task, in the requester's context, instead of a ``tools.execute`` to the host. A stop
        treats it as the host would: a ``read_only`` call's task is cancelled and its result
        discarded; other classes are awaited. ``process`` calls always run on the host, where
        their processes are contained.
        """
        return CallHandle(
            self._request(tool, args, call_id, tool_class, ask_permission, run, in_place=False)
        )

    async def run_call(
        self,
        tool: str,
        run: LocalRun,
        args: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        tool_class: str | None = None,
    ) -> ToolResult:
        """Request a call whose execution is ``run()`` (see :meth:`request`) and wait for it.

        A ``read_only`` call admitted at once runs in the caller's own task, in place: a stop
        cancels that await (its result discarded, as the host's would be) and this returns the
        discarded result, unless the caller's task was cancelled by someone else too. Other
        classes run in a task of their own, which the caller's cancellation cannot reach.
        """
        call = self._request(tool, args, call_id, tool_class, None, run, in_place=True)
        if call.phase is not Phase.RUNNING:  # not begun here: it waits, or ended already
            return await CallHandle(call).result()
        return await call.run_in_place(run)

    def _request(
        self,
        tool: str,
        args: Mapping[str, Any] | None,
        call_id: str | None,
        tool_class: str | None,
        ask_permission: bool | None,
        run: LocalRun | None,
        *,
        in_place: bool,
    ) -> Call:
        sess, env = self.session, self.session.env
        cls = class_of(tool, tool_class)
        if run is not None and cls is ToolClass.PROCESS:
            raise ValueError(f"{tool!r}: a process call runs on the host, not in its requester")
        cid = call_id or self.next_call_id()
        if cid in sess.used_call_ids or sess.folded(CALL, cid):
            raise CallIdReusedError(f"call id {cid!r} was already used in session {sess.id!r}")
        sess.used_call_ids.add(cid)
        call = Call(env.call, self, sess.id, cid, tool, cls, dict(args or {}), run is not None)
        self.calls[cid] = call
        if ask_permission is not None:
            self._ask[cid] = ask_permission
        self._open += 1
        if self._open == 1:  # set only while none is open (call_done)
            self._idle.clear()
        if env.call.sink is not None:  # no sink: not even the attributes are built
            call.emit(
                names.TOOL_REQUESTED, **{names.K_CLASS: call.class_name}, policy=call.policy_name
            )
        early = env.registry.take(sess.id, self.id, cid, tool)
        if self.stop_task is not None or self.settled.done() or early is not None:
            # The agent loop asked after the stop (or an early abort named this very call).
            call.emit(
                names.TOOL_REFUSED,
                error_code=names.TOOL_ABORTED,
                reason="early_abort" if early else "after_stop",
            )
            call.finish(Outcome.REFUSED, error_code=names.TOOL_ABORTED)
        else:
            if ask_permission:
                call.open_prompt()
            # Asked for this call (a framework's approval), else as the runtime's rule says.
            asks = self._ask.pop(cid, None) if self._ask else None
            if asks is None:
                asks = env.ask_permission is not None and env.ask_permission(tool, cls)
            # The common case needs no task of its own: no prompt, a free slot, start now.
            if asks or not self.session.admission.try_acquire():
                task = self._lifecycle(call, asks, run)
                asyncio.get_running_loop().create_task(task, name=f"call {cid}")
            elif in_place and cls is ToolClass.READ_ONLY and env.runs_in_place:
                call.begin_in_place()  # with its slot; the caller runs it now, in its own task
            else:
                call.hold_slot()
                self._start(call, run)
        return call

    async def _lifecycle(self, call: Call, asks: bool, run: LocalRun | None) -> None:
        """A call that waits, for a slot or for its permission prompt, then starts."""
        try:
            if not await self.session.admission.acquire(call.prestart_stop):
                return
            call.hold_slot()
            if asks:
                prompt = call.prompt or call.open_prompt()
                approved = await prompt.wait(call.prestart_stop)
                if approved is None:
                    return
                if not approved:
                    call.finish(Outcome.DENIED, error_code="PERMISSION_DENIED")
                    return
            self._start(call, run)
        except Exception as exc:  # a bug here must not leave the turn open forever
            call.finish(Outcome.FAILED, error=repr(exc))
            raise

    def _start(self, call: Call, run: LocalRun | None) -> None:
        """An admitted call: its execution is scheduled, and begins unless a stop comes first."""
        # A stop does not wake the execution: its handler resolves the call itself (a walk over
        # 10,000 calls must not wake 10,000 tasks), and an answer that comes after is then
        # dropped or, if a side effect outlived the wait, recorded.
        call.admit(
            asyncio.get_running_loop().create_task(
                self._execute(call, run), name=f"execute {call.call_id}"
            )
        )

    async def _execute(self, call: Call, run: LocalRun | None) -> HostResult | None:
        if not call.begin():
            return None  # stopped between admission and start: it never starts
        # No await between begin() and the execution's first step: the start is atomic.
        if run is not None:  # its requester's own execution, not the host's
            if call.env.sink is not None:  # unobserved, a start with no process says nothing
                call.on_message(STARTED)
            res = await run()
        else:
            req = ExecuteRequest(
                self.session.id,
                self.id,
                call.call_id,
                call.tool,
                call.tool_class,
                call.args,
                self.traceparent,
            )
            res = await self.session.env.call.host.execute(req, call.on_message)
        call.answered_in_task(res)  # not in the done callback: the caller wakes sooner
        return res

    # --- settlement ---

    async def finish(self, outcome: TurnOutcome = TurnOutcome.COMPLETED) -> TurnOutcome:
        """The agent loop is done: settle the turn with ``outcome`` once its calls are resolved,
        or join the stop that is settling it. ``failed`` (the loop raised) with calls in flight
        releases them as a stop does (source ``framework``) and settles the turn failed."""
        if self.stop_task is not None or self.settled.done():
            return await asyncio.shield(self.settled)
        stop = self.session.env.stop
        if outcome is TurnOutcome.FAILED and self.in_flight and stop is not None:
            # The loop raised: nobody will take these calls' results. They are released as a
            # stop releases them (a turn abort, TOOL_ABORTED: a process call ended within the
            # grace window, a write awaited, a prompt closed), and the turn is recorded failed.
            # Waited for, a Bash that ignores SIGTERM held the turn for as long as it ran.
            self.stop_outcome = TurnOutcome.FAILED
            await stop(self)
            return await asyncio.shield(self.settled)
        await self.wait_idle()
        if not self.settled.done() and self.stop_task is None:
            self.settle(outcome)
        return await asyncio.shield(self.settled)

    def settle(self, outcome: TurnOutcome) -> None:
        """Settle once: ``turn.settled``; the session is no longer this turn's."""
        if self.settled.done():
            return
        sess = self.session
        sess.emit(
            names.TURN_SETTLED,
            self.id,
            {names.K_OUTCOME: outcome.value, names.K_MODE: sess.env.mode.value},
        )
        sess.env.registry.forget_turn(sess.id, self.id)
        self.settled_at = time.monotonic()
        sess.turn_settled(self)
        self.settled.set_result(outcome)
